"""Agent, its policy and memory budget, and the agent connection."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.agents import AgentStatus
from app.domain.global_ids import object_id
from app.domain.policy import Decision
from app.domain.runs import RunStatus
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.graphql.types.node import NODE_ID, Connection, Node, Paged, keyset_connection
from app.services import reads
from app.services.reads import PageRequest

if TYPE_CHECKING:
    from app.graphql.types.memories import MemoryConnection
    from app.graphql.types.runs import RunConnection
    from app.graphql.types.schedules import Schedule
    from app.graphql.types.versions import AgentVersionConnection


@strawberry.type(
    name="PolicyRule", description="One rule of a policy: calls of tools matching `tool` get `decision`."
)
class PolicyRule:
    id: strawberry.ID = strawberry.field(description="The rule's id: its agent's policy and its place in it.")
    tool: str = strawberry.field(description="Glob over tool names, e.g. 'webhook.*'.")
    decision: Decision = strawberry.field(description="What a call of a matching tool gets.")
    timeout_s: int | None = strawberry.field(
        name="timeoutS", description="REQUIRE_APPROVAL only: the approval expires after this many seconds."
    )


@strawberry.type(
    name="Policy", description="What an agent's tool calls are allowed: docs/concepts/policy.md."
)
class Policy:
    id: strawberry.ID = strawberry.field(description="The policy's id (one per agent; not a node).")
    default: Decision | None = strawberry.field(
        description="What a call no rule matches gets; null: the tool's risk class decides (RiskClass)."
    )
    rules: list[PolicyRule] = strawberry.field(
        description="The rules in order; the first whose tool pattern matches decides."
    )

    @classmethod
    def from_json(cls, raw: Any, *owner: int) -> Policy:
        """``owner``: the agent's id, and the version's number for a version's policy (so
        an old version's policy and rules never share an id with the agent's current ones).
        Stored policies were validated on the way in; read leniently all the same, so one
        odd row can never make an agent unreadable."""
        raw = raw if isinstance(raw, dict) else {}
        valid = [
            r
            for r in raw.get("rules") or []
            if isinstance(r, dict)
            and isinstance(r.get("tool"), str)
            and r.get("decision") in Decision.__members__
        ]
        rules = [
            PolicyRule(
                id=strawberry.ID(object_id("PolicyRule", *owner, index)),
                tool=r["tool"],
                decision=Decision(r["decision"]),
                timeout_s=r["timeoutS"] if isinstance(r.get("timeoutS"), int) else None,
            )
            for index, r in enumerate(valid)
        ]
        default = raw.get("default")
        return cls(
            id=strawberry.ID(object_id("Policy", *owner)),
            default=Decision(default) if default in Decision.__members__ else None,
            rules=rules,
        )


@strawberry.type(name="MemoryBudget", description="How much memory is injected at the start of a run.")
class MemoryBudget:
    id: strawberry.ID = strawberry.field(description="The budget's id (one per agent; not a node).")
    max_items: int = strawberry.field(description="At most this many memories are injected.")
    max_chars: int = strawberry.field(
        description="At most this many characters of memory values are injected."
    )


@strawberry.type(
    name="Agent",
    description="An AI agent: its model, instructions, tools, policy and budgets; runs execute it.",
)
class Agent(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    name: str = strawberry.field(description="Unique in the workspace; agentByName finds the agent by it.")
    description: str | None = strawberry.field(description="What the agent is for, in the operator's words.")
    instructions: str | None = strawberry.field(description="The system prompt.")
    status: AgentStatus = strawberry.field(description="Whether its runs go on (ACTIVE) or are held.")
    model: JSON = strawberry.field(
        description="The model it runs on: `{provider, model, ...}` with the provider's settings (docs/extending/providers.md)."
    )
    tools: list[str] = strawberry.field(description="Name patterns of the tools this agent is offered.")
    policy: Policy = strawberry.field(
        description="What its tool calls are allowed, need approval or are denied."
    )
    memory_budget: MemoryBudget = strawberry.field(
        description="How much memory is injected at the start of each run."
    )
    budget: JSON = strawberry.field(
        description="Budget limits (maxTokens, maxCostUsd, maxTurns, ...); unset keys take the deployment's defaults."
    )
    input_schema: JSON | None = strawberry.field(
        description=(
            "The JSON Schema (2020-12) a run's input must match, checked at startRun and when a "
            "schedule is written (VALIDATION_FAILED naming the input's path); null: any input."
        )
    )
    version: int = strawberry.field(description="The current version: what a run started now is pinned to.")
    created_at: datetime = strawberry.field(description="When the agent was created.")
    updated_at: datetime = strawberry.field(description="When its configuration last changed.")
    row: strawberry.Private[orm.Agent]

    @classmethod
    def from_row(cls, row: orm.Agent) -> Agent:
        return cls(
            id=strawberry.ID(to_global_id("Agent", row.id)),
            name=row.name,
            description=row.description,
            instructions=row.instructions,
            status=AgentStatus(row.status),
            model=JSON(row.model),
            tools=[str(t) for t in row.tools or []],
            policy=Policy.from_json(row.policy, row.id),
            memory_budget=MemoryBudget(
                id=strawberry.ID(object_id("MemoryBudget", row.id)),
                max_items=row.memory_max_items,
                max_chars=row.memory_max_chars,
            ),
            budget=JSON(row.budget or {}),
            input_schema=None if row.input_schema is None else JSON(row.input_schema),
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
            row=row,
        )

    @strawberry.field(
        description="Its memories; with `query`, those matching it ranked by relevance.", extensions=[Paged()]
    )
    async def memories(
        self,
        info: Info,
        page: PageRequest,
        query: Annotated[
            str | None,
            strawberry.argument(
                description="Full-text search over keys and values; ranked by relevance instead of newest first."
            ),
        ] = None,
        tags: Annotated[
            list[str] | None,
            strawberry.argument(description="Only memories carrying every one of these tags."),
        ] = None,
    ) -> Annotated[MemoryConnection, strawberry.lazy("app.graphql.types.memories")]:
        from app.graphql.types.memories import Memory, MemoryConnection, memory_connection  # circular

        if query is not None and query.strip():
            # Full-text search, ranked: the same search as Query.memories (not batched).
            return await memory_connection(info, agent_id=self.row.id, query=query, tags=tags, page=page)
        # Tags are ANDed, so their order does not matter: sorted, equal filters share a batch.
        search = (query or None, tuple(sorted(set(tags or ()))))
        loaders = await info.context.loaders()
        return await loaders.agent_memories.connection(
            MemoryConnection, self.row.id, page, search, Memory.from_row
        )

    @strawberry.field(description="Its runs, newest first unless asked otherwise.", extensions=[Paged()])
    async def runs(
        self,
        info: Info,
        page: PageRequest,
        status: Annotated[
            list[RunStatus] | None, strawberry.argument(description="Only runs in one of these statuses.")
        ] = None,
    ) -> Annotated[RunConnection, strawberry.lazy("app.graphql.types.runs")]:
        from app.graphql.types.runs import Run, RunConnection  # circular: Run.agent

        statuses = tuple(sorted(set(status or ()), key=lambda s: s.value))
        loaders = await info.context.loaders()
        return await loaders.agent_runs.connection(RunConnection, self.row.id, page, statuses, Run.from_row)

    @strawberry.field(
        description="Every configuration the agent has had, newest first.", extensions=[Paged()]
    )
    async def versions(
        self, info: Info, page: PageRequest
    ) -> Annotated[AgentVersionConnection, strawberry.lazy("app.graphql.types.versions")]:
        from app.graphql.types.versions import AgentVersion, AgentVersionConnection  # circular

        loaders = await info.context.loaders()
        return await loaders.agent_version_pages.connection(
            AgentVersionConnection, self.row.id, page, None, AgentVersion.from_row
        )

    @strawberry.field(description="Its schedules.")
    async def schedules(
        self, info: Info
    ) -> list[Annotated[Schedule, strawberry.lazy("app.graphql.types.schedules")]]:
        from app.graphql.types.schedules import Schedule  # circular: Schedule.agent

        rows = await (await info.context.loaders()).schedules.load(self.row.id)
        return [Schedule.from_row(r) for r in rows]


@strawberry.type(name="AgentConnection", description="A page of agents (Relay cursor connection).")
class AgentConnection(Connection[Agent]):
    pass


async def agent_connection(
    info: Info, *, page: PageRequest, statuses: Sequence[AgentStatus] | None
) -> AgentConnection:
    principal = await info.context.principal()
    stmt = reads.agents_query(principal.workspace_id, statuses)
    return await keyset_connection(info, AgentConnection, stmt, page, Agent.from_row, id_column=orm.Agent.id)
