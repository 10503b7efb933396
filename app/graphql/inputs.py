"""Mutation inputs and their translation into the services' drafts and patches.

In patches an omitted field means "keep" and an explicit ``null`` means "clear" where the
field is nullable (description, instructions, schedule input). For a field that cannot be
empty (an agent's name, a memory's value), ``null`` is rejected, naming the field, rather
than silently ignored.
"""

from __future__ import annotations

from typing import Any, TypeVar

import strawberry
from strawberry.scalars import JSON

from app.domain.agents import AgentStatus, OverlapPolicy
from app.domain.errors import ValidationFailed
from app.domain.mcp import Transport
from app.domain.policy import Decision
from app.domain.runs import RunStatus
from app.graphql.ids import from_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.services.agents import AgentDraft, AgentPatch
from app.services.mcp_servers import ServerDraft, ServerPatch
from app.services.memories import MemoryDraft
from app.services.memories import MemoryPatch as MemoryChanges
from app.services.runs import RunFilter
from app.services.schedules import ScheduleDraft
from app.services.schedules import SchedulePatch as ScheduleChanges
from app.services.validation import KEEP, Keep

T = TypeVar("T")


@strawberry.input(
    name="PolicyRuleInput", description="One policy rule: calls of tools matching `tool` get `decision`."
)
class PolicyRuleInput:
    tool: str = strawberry.field(description="Glob over tool names, e.g. 'webhook.*' or 'mcp.crm.*'.")
    decision: Decision = strawberry.field(description="What a call of a matching tool gets.")
    timeout_s: int | None = strawberry.field(
        default=None,
        name="timeoutS",
        description="REQUIRE_APPROVAL only: expire the approval after this long.",
    )

    def to_json(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"tool": self.tool, "decision": self.decision.value}
        if self.timeout_s is not None:
            rule["timeoutS"] = self.timeout_s
        return rule


@strawberry.input(name="PolicyInput", description="An agent's policy: docs/concepts/policy.md.")
class PolicyInput:
    default: Decision | None = strawberry.field(
        default=None,
        description="What a call no rule matches gets; null or left out: the tool's risk class decides.",
    )
    rules: list[PolicyRuleInput] | None = strawberry.field(
        default=None, description="The rules in order; the first matching one decides."
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "default": None if self.default is None else self.default.value,
            "rules": [r.to_json() for r in self.rules or []],
        }


@strawberry.input(
    name="MemoryBudgetInput", description="How much memory is injected at the start of each run."
)
class MemoryBudgetInput:
    max_items: int | None = strawberry.field(
        default=strawberry.UNSET,
        description="At most this many memories injected per run (20 when not given).",
    )
    max_chars: int | None = strawberry.field(
        default=strawberry.UNSET,
        description="At most this many characters of memory injected per run (4000 when not given).",
    )


@strawberry.input(name="CreateAgentInput", description="A new agent: only name and model are required.")
class CreateAgentInput:
    name: str = strawberry.field(description="Unique in the workspace.")
    model: JSON = strawberry.field(
        description="The model to run on: `{provider, model, ...}` (docs/extending/providers.md)."
    )
    description: str | None = strawberry.field(default=None, description="What the agent is for.")
    instructions: str | None = strawberry.field(default=None, description="The system prompt.")
    tools: list[str] | None = strawberry.field(
        default=None,
        description="Name patterns of the tools it is offered, e.g. 'memory.*'; none when left out.",
    )
    policy: PolicyInput | None = strawberry.field(
        default=None, description="What its tool calls are allowed; left out: each tool's risk class decides."
    )
    memory_budget: MemoryBudgetInput | None = strawberry.field(
        default=None, description="How much memory is injected per run; the defaults when left out."
    )
    status: AgentStatus | None = strawberry.field(default=None, description="ACTIVE when left out.")
    budget: JSON | None = strawberry.field(
        default=None, description="Budget limits (docs/concepts/budgets.md)."
    )
    input_schema: JSON | None = strawberry.field(
        default=None,
        description="JSON Schema 2020-12 a run's input must match (startRun, schedules); none: any input.",
    )

    def to_draft(self) -> AgentDraft:
        budget = self.memory_budget
        return AgentDraft(
            name=self.name,
            model=self.model,
            description=self.description,
            instructions=self.instructions,
            tools=self.tools,
            policy=None if self.policy is None else self.policy.to_json(),
            memory_max_items=None if budget is None else _or_none(budget.max_items),
            memory_max_chars=None if budget is None else _or_none(budget.max_chars),
            status=self.status,
            budget=self.budget,
            input_schema=self.input_schema,
        )


