"""Run, RunStep and the delegation context: the execution tree.

Every relation goes through the request's DataLoaders, and the tree-shaped ones
(``descendants``, ``pendingApprovals``) come from one query per *tree* (runs by
``root_run_id``), so a whole tree costs a bounded number of queries however many runs it has.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import strawberry
from strawberry.scalars import JSON

from app.clock import utcnow
from app.db import orm
from app.domain.budgets import (
    MODEL_ANSWERED_AT,
    MODEL_ASKED_AT,
    concurrency_effective,
    concurrency_limit,
    effective,
)
from app.domain.errors import NotFound
from app.domain.global_ids import object_id, public_policy_chain, public_step_result
from app.domain.policy import Decision
from app.domain.runs import RunStatus, RunTrigger, StepStatus
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.loaders import subtree_ids
from app.graphql.types.agents import Agent
from app.graphql.types.budgets import BudgetLimit, Usage, wall_s
from app.graphql.types.node import (
    NODE_ID,
    OLDEST,
    Connection,
    Node,
    Paged,
    first_page,
    first_page_request,
    keyset_connection,
)
from app.services import reads
from app.services.reads import PageRequest, RunFilter
from app.services.transitions.usage import ledger

if TYPE_CHECKING:
    from app.graphql.types.approvals import Approval
    from app.graphql.types.memories import Memory
    from app.graphql.types.schedules import Schedule
    from app.graphql.types.versions import Actor, AgentVersion

LazyApproval = Annotated["Approval", strawberry.lazy("app.graphql.types.approvals")]
LazyAgentVersion = Annotated["AgentVersion", strawberry.lazy("app.graphql.types.versions")]
LazyActor = Annotated["Actor", strawberry.lazy("app.graphql.types.versions")]


@strawberry.type(name="RunStep", description="One tool call of a run (or its final answer).")
class RunStep(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    seq: int = strawberry.field(
        description="Its place in the run: 0, 1, 2, ... in the order the steps were recorded."
    )
    turn: int = strawberry.field(description="The model turn (0-based) that asked for this call.")
    tool: str | None = strawberry.field(description="Null for the final answer.")
    arguments: JSON | None = strawberry.field(
        description="What the tool runs with (an operator's EDIT, if any)."
    )
    original_arguments: JSON | None = strawberry.field(
        description="The model's arguments, when an operator edited them (null otherwise)."
    )
    status: StepStatus = strawberry.field(description="Where the call is; see StepStatus.")
    decision: Decision | None = strawberry.field(
        description="What the policy decided for this call; null for the final answer."
    )
    decision_reason: str | None = strawberry.field(
        description="Why the policy decided so (e.g. the rule that matched)."
    )
    result: JSON | None = strawberry.field(
        description="What the tool returned (for agents.delegate, `runId` is the child's global id); null until it finishes."
    )
    error: str | None = strawberry.field(description="Why the call failed or was refused; null otherwise.")
    error_code: str | None = strawberry.field(
        description="The code the model saw for a refused or failed call (BUDGET_EXCEEDED, LOOP_DETECTED, ...)."
    )
    started_at: datetime | None = strawberry.field(description="When the call started; null until it does.")
    finished_at: datetime | None = strawberry.field(
        description="When it reached its final status; null until it does."
    )
    row: strawberry.Private[orm.RunStep]

    @classmethod
    def from_row(cls, row: orm.RunStep) -> RunStep:
        return cls(
            id=strawberry.ID(to_global_id("RunStep", row.id)),
            seq=row.seq,
            turn=row.turn,
            tool=row.tool,
            arguments=row.arguments,
            original_arguments=row.original_arguments,
            status=StepStatus(row.status),
            decision=None if row.decision is None else Decision(row.decision),
            decision_reason=row.decision_reason,
            result=public_step_result(row.result, row.child_run_id),
            error=row.error,
            error_code=row.error_code,
            started_at=row.started_at,
            finished_at=row.finished_at,
            row=row,
        )

    @strawberry.field(description="Who edited the arguments (an operator's EDIT); null when nobody did.")
    async def edited_by(self, info: Info) -> LazyActor | None:
        from app.graphql.types.versions import Actor  # circular: versions import runs

        return await Actor.of(info, self.row.edited_by)

    @strawberry.field(
        description="What the model turn that asked for this call consumed (on the turn's first step)."
    )
    def usage(self) -> Usage | None:
        return None if not self.row.usage else Usage.of(self.row.usage)

    @strawberry.field(
        description="When the worker asked the model for the turn that asked for this call (on the "
        "turn's first step, by the worker's clock); null on other steps and on steps of older runs."
    )
    def model_asked_at(self) -> datetime | None:
        return _usage_time(self.row.usage, MODEL_ASKED_AT)

    @strawberry.field(
        description="When the model answered that turn (see modelAskedAt); null where modelAskedAt is."
    )
    def model_answered_at(self) -> datetime | None:
        return _usage_time(self.row.usage, MODEL_ANSWERED_AT)

    @strawberry.field(description="The run this step belongs to.")
    async def run(self, info: Info) -> Run:
        return Run.from_row(await _load_run(info, self.row.run_id))

    @strawberry.field(description="The child run an agents.delegate step started.")
    async def child_run(self, info: Info) -> Run | None:
        if self.row.child_run_id is None:
            return None
        row = await (await info.context.loaders()).run.load(self.row.child_run_id)
        return None if row is None else Run.from_row(row)

    @strawberry.field(description="The approval this call waited for, if the policy required one.")
    async def approval(self, info: Info) -> LazyApproval | None:
        from app.graphql.types.approvals import Approval  # circular: Approval.step

        if self.row.approval_id is None:
            return None
        row = await (await info.context.loaders()).approval.load(self.row.approval_id)
        return None if row is None else Approval.from_row(row)


@strawberry.type(name="Delegation", description="Why a child run exists: its parent's agents.delegate call.")
class Delegation:
    id: strawberry.ID = strawberry.field(description="The delegation's id (one per child run; not a node).")
    task: str = strawberry.field(description="The task the parent gave the child (agents.delegate's `task`).")
    parent_step_id: strawberry.Private[int | None]

    @strawberry.field(description="The parent's agents.delegate step that started this run.")
    async def parent_step(self, info: Info) -> RunStep | None:
        if self.parent_step_id is None:
            return None
        row = await (await info.context.loaders()).step.load(self.parent_step_id)
        return None if row is None else RunStep.from_row(row)


@strawberry.type(
    name="Run",
    description="One execution of an agent: its model turns and tool calls, and the child runs it delegated to.",
)
class Run(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    status: RunStatus = strawberry.field(description="Where the run is in its life; see RunStatus.")
    trigger: RunTrigger = strawberry.field(description="How it was started.")
    input: JSON | None = strawberry.field(description="The input it was started with.")
    result: JSON | None = strawberry.field(description="Its final answer once SUCCEEDED; null before.")
    error: str | None = strawberry.field(description="Why it FAILED, in words; null otherwise.")
    error_code: str | None = strawberry.field(
        description=(
            "Why a FAILED run failed, when it has a code: BUDGET_EXCEEDED, or AGENT_VERSION_MISSING "
            "(the version it is pinned to was removed)."
        )
    )
    cancel_reason: str | None = strawberry.field(
        description="The reason given when it was cancelled; null otherwise."
    )
    held_reason: str | None = strawberry.field(
        description=(
            "Why a QUEUED run is not going on: its agent is paused or archived, its workspace paused, "
            "or a quota is full (maxConcurrentRuns, ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE)."
        )
    )
    depth: int = strawberry.field(description="0 for a root run, parent's depth + 1 for a child.")
    policy_chain: JSON = strawberry.field(
        description=(
            "The policies this run runs under, root agent first, as snapshotted at its creation: "
            "`[{agentId, agentName, policy}]`, `agentId` a global id."
        )
    )
    turns: int = strawberry.field(description="Model turns taken so far.")
    created_at: datetime = strawberry.field(description="When it was created.")
    updated_at: datetime = strawberry.field(description="When it last changed.")
    queued_at: datetime | None = strawberry.field(
        description="When it was last put in the queue for a worker."
    )
    started_at: datetime | None = strawberry.field(
        description="When a worker first started it; null while it has not."
    )
    finished_at: datetime | None = strawberry.field(
        description="When it reached a final status; null until then."
    )
    row: strawberry.Private[orm.Run]

    @classmethod
    def from_row(cls, row: orm.Run) -> Run:
        return cls(
            id=strawberry.ID(to_global_id("Run", row.id)),
            status=RunStatus(row.status),
            trigger=RunTrigger(row.trigger),
            input=row.input,
            result=row.result,
            error=row.error,
            error_code=row.error_code,
            cancel_reason=row.cancel_reason,
            held_reason=row.held_reason,
            depth=row.depth,
            policy_chain=JSON(public_policy_chain(row.policy_chain or [])),
            turns=row.turns,
            created_at=row.created_at,
            updated_at=row.updated_at,
            queued_at=row.queued_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            row=row,
        )

    @property
    def root_id(self) -> int:
        # root_run_id is set right after a root run's insert; until then it is its own root.
        return self.row.root_run_id or self.row.id

    @strawberry.field(description="What this run consumed itself.")
    def usage(self) -> Usage:
        return Usage.of(
            self.row.usage, wall_s=wall_s(self.row.created_at, self.row.finished_at, utcnow()), runs=1
        )

    @strawberry.field(
        description="What this run's subtree consumed, itself included (kept up to date as it runs)."
    )
    def tree_usage(self) -> Usage:
        return Usage.of(
            self.row.tree_usage, wall_s=wall_s(self.row.created_at, self.row.finished_at, utcnow())
        )

    @strawberry.field(
        description="The run's effective budget limits: the tightest of its own and what is left of every ancestor's; "
        "and maxConcurrentRuns, used counting its agent's runs RUNNING now."
    )
    async def budget(self, info: Info) -> list[BudgetLimit]:
        path = await self.path(info)
        now = utcnow()
        settings = info.context.settings
        limits = effective([ledger(settings, r.row, now) for r in path])
        if concurrency_limit(self.row.budget) is not None:
            # A quota, not a spend (docs/concepts/budgets.md#quotas): used counts the agent's
            # runs RUNNING now, this one among them while it runs.
            running = await (await info.context.loaders()).agent_running.load(self.row.agent_id)
            quota = concurrency_effective(self.row.budget, run_id=self.row.id, running=running)
            if quota is not None:
                limits[quota.key] = quota
        return [BudgetLimit.of(found, to_global_id("Run", found.run_id)) for found in limits.values()]

    @strawberry.field(description="The agent it runs.")
    async def agent(self, info: Info) -> Agent:
        row = await (await info.context.loaders()).agent.load(self.row.agent_id)
        if row is None:
            raise NotFound("this run's agent is gone")
        return Agent.from_row(row)

    @strawberry.field(description="The agent version this run executes with, pinned when it was created.")
    async def agent_version(self, info: Info) -> LazyAgentVersion:
        from app.graphql.types.versions import AgentVersion  # circular: versions import agents

        row = await (await info.context.loaders()).agent_version.load(
            (self.row.agent_id, self.row.agent_version)
        )
        if row is None:
            raise NotFound("this run's agent version is gone")
        return AgentVersion.from_row(row)

    @strawberry.field(description="Who started it: a token, the CLI, its schedule or its parent run.")
    async def started_by(self, info: Info) -> LazyActor | None:
        from app.graphql.types.versions import Actor  # circular

        return await Actor.of(info, self.row.started_by)

    @strawberry.field(description="Who cancelled it; null unless an operator (or the CLI) did.")
    async def cancelled_by(self, info: Info) -> LazyActor | None:
        from app.graphql.types.versions import Actor  # circular

        return await Actor.of(info, self.row.cancelled_by)

    @strawberry.field(description="The run that delegated to this one; null for a root run.")
    async def parent(self, info: Info) -> Run | None:
        if self.row.parent_run_id is None:
            return None
        return Run.from_row(await _load_run(info, self.row.parent_run_id))

    @strawberry.field(description="The root of its tree (itself for a root run).")
    async def root(self, info: Info) -> Run:
        if self.root_id == self.row.id:
            return self
        return Run.from_row(await _load_run(info, self.root_id))

    @strawberry.field(
        description=(
            "Direct children, oldest first: the first page of `childrenConnection` (at most "
            "ENVERIF_MAX_PAGE_SIZE, 100 by default)."
        )
    )
    async def children(self, info: Info) -> list[Run]:
        loaders = await info.context.loaders()
        return await first_page(info, loaders.run_children, self.row.id, Run.from_row)

    @strawberry.field(
        description="Direct children, oldest first unless asked otherwise.", extensions=[Paged(OLDEST)]
    )
    async def children_connection(self, info: Info, page: PageRequest) -> RunConnection:
        loaders = await info.context.loaders()
        return await loaders.run_children.connection(RunConnection, self.row.id, page, None, Run.from_row)

    @strawberry.field(
        description=(
            "The subtree below this run, breadth first: the first page of "
            "`descendantsConnection` (at most ENVERIF_MAX_PAGE_SIZE, 100 by default)."
        )
    )
    async def descendants(self, info: Info) -> list[Run]:
        found = reads.slice_page(await self._descendants(info), first_page_request(info), key=lambda r: r.id)
        return [Run.from_row(r) for r in found.rows]

    @strawberry.field(
        description="The whole subtree below this run, breadth first.", extensions=[Paged(orderable=False)]
    )
    async def descendants_connection(self, info: Info, page: PageRequest) -> RunConnection:
        connection: RunConnection = RunConnection.of_rows(await self._descendants(info), page, Run.from_row)
        return connection

    async def _descendants(self, info: Info) -> list[orm.Run]:
        tree = await (await info.context.loaders()).tree.load(self.root_id)
        by_id = {r.id: r for r in tree}
        return [by_id[i] for i in subtree_ids(tree, self.row.id)]

    @strawberry.field(description="The runs from the root down to this one: root first, this run last.")
    async def path(self, info: Info) -> list[Run]:
        tree = await (await info.context.loaders()).tree.load(self.root_id)
        by_id = {r.id: r for r in tree}
        chain = [self.row]
        while chain[-1].parent_run_id is not None and chain[-1].parent_run_id in by_id:
            chain.append(by_id[chain[-1].parent_run_id])
        return [self if r is self.row else Run.from_row(r) for r in reversed(chain)]

    @strawberry.field(
        description=(
            "Its tool calls in order: the first page of `stepsConnection` (at most "
            "ENVERIF_MAX_PAGE_SIZE, 100 by default); page through the rest there."
        )
    )
    async def steps(self, info: Info) -> list[RunStep]:
        loaders = await info.context.loaders()
        return await first_page(info, loaders.run_steps, self.row.id, RunStep.from_row)

    @strawberry.field(
        description="Its tool calls, oldest first unless asked otherwise.", extensions=[Paged(OLDEST)]
    )
    async def steps_connection(self, info: Info, page: PageRequest) -> RunStepConnection:
        loaders = await info.context.loaders()
        return await loaders.run_steps.connection(
            RunStepConnection, self.row.id, page, None, RunStep.from_row
        )

    @strawberry.field(description="Why this child run exists; null for a root run.")
    def delegation(self) -> Delegation | None:
        if self.row.parent_run_id is None and self.row.delegation_task is None:
            return None
        return Delegation(
            id=strawberry.ID(object_id("Delegation", self.row.id)),
            task=self.row.delegation_task or "",
            parent_step_id=self.row.parent_step_id,
        )

    @strawberry.field(description="The memories put into this run's context when it started.")
    async def injected_memories(
        self, info: Info
    ) -> list[Annotated[Memory, strawberry.lazy("app.graphql.types.memories")]]:
        from app.graphql.types.memories import Memory  # circular: Memory.sourceRun

        pinned = self.row.injected_memories
        ids = [int(i) for i in self.row.injected_memory_ids or []]
        rows = await (await info.context.loaders()).memory.load_many(ids)
        if pinned is None:
            # Injected before the values were pinned: the memories as they are now, and a
            # memory deleted since is simply no longer listed.
            return [Memory.from_row(r) for r in rows if r is not None]
        return [
            Memory.as_injected(m, live, agent_id=self.row.agent_id)
            for m, live in zip(pinned, rows, strict=False)
        ]

    @strawberry.field(description="Approvals waiting for an operator anywhere in this run's subtree.")
    async def pending_approvals(self, info: Info) -> list[LazyApproval]:
        from app.graphql.types.approvals import Approval  # circular: Approval.run

        loaders = await info.context.loaders()
        pending = await loaders.pending_approvals.load(self.root_id)
        if self.root_id != self.row.id and pending:
            scope = {self.row.id, *subtree_ids(await loaders.tree.load(self.root_id), self.row.id)}
            pending = [a for a in pending if a.run_id in scope]
        return [Approval.from_row(a) for a in pending]

    @strawberry.field(description="The schedule that started this run, if any.")
    async def schedule(
        self, info: Info
    ) -> Annotated[Schedule, strawberry.lazy("app.graphql.types.schedules")] | None:
        from app.graphql.types.schedules import Schedule  # circular: Schedule.agent

        if self.row.schedule_id is None:
            return None
        row = await (await info.context.loaders()).schedule.load(self.row.schedule_id)
        return None if row is None else Schedule.from_row(row)


@strawberry.type(name="RunConnection", description="A page of runs (Relay cursor connection).")
class RunConnection(Connection[Run]):
    pass


@strawberry.type(name="RunStepConnection", description="A page of steps (Relay cursor connection).")
class RunStepConnection(Connection[RunStep]):
    pass


async def _load_run(info: Info, run_id: int) -> orm.Run:
    row = await (await info.context.loaders()).run.load(run_id)
    if row is None:
        raise NotFound("no run with this id")
    return row


async def run_connection(info: Info, *, page: PageRequest, filter: RunFilter) -> RunConnection:
    principal = await info.context.principal()
    stmt = reads.runs_query(principal.workspace_id, filter)
    return await keyset_connection(info, RunConnection, stmt, page, Run.from_row, id_column=orm.Run.id)


def _usage_time(usage: dict[str, Any] | None, key: str) -> datetime | None:
    raw = (usage or {}).get(key)
    return datetime.fromisoformat(raw) if isinstance(raw, str) else None
