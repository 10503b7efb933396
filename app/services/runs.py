"""Run use cases: start, cancel, claim, lease. Every status change goes through
``app.services.transitions`` (the chokepoint)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import now_sql
from app.db.orm import Agent, Run, RunStep, Workspace
from app.db.session import retry_deadlocks
from app.domain import input_schema
from app.domain.agent_versions import VERSION_MISSING, AgentConfig, version_missing_message
from app.domain.agents import AgentStatus, Role
from app.domain.budgets import concurrency_limit, parse_budget, refusal_message, spent
from app.domain.errors import Conflict, InvalidTransition, NotFound, ValidationFailed
from app.domain.holds import hold_reason, quota_reason
from app.domain.jsonvalue import depth_error
from app.domain.memory import MemoryCandidate
from app.domain.model_errors import ModelErrorCode
from app.domain.policy import PolicyLink
from app.domain.runs import CANCELLABLE_RUN, RunStatus, RunTrigger
from app.events.stops import publish_stop
from app.services import audit, memory_injection
from app.services.auth import Principal
from app.services.runtime import Runtime
from app.services.transitions import NewRun, TreeTx, new_tree_tx, tree_tx
from app.services.transitions.steps import STEPS
from app.services.transitions.usage import check_budget

MAX_INPUT_BYTES = 256_000
MAX_REASON_CHARS = 2_000
# Runs one cancelRuns call cancels at most (each with its subtree); call again for more.
MAX_BULK_CANCEL = 1_000


async def start_run(
    rt: Runtime,
    principal: Principal,
    *,
    agent_id: int,
    input: Any,
    trigger: RunTrigger = RunTrigger.API,
    budget: Any = None,
) -> Run:
    """Create a QUEUED root run of an ACTIVE agent and enqueue it (after commit). ``budget``
    may only tighten the agent's (docs/concepts/budgets.md)."""
    principal.require(Role.OPERATOR)
    too_deep = depth_error(input, max_depth=rt.settings.max_json_depth, what="input")
    if too_deep is not None:
        raise ValidationFailed(too_deep, field="input")
    tighter = parse_budget(budget) if budget is not None else None
    if len(json.dumps(input, default=str)) > MAX_INPUT_BYTES:
        raise ValidationFailed(f"input is larger than {MAX_INPUT_BYTES} bytes", field="input")

    async def start() -> Run:
        async with new_tree_tx(rt) as tree:
            agent = await tree.read_agent(workspace_id=principal.workspace_id, agent_id=agent_id)
            if agent is None:
                raise NotFound("agent not found", field="agentId")
            if agent.status != AgentStatus.ACTIVE:
                raise Conflict(
                    f"agent {agent.name!r} is {agent.status}; only ACTIVE agents run", field="agentId"
                )
            input_schema.check_input(agent.input_schema, input)
            check_budget(rt.settings, agent_name=agent.name, agent_budget=agent.budget or {}, model=agent.model,
                         tighter=tighter)  # fmt: skip
            run = await tree.create_run(
                NewRun(agent=agent, trigger=trigger, input=input, budget=tighter, started_by=principal.actor)
            )
            await audit.append(
                tree.session, workspace_id=principal.workspace_id, actor=principal.actor, action="run.start",
                object_type="Run", object_id=run.id, at=await tree.clock(),
                summary=f"started a run of agent {agent.name!r} (version {agent.version})",
            )  # fmt: skip
        return run

    # Lock conflicts retried (docs/architecture.md#lock-order): the run's job is enqueued
    # only after commit.
    return await retry_deadlocks(start)


async def get_run(session: AsyncSession, *, workspace_id: int, run_id: int) -> Run:
    run = await session.scalar(select(Run).where(Run.id == run_id, Run.workspace_id == workspace_id))
    if run is None:
        raise NotFound("run not found", field="id")
    return run


async def cancel_run(rt: Runtime, principal: Principal, *, run_id: int, reason: str | None) -> Run:
    """Cancel the run and every non-terminal descendant. A RUNNING run is cancelled here and
    now; its worker is told at once (a stop notice), cuts off a call in flight and writes
    nothing more (fencing)."""
    principal.require(Role.OPERATOR)
    _check_reason(reason)
    async with rt.sessionmaker() as session:
        await get_run(session, workspace_id=principal.workspace_id, run_id=run_id)

    async def cancel() -> Run:
        async with tree_tx(rt, run_id) as tx:
            run = await tx.run(run_id)
            if RunStatus(run.status) not in CANCELLABLE_RUN:
                raise InvalidTransition(f"run is already {run.status}")
            await _cancel(tx, run, principal, reason)
        return run

    # Lock conflicts retried (docs/architecture.md#lock-order); the stop notice goes after.
    run = await retry_deadlocks(cancel)
    await publish_stop(rt, trees=[run.root_run_id or run.id])
    return run