@strawberry.input(name="UpdateAgentInput", description="Omitted fields are kept; null clears a nullable one.")
class UpdateAgentInput:
    name: str | None = strawberry.field(
        default=strawberry.UNSET, description="A new name, unique in the workspace."
    )
    description: str | None = strawberry.field(
        default=strawberry.UNSET, description="What the agent is for; null clears it."
    )
    instructions: str | None = strawberry.field(
        default=strawberry.UNSET, description="The system prompt; null clears it."
    )
    model: JSON | None = strawberry.field(
        default=strawberry.UNSET,
        description="The model to run on: `{provider, model, ...}` (docs/extending/providers.md).",
    )
    tools: list[str] | None = strawberry.field(
        default=strawberry.UNSET,
        description="Name patterns of the tools it is offered; the whole list is replaced.",
    )
    policy: PolicyInput | None = strawberry.field(
        default=strawberry.UNSET,
        description="The whole policy, replaced; null: each tool's risk class decides.",
    )
    memory_budget: MemoryBudgetInput | None = strawberry.field(
        default=strawberry.UNSET, description="The limits to change; a limit left out is kept."
    )
    status: AgentStatus | None = strawberry.field(
        default=strawberry.UNSET, description="ACTIVE, PAUSED (its runs are held) or ARCHIVED."
    )
    budget: JSON | None = strawberry.field(
        default=strawberry.UNSET, description="null: no budget of its own."
    )
    input_schema: JSON | None = strawberry.field(
        default=strawberry.UNSET, description="JSON Schema 2020-12 for run inputs; null: any input."
    )

    def to_patch(self) -> AgentPatch:
        budget = self.memory_budget if self.memory_budget else MemoryBudgetInput()
        policy = _given(self.policy)
        return AgentPatch(
            name=_required(self.name, "name"),
            description=_given(self.description),
            instructions=_given(self.instructions),
            model=_required(self.model, "model"),
            # null tools or policy: back to "none offered" / the empty policy (risk defaults).
            tools=KEEP if self.tools is strawberry.UNSET else (self.tools or []),
            policy=policy if isinstance(policy, Keep) or policy is None else policy.to_json(),
            memory_max_items=_required(budget.max_items, "memoryBudget.maxItems"),
            memory_max_chars=_required(budget.max_chars, "memoryBudget.maxChars"),
            status=_required(self.status, "status"),
            budget=KEEP if self.budget is strawberry.UNSET else self.budget,
            input_schema=KEEP if self.input_schema is strawberry.UNSET else self.input_schema,
        )


@strawberry.input(name="CreateMemoryInput", description="A new memory: createMemory's `memory`.")
class CreateMemoryInput:
    key: str = strawberry.field(description="What the memory is about; unique among the agent's memories.")
    value: str = strawberry.field(description="The text to inject into runs' context.")
    tags: list[str] | None = strawberry.field(default=None, description="Labels to filter by.")
    importance: float | None = strawberry.field(
        default=None, description="0..1 (0.5 when not given); with recency, decides what is injected first."
    )

    def to_draft(self) -> MemoryDraft:
        return MemoryDraft(key=self.key, value=self.value, tags=self.tags, importance=self.importance)


@strawberry.input(name="UpdateMemoryInput", description="updateMemory's `changes`: omitted fields are kept.")
class UpdateMemoryInput:
    key: str | None = strawberry.field(
        default=strawberry.UNSET, description="A new key, unique among the agent's memories."
    )
    value: str | None = strawberry.field(default=strawberry.UNSET, description="A new value.")
    tags: list[str] | None = strawberry.field(
        default=strawberry.UNSET, description="The tags, replaced as a whole."
    )
    importance: float | None = strawberry.field(
        default=strawberry.UNSET, description="A new importance, 0..1."
    )

    def to_changes(self) -> MemoryChanges:
        return MemoryChanges(
            key=_required(self.key, "key"),
            value=_required(self.value, "value"),
            tags=KEEP if self.tags is strawberry.UNSET else (self.tags or []),
            importance=_required(self.importance, "importance"),
        )


