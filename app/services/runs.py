"""Run use cases: start, cancel, claim, lease. Every status change goes through
``app.services.transitions`` (the chokepoint)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import now_sql
from app.db.orm import Run, RunStep
from app.domain.agent_versions import AgentConfig
from app.domain.agents import AgentStatus, Role
from app.domain.errors import Conflict, InvalidTransition, NotFound, ValidationFailed
from app.domain.memory import MemoryCandidate
from app.domain.runs import CANCELLABLE_RUN, RunStatus, RunTrigger
from app.services import memory_injection
from app.services.auth import Principal
from app.services.runtime import Runtime
from app.services.transitions import NewRun, new_tree_tx, tree_tx

MAX_INPUT_BYTES = 256_000


async def start_run(
    rt: Runtime,
    principal: Principal,
    *,
    agent_id: int,
    input: Any,
    trigger: RunTrigger = RunTrigger.API,
) -> Run:
    """Create a QUEUED root run of an ACTIVE agent and enqueue it (after commit)."""
    principal.require(Role.OPERATOR)
    if len(json.dumps(input, default=str)) > MAX_INPUT_BYTES:
        raise ValidationFailed(f"input is larger than {MAX_INPUT_BYTES} bytes", field="input")
    async with new_tree_tx(rt) as tree:
        agent = await tree.read_agent(workspace_id=principal.workspace_id, agent_id=agent_id)
        if agent is None:
            raise NotFound("agent not found", field="agentId")
        if agent.status != AgentStatus.ACTIVE:
            raise Conflict(f"agent {agent.name!r} is {agent.status}; only ACTIVE agents run", field="agentId")
        run = await tree.create_run(
            NewRun(agent=agent, trigger=trigger, input=input, started_by=principal.actor)
        )
    return run


async def get_run(session: AsyncSession, *, workspace_id: int, run_id: int) -> Run:
    run = await session.scalar(select(Run).where(Run.id == run_id, Run.workspace_id == workspace_id))
    if run is None:
        raise NotFound("run not found", field="id")
    return run


async def cancel_run(rt: Runtime, principal: Principal, *, run_id: int, reason: str | None) -> Run:
    """Cancel the run and every non-terminal descendant. A RUNNING run is cancelled here and
    now; its worker finds out at its next write (fencing) and writes nothing more."""
    principal.require(Role.OPERATOR)
    if reason is not None and len(reason) > 2_000:
        raise ValidationFailed("reason is longer than 2000 characters", field="reason")
    async with rt.sessionmaker() as session:
        await get_run(session, workspace_id=principal.workspace_id, run_id=run_id)
    async with tree_tx(rt, run_id) as tx:
        run = await tx.run(run_id)
        if RunStatus(run.status) not in CANCELLABLE_RUN:
            raise InvalidTransition(f"run is already {run.status}")
        # The chokepoint ends the whole subtree: children first, each handing its outcome to
        # its parent's step without waking a parent that is being cancelled too.
        await tx.set_run_status(run, RunStatus.CANCELLED, reason=reason or "cancelled by operator")
    return run


@dataclass
class Claim:
    """What a worker needs to execute a run it just claimed (loaded in the claim's
    transaction, so the executor starts without another round of reads)."""

    attempt: int
    run: Run
    agent: AgentConfig  # as the run's pinned version configures it, never the live agent
    memories: list[dict[str, Any]]  # injected at the first start: [{key, value, tags}]
    steps: list[RunStep]


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
    agent, found = await memory_injection.read_for_claim(rt, run_id)
    if candidates is None:
        candidates = found or []
    async with tree_tx(rt, run_id, root_id=root_id) as tx:
        run = await tx.run(run_id)
        if run.status != RunStatus.QUEUED:
            return None
        if run.abandoned_claims >= rt.settings.max_attempts:
            # Every worker that took it since it last made progress crashed or broke off:
            # stop trying rather than loop. Wake-ups (approvals, children) never count here.
            await tx.set_run_status(
                run,
                RunStatus.FAILED,
                error=f"gave up after {run.abandoned_claims} abandoned attempts to execute the run",
            )
            return None
        first_start = run.injected_memory_ids is None
        run.attempt += 1
        run.lease_owner = owner
        run.lease_expires_at = tx.now + timedelta(seconds=lease_s)
        await tx.set_run_status(run, RunStatus.RUNNING, reason=f"claimed by {owner}")
        if agent is None or agent.id != run.agent_id:  # the run was gone when read (so: never)
            agent = await memory_injection.read_pinned(tx.session, run)
        if first_start:
            memories = await memory_injection.inject(tx, run, agent, candidates)
            steps: list[RunStep] = []
        else:
            memories = await memory_injection.injected(tx.session, run)
            steps = list(
                await tx.session.scalars(
                    select(RunStep).where(RunStep.run_id == run.id).order_by(RunStep.seq)
                )
            )
        return Claim(attempt=run.attempt, run=run, agent=agent, memories=memories, steps=steps)
    return None  # unreachable; keeps type checkers content about the context manager


async def renew_lease(rt: Runtime, run_id: int, *, attempt: int) -> bool:
    """Extend the lease, on the database's clock; False when the run is no longer ours
    (stop working on it)."""
    async with rt.sessionmaker() as session:
        async with session.begin():
            expires = now_sql(session.get_bind().dialect.name, plus_s=rt.settings.lease_s)
            result = await session.execute(
                update(Run)
                .where(Run.id == run_id, Run.attempt == attempt, Run.status == RunStatus.RUNNING.value)
                .values(lease_expires_at=expires)
            )
    return bool(result.rowcount)  # type: ignore[attr-defined]


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