def _check_reason(reason: str | None) -> None:
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(f"reason is longer than {MAX_REASON_CHARS} characters", field="reason")


async def _cancel(tx: TreeTx, run: Run, principal: Principal, reason: str | None) -> None:
    # The chokepoint ends the whole subtree: children first, each handing its outcome to
    # its parent's step without waking a parent that is being cancelled too.
    run.cancelled_by = principal.actor.to_json()
    why = reason or "cancelled by operator"
    await tx.set_run_status(run, RunStatus.CANCELLED, reason=why)
    await audit.append(
        tx.session, workspace_id=run.workspace_id, actor=principal.actor, action="run.cancel",
        object_type="Run", object_id=run.id, summary=f"cancelled run {run.id}: {why}", at=tx.now,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunFilter:
    agent_id: int | None = None
    statuses: tuple[RunStatus, ...] = ()
    roots_only: bool = False

    @property
    def empty(self) -> bool:
        return self.agent_id is None and not self.statuses and not self.roots_only


async def cancel_runs(
    rt: Runtime, principal: Principal, *, filter: RunFilter, reason: str | None, all: bool = False
) -> list[Run]:
    """Cancel, in bulk, every cancellable run the filter selects (and so their subtrees), up
    to ``MAX_BULK_CANCEL`` per call. An empty filter would cancel everything: refused unless
    ``all`` says so. One tree transaction per run, so one busy tree holds up no other."""
    principal.require(Role.OPERATOR)
    _check_reason(reason)
    if filter.empty and not all:
        raise ValidationFailed(
            "an empty filter would cancel every run: pass all: true to mean it", field="filter"
        )
    bad = [s for s in filter.statuses if s not in CANCELLABLE_RUN]
    if bad:
        raise ValidationFailed(f"{bad[0].value} runs cannot be cancelled", field="filter.status")
    statuses = filter.statuses or tuple(sorted(CANCELLABLE_RUN, key=lambda s: s.value))
    stmt = select(Run.id).where(
        Run.workspace_id == principal.workspace_id, Run.status.in_([s.value for s in statuses])
    )
    if filter.agent_id is not None:
        stmt = stmt.where(Run.agent_id == filter.agent_id)
    if filter.roots_only:
        stmt = stmt.where(Run.parent_run_id.is_(None))
    async with rt.read_sessionmaker() as session:
        ids = list(await session.scalars(stmt.order_by(Run.id).limit(MAX_BULK_CANCEL)))
    cancelled: list[Run] = []
    trees: set[int] = set()

    async def cancel_one(run_id: int) -> Run | None:
        async with tree_tx(rt, run_id) as tx:
            run = await tx.run(run_id)
            # Re-checked under the lock: it may have ended, or been cancelled with an
            # ancestor earlier in this loop.
            if RunStatus(run.status) not in CANCELLABLE_RUN:
                return None
            await _cancel(tx, run, principal, reason)
        return run

    for run_id in ids:
        # Lock conflicts retried, each tree's transaction on its own (docs/architecture.md#lock-order).
        run = await retry_deadlocks(partial(cancel_one, run_id))
        if run is None:
            continue
        cancelled.append(run)
        trees.add(run.root_run_id or run.id)
    if trees:
        await publish_stop(rt, trees=sorted(trees))
    return cancelled


@dataclass
class Claim:
    """What a worker needs to execute a run it just claimed (loaded in the claim's
    transaction, so the executor starts without another round of reads)."""

    attempt: int
    run: Run
    agent: AgentConfig  # as the run's pinned version configures it, never the live agent
    memories: list[dict[str, Any]]  # injected at the first start: [{key, value, tags}]
    steps: list[RunStep]
    # The chain's agents' policies as they are now (``policy.live_chain``).
    current_policies: list[PolicyLink] = field(default_factory=list)


async def claim(
    rt: Runtime,
    run_id: int,
    *,
    owner: str,
    root_id: int | None = None,
    candidates: list[MemoryCandidate] | None = None,
) -> Claim | None:
    """QUEUED -> RUNNING under a fresh lease, with the attempt number as fencing token.
    None when the run is not claimable: a second delivery of the same job, a cancelled run,
    a run another worker already took.

    ``candidates``: the memories to choose from on a first start, read before the claim's
    transaction (``memory_injection.candidates``, done here when not given) so the tree's
    lock is never held over a scan of the agent's memories. The run's agent is read then
    too: one statement fewer while the tree waits (a run's agent never changes)."""
    lease_s = rt.settings.lease_s
    pre = await memory_injection.read_for_claim(rt, run_id)
    if candidates is None:
        candidates = pre.candidates or []
    quota = _QuotaCheck(pre, rt.settings.max_active_runs_per_workspace)

    async def claim_once() -> Claim | None:
        agent = pre.agent
        # The parent is locked with the root and the run (one statement): the chain's budget
        # check below locks every ancestor, and each statement under the root's lock is time
        # the rest of the tree waits (docs/architecture.md#lock-order: ascending ids).
        async with tree_tx(rt, run_id, root_id=root_id, parent_id=pre.parent_id) as tx:
            run = await tx.run(run_id)
            if run.status != RunStatus.QUEUED:
                return None
            # Read before the lock: a pause committed since reaches the run through the worker's
            # stop notice, at its first step boundary. A hold is read again under the run's lock:
            # a release (agent made ACTIVE, workspace resumed) that committed after the first read
            # has passed this run by, and would leave it held for good (docs/architecture.md).
            held = pre.held if pre.held is None else await _hold_now(tx.session, run)
            if held is not None:
                # Held (docs/concepts/holds.md): it stays QUEUED, with no job, until released.
                if run.held_reason != held:
                    run.held_reason = held
                    run.updated_at = tx.now
                return None
            run.held_reason = None
            if run.abandoned_claims >= rt.settings.max_attempts:
                # Every worker that took it since it last made progress crashed or broke off:
                # stop trying rather than loop. Wake-ups (approvals, children) never count here.
                await tx.set_run_status(
                    run,
                    RunStatus.FAILED,
                    error=f"gave up after {run.abandoned_claims} abandoned attempts to execute the run",
                )
                return None
            # A chain whose tokens, cost or wall time are spent (a child spent the last of an
            # ancestor's budget while this run waited): it ends rather than run again.
            exhausted = spent(await tx.chain_ledgers(rt.settings, run))
            if exhausted is not None:
                await tx.set_run_status(run, RunStatus.FAILED, error=refusal_message(exhausted),
                                        error_code=ModelErrorCode.BUDGET_EXCEEDED)  # fmt: skip
                return None
            over_quota = await quota.reason(tx.session, run)
            if over_quota is not None:
                # Held for a slot (docs/concepts/budgets.md#quotas): released when one frees.
                if run.held_reason != over_quota:
                    run.held_reason = over_quota
                    run.updated_at = tx.now
                if concurrency_limit(run.budget) is not None:
                    # Looked at again once this hold commits: a run of the agent that ended after
                    # it was counted here may have released before the hold was there to see.
                    tx.quota_release.add(run.agent_id)
                return None
            if agent is None or agent.id != run.agent_id:
                # The read before the lock found the run but not the version it is pinned to (or
                # found no run: so never). A version row is never deleted by Enverif; one removed
                # by hand would leave the run unclaimable for good: it fails, saying so.
                agent = await memory_injection.read_pinned(tx.session, run)
                if agent is None:
                    await tx.set_run_status(run, RunStatus.FAILED, error_code=VERSION_MISSING,
                                            error=version_missing_message(run.agent_version))  # fmt: skip
                    return None
            first_start = run.injected_memory_ids is None
            run.attempt += 1
            run.lease_owner = owner
            run.lease_expires_at = tx.now + timedelta(seconds=lease_s)
            await tx.set_run_status(run, RunStatus.RUNNING, reason=f"claimed by {owner}")
            if first_start:
                memories = await memory_injection.inject(tx, run, agent, candidates)
                steps: list[RunStep] = []
            else:
                memories = await memory_injection.injected(tx.session, run)
                steps = list(await tx.session.scalars(STEPS, {"b_run": run.id}))
            return Claim(attempt=run.attempt, run=run, agent=agent, memories=memories, steps=steps,
                         current_policies=pre.current_policies)  # fmt: skip
        return None  # unreachable; keeps type checkers content about the context manager

    # Lock conflicts retried (docs/architecture.md#lock-order): a claim sends nothing
    # before it commits, and a claim that deadlocked would otherwise wait for the sweeper.
    return await retry_deadlocks(claim_once)


async def _hold_now(session: AsyncSession, run: Run) -> str | None:
    """Why the run is held, as committed now (a plain read: it waits on no lock)."""
    found = (
        await session.execute(
            select(Agent.name, Agent.status, Workspace.paused_reason)
            .join(Workspace, Workspace.id == Agent.workspace_id)
            .where(Agent.id == run.agent_id)
        )
    ).one()
    return hold_reason(agent_name=found[0], agent_status=found[1], workspace_paused_reason=found[2])


# A workspace this close to its quota (read without a lock) is counted again under its row's
# lock: claims racing for its last slots take turns; far from it, claims never wait on it.
QUOTA_LOCK_MARGIN = 64


class _QuotaCheck:
    """A claim's quotas (docs/concepts/budgets.md#quotas). Exact where it binds: a run whose
    agent has ``maxConcurrentRuns`` locks the agent's row, and a workspace near its quota its
    row, then counts; two claims of the same agent take turns, so neither misses the other's
    slot. Taken after the root's lock, the order ``memory.remember`` takes the agent's in."""

    def __init__(self, pre: memory_injection.PreClaim, workspace_limit: int) -> None:
        self.pre = pre
        self.workspace_limit = workspace_limit

    async def reason(self, session: AsyncSession, run: Run) -> str | None:
        """Why the run must wait for a slot, or None."""
        workspace_running = self.pre.workspace_running
        if workspace_running >= self.workspace_limit - QUOTA_LOCK_MARGIN:
            await session.execute(
                select(Workspace.id).where(Workspace.id == run.workspace_id).with_for_update()
            )
            workspace_running = await _running(session, Run.workspace_id == run.workspace_id)
        limit = concurrency_limit(run.budget)
        agent_running = None
        if limit is not None:
            await session.execute(select(Agent.id).where(Agent.id == run.agent_id).with_for_update())
            agent_running = await _running(session, Run.agent_id == run.agent_id)
        return quota_reason(
            agent_name=self.pre.agent.name if self.pre.agent is not None else str(run.agent_id),
            agent_running=agent_running, agent_limit=limit,
            workspace_running=workspace_running, workspace_limit=self.workspace_limit,
        )  # fmt: skip


async def _running(session: AsyncSession, where: Any) -> int:
    count = await session.scalar(
        select(func.count()).select_from(Run).where(where, Run.status == RunStatus.RUNNING.value)
    )
    return int(count or 0)


@dataclass(frozen=True, slots=True)
class LeaseCheck:
    ours: bool  # False: stop working on it (cancelled, or taken over)
    held: str | None = None  # why it must stop at its next step boundary (a pause)
    # The chain's agents' policies as they are now (``policy.live_chain``); None: not read.
    current_policies: list[PolicyLink] | None = None


async def renew_lease(rt: Runtime, run_id: int, *, attempt: int, chain: object = None) -> LeaseCheck:
    """Extend the lease, on the database's clock, and say whether the run is still ours and
    whether a pause holds it."""
    async with rt.sessionmaker() as session:
        async with session.begin():
            expires = now_sql(session.get_bind().dialect.name, plus_s=rt.settings.lease_s)
            result = await session.execute(
                update(Run)
                .where(Run.id == run_id, Run.attempt == attempt, Run.status == RunStatus.RUNNING.value)
                .values(lease_expires_at=expires)
            )
            if not result.rowcount:  # type: ignore[attr-defined]
                return LeaseCheck(ours=False)
            found = (await session.execute(_HOLDS, {"b_run": run_id})).one()
    name, status, paused = found
    return LeaseCheck(
        ours=True, held=hold_reason(agent_name=name, agent_status=status, workspace_paused_reason=paused)
    )


_HOLDS = (
    select(Agent.name, Agent.status, Workspace.paused_reason)
    .join(Run, Run.agent_id == Agent.id)
    .join(Workspace, Workspace.id == Run.workspace_id)
    .where(Run.id == bindparam("b_run"))
)


async def release(rt: Runtime, run_id: int, *, attempt: int, reason: str, abandoned: bool) -> None:
    """Hand a run straight back to the queue instead of waiting for its lease to expire.
    ``abandoned`` (an internal error) counts toward ENVERIF_MAX_ATTEMPTS; a worker shutting
    down (a rolling restart) does not."""
    async with tree_tx(rt, run_id) as tx:
        run = await tx.fenced_run(run_id, attempt, progress=False)
        if abandoned:
            await tx.requeue_abandoned(run, reason=reason)
        else:
            await tx.set_run_status(run, RunStatus.QUEUED, reason=reason)
