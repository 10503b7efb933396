"""Releasing held runs (docs/concepts/holds.md), in the transaction that lifts the hold.

A held run is QUEUED with a ``held_reason`` and no job: its claim found its agent paused or
archived, or its workspace paused, or it stopped at a step boundary for that reason
(``TreeTx.hold``). Lifting the hold (an agent made ACTIVE, ``resumeWorkspace``) clears the
reason of the runs it concerns in the same transaction, and enqueues them after commit.
Should that enqueue fail, the sweeper enqueues them: they are QUEUED and no longer held. A
run still held for another reason (its agent is paused in a resumed workspace) is held
again by its claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Run
from app.domain.runs import RunStatus
from app.services.runtime import Runtime
from app.services.transitions.outbox import WakeUp, after_commit


@dataclass
class Released:
    wakeups: list[WakeUp] = field(default_factory=list)

    async def enqueue(self, rt: Runtime) -> None:
        """After commit: the released runs' jobs, under their current wake (their last job
        was taken by the claim that held them)."""
        await after_commit(rt, [], self.wakeups)


async def release_held(session: AsyncSession, *, workspace_id: int, agent_id: int | None = None) -> Released:
    # Locked in id order, so two releases never wait on each other in a cycle; a claim that
    # is holding one of these runs right now commits first, and its run is released too.
    stmt = (
        select(Run.id, Run.wake_count, Run.root_run_id)
        .where(
            Run.workspace_id == workspace_id,
            Run.status == RunStatus.QUEUED.value,
            Run.held_reason.is_not(None),
        )
        .order_by(Run.id)
        .with_for_update()
    )
    if agent_id is not None:
        stmt = stmt.where(Run.agent_id == agent_id)
    rows = list(await session.execute(stmt))
    if rows:
        await session.execute(update(Run).where(Run.id.in_([r[0] for r in rows])).values(held_reason=None))
    return Released([WakeUp(run_id, wake, root or run_id) for run_id, wake, root in rows])