@strawberry.input(
    name="CreateScheduleInput",
    description="A new schedule, createSchedule's `schedule`: only cron is required.",
)
class CreateScheduleInput:
    cron: str = strawberry.field(description="The cron expression to fire on, read in `timezone`.")
    timezone: str | None = strawberry.field(
        default=None, description="An IANA timezone name, e.g. Europe/Paris (UTC when not given)."
    )
    input: JSON | None = strawberry.field(
        default=None,
        description="The input every run it starts gets; checked against the agent's inputSchema.",
    )
    enabled: bool | None = strawberry.field(default=None, description="True when not given.")
    overlap_policy: OverlapPolicy | None = strawberry.field(
        default=None,
        description="What to do when a fire time comes while its last run is unfinished (SKIP when not given).",
    )
    budget: JSON | None = strawberry.field(
        default=None,
        description="Tightens the agent's budget for every run it starts (docs/concepts/budgets.md).",
    )
    max_concurrent_runs: int | None = strawberry.field(
        default=None,
        description="Overlap ALLOW: at most this many of its runs unfinished at once (default 3).",
    )

    def to_draft(self) -> ScheduleDraft:
        return ScheduleDraft(
            cron=self.cron,
            timezone=self.timezone,
            input=self.input,
            enabled=self.enabled,
            overlap_policy=self.overlap_policy,
            budget=self.budget,
            max_concurrent_runs=self.max_concurrent_runs,
        )


@strawberry.input(
    name="UpdateScheduleInput",
    description="updateSchedule's `changes`: omitted fields are kept; null input clears it.",
)
class UpdateScheduleInput:
    cron: str | None = strawberry.field(default=strawberry.UNSET, description="A new cron expression.")
    timezone: str | None = strawberry.field(default=strawberry.UNSET, description="A new IANA timezone name.")
    input: JSON | None = strawberry.field(
        default=strawberry.UNSET, description="A new input for the runs it starts; null clears it."
    )
    enabled: bool | None = strawberry.field(
        default=strawberry.UNSET,
        description="False stops it firing; true starts it again from the next fire time.",
    )
    overlap_policy: OverlapPolicy | None = strawberry.field(
        default=strawberry.UNSET, description="A new overlap policy."
    )
    budget: JSON | None = strawberry.field(default=strawberry.UNSET, description="null clears it.")
    max_concurrent_runs: int | None = strawberry.field(
        default=strawberry.UNSET, description="null: the default (3)."
    )

    def to_changes(self) -> ScheduleChanges:
        return ScheduleChanges(
            cron=_required(self.cron, "cron"),
            timezone=_required(self.timezone, "timezone"),
            input=_given(self.input),
            enabled=_required(self.enabled, "enabled"),
            overlap_policy=_required(self.overlap_policy, "overlapPolicy"),
            budget=_given(self.budget),
            max_concurrent_runs=_given(self.max_concurrent_runs),
        )


@strawberry.input(
    name="CreateMcpServerInput", description="A new MCP server: its name, transport, and url or command."
)
class CreateMcpServerInput:
    name: str = strawberry.field(description="[a-z][a-z0-9_-]{0,31}; its tools are mcp.<name>.<tool>.")
    transport: Transport = strawberry.field(
        description="How Enverif reaches the server: url for STREAMABLE_HTTP, command for STDIO."
    )
    url: str | None = strawberry.field(default=None, description="STREAMABLE_HTTP: the server's endpoint.")
    command: list[str] | None = strawberry.field(
        default=None, description="STDIO: the program (on ENVERIF_MCP_STDIO_COMMANDS) and its arguments."
    )
    enabled: bool | None = strawberry.field(default=None, description="True when not given.")
    headers: JSON | None = strawberry.field(
        default=None,
        description='Header name -> the NAME of an environment variable on ENVERIF_MCP_SECRET_ENVS ({"Authorization": "CRM_TOKEN"}).',
    )
    tool_risk: JSON | None = strawberry.field(
        default=None, description="Tool name -> RiskClass, overriding what its annotations say."
    )

    def to_draft(self) -> ServerDraft:
        return ServerDraft(
            name=self.name,
            transport=self.transport,
            url=self.url,
            command=self.command,
            enabled=self.enabled,
            headers=self.headers,
            tool_risk=self.tool_risk,
        )


@strawberry.input(name="UpdateMcpServerInput", description="Omitted fields are kept.")
class UpdateMcpServerInput:
    url: str | None = strawberry.field(
        default=strawberry.UNSET, description="A new endpoint (STREAMABLE_HTTP)."
    )
    command: list[str] | None = strawberry.field(
        default=strawberry.UNSET, description="A new command and arguments (STDIO)."
    )
    enabled: bool | None = strawberry.field(
        default=strawberry.UNSET, description="False stops offering its tools to agents."
    )
    headers: JSON | None = strawberry.field(
        default=strawberry.UNSET, description="Header name -> environment variable name, replaced as a whole."
    )
    tool_risk: JSON | None = strawberry.field(
        default=strawberry.UNSET, description="Tool name -> RiskClass, replaced as a whole."
    )

    def to_patch(self) -> ServerPatch:
        return ServerPatch(
            url=_given(self.url),
            command=_given(self.command),
            enabled=_required(self.enabled, "enabled"),
            headers=_given(self.headers),
            tool_risk=_given(self.tool_risk),
        )


# The older names of the four inputs above (docs/graphql/guide.md: names): the same fields,
# taken by the deprecated `input` argument of the same mutations. GraphQL has no aliases for
# types, and a variable declared `MemoryInput!` must keep validating.


@strawberry.input(
    name="MemoryInput",
    description="The older name of CreateMemoryInput (createMemory's deprecated `input`); the same fields.",
)
class MemoryInput(CreateMemoryInput):
    pass


@strawberry.input(
    name="MemoryPatch",
    description="The older name of UpdateMemoryInput (updateMemory's deprecated `input`); the same fields.",
)
class MemoryPatch(UpdateMemoryInput):
    pass


@strawberry.input(
    name="ScheduleInput",
    description="The older name of CreateScheduleInput (createSchedule's deprecated `input`); the same fields.",
)
class ScheduleInput(CreateScheduleInput):
    pass


@strawberry.input(
    name="SchedulePatch",
    description="The older name of UpdateScheduleInput (updateSchedule's deprecated `input`); the same fields.",
)
class SchedulePatch(UpdateScheduleInput):
    pass


def one_of(current: T | None, older: T | None, *, name: str, older_name: str = "input") -> T:
    """The argument given of a current one and the older, deprecated one it replaces: exactly
    one of them (each is nullable in the schema so that either may be left out)."""
    if current is not None and older is not None:
        raise ValidationFailed(f"give `{name}` or the older `{older_name}`, not both", field=older_name)
    chosen = current if current is not None else older
    if chosen is None:
        raise ValidationFailed(f"`{name}` is required", field=name)
    return chosen


def _given(value: T | None) -> T | Keep | None:
    return KEEP if value is strawberry.UNSET else value


def _required(value: T | None, field: str) -> T | Keep:
    """A patch field that may be omitted but, when given, cannot be null."""
    if value is strawberry.UNSET:
        return KEEP
    if value is None:
        raise ValidationFailed(f"{field} cannot be null; omit it to keep the current value", field=field)
    return value


def _or_none(value: T | None) -> T | None:
    return None if value is strawberry.UNSET else value


@strawberry.input(
    name="RunFilterInput", description="Which runs cancelRuns cancels; every field given must match."
)
class RunFilterInput:
    agent_id: strawberry.ID | None = strawberry.field(
        default=None, description="Runs of this agent (global id)."
    )
    status: list[RunStatus] | None = strawberry.field(
        default=None, description="Runs in any of these statuses."
    )
    roots_only: bool = strawberry.field(
        default=False, description="True: root runs only (their children are cancelled with them)."
    )

    def to_filter(self) -> RunFilter:
        agent = (
            None if self.agent_id is None else from_global_id(self.agent_id, "Agent", field="filter.agentId")
        )
        statuses = tuple(sorted(set(self.status or ()), key=lambda s: s.value))
        return RunFilter(agent_id=agent, statuses=statuses, roots_only=self.roots_only)
