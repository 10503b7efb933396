"""Releasing held runs (docs/concepts/holds.md), in the transaction that lifts the hold.

A held run is QUEUED with a ``held_reason`` and no job: its claim found its agent paused or
archived, or its workspace paused, or it stopped at a step boundary for that reason
(``TreeTx.hold``). Lifting the hold (an agent made ACTIVE, ``resumeWorkspace``) clears the
reason of the runs it concerns in the same transaction, and enqueues them after commit.
Should that enqueue fail, the sweeper enqueues them: they are QUEUED and no longer held. A
run still held for another reason (its agent is paused in a resumed workspace) is held
again by its claim.

Quota holds (docs/concepts/budgets.md#quotas) lift as slots free: when a run of an agent
with ``maxConcurrentRuns`` stops RUNNING, the oldest of that agent's quota-held runs that
now fit are released right after its transaction commits (``release_quota``), and every
sweep releases whatever fits (the workspace's quota; a release that failed).

A claim that holds a run for its agent's quota runs the same release after its own commit.
That closes a race: the claim counted the agent's runs while one of them was ending, and
that run's release, after its end committed, read before the hold committed and found
nothing held. Whichever of the two commits last sees the other's write, so one of the two
releases frees the run (at the cost of one more transaction per quota hold).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Run
from app.db.session import retry_deadlocks
from app.domain.budgets import concurrency_limit
from app.domain.holds import QUOTA_PREFIX, quota_releases
from app.domain.runs import RunStatus
from app.services.runtime import Runtime
from app.services.transitions.outbox import WakeUp, after_commit


@dataclass
class Released:
    wakeups: list[WakeUp] = field(default_factory=list)

    async def enqueue(self, rt: Runtime) -> None:
        """After commit: the released runs' jobs, each under a new wake. Not the wake whose
        job held the run: that job may still be in progress (a release right after the
        hold committed, or the claim's own look again), and arq refuses a job id while its
        job runs, so the release would clear the hold and enqueue nothing."""
        await after_commit(rt, [], self.wakeups)


async def release_held(session: AsyncSession, *, workspace_id: int, agent_id: int | None = None) -> Released:
    # Locked in id order, so two releases never wait on each other in a cycle; a claim that
    # is holding one of these runs right now commits first, and its run is released too.
    stmt = select(Run.id, Run.wake_count, Run.root_run_id).where(
        Run.workspace_id == workspace_id,
        Run.status == RunStatus.QUEUED.value,
        Run.held_reason.is_not(None),
    )
    if agent_id is not None:
        stmt = stmt.where(Run.agent_id == agent_id)
    rows = await _locked(session, stmt)
    if rows:
        await session.execute(
            update(Run)
            .where(Run.id.in_([r[0] for r in rows]))
            .values(held_reason=None, wake_count=Run.wake_count + 1)
        )
    return Released([WakeUp(run_id, wake + 1, root or run_id) for run_id, wake, root in rows])


# Quota-held runs one release looks at, oldest first.
QUOTA_RELEASE_BATCH = 500
log = logging.getLogger(__name__)


async def release_quota(rt: Runtime, *, agent_ids: Collection[int] | None = None) -> int:
    """Release the quota-held runs (of ``agent_ids``, else of every agent) that fit now;
    how many. Its own transaction: it locks only the held runs, never a tree's root."""
    try:
        # Mostly there is none: found out with a plain read, so that no write transaction
        # (on SQLite, the database's write lock) is taken for nothing after every run's end.
        async with rt.read_sessionmaker() as session:
            if await session.scalar(_held_stmt(agent_ids).with_only_columns(Run.id).limit(1)) is None:
                return 0

        async def release() -> Released:
            async with rt.sessionmaker() as session, session.begin():
                return await _release_quota(session, rt.settings.max_active_runs_per_workspace, agent_ids)

        # Deadlocks retried: it locks held runs that claims, releases and the cascade of a
        # tree's end lock in their own order, and MariaDB may pick it as the victim
        # (docs/architecture.md#lock-order). Nothing is sent before it commits.
        released = await retry_deadlocks(release)
        await released.enqueue(rt)
    except Exception:
        if agent_ids is None:
            raise
        # A run's end has committed: its freed slot is not lost, the next sweep releases it.
        log.warning("quota release for agents %s failed; the sweeper will", sorted(agent_ids), exc_info=True)
        return 0
    return len(released.wakeups)


async def _release_quota(
    session: AsyncSession, workspace_limit: int, agent_ids: Collection[int] | None
) -> Released:
    rows = await _locked(session, _held_stmt(agent_ids).order_by(Run.id).limit(QUOTA_RELEASE_BATCH))
    if not rows:
        return Released()
    running = Run.status == RunStatus.RUNNING.value
    workspace_running = await _counts(session, Run.workspace_id, {r.workspace_id for r in rows}, running)
    agent_running = await _counts(session, Run.agent_id, {r.agent_id for r in rows}, running)
    held = [(r.id, r.workspace_id, r.agent_id, concurrency_limit(r.budget)) for r in rows]
    ids = set(quota_releases(held, workspace_running=workspace_running, agent_running=agent_running,
                             workspace_limit=workspace_limit))  # fmt: skip
    if not ids:
        return Released()
    await session.execute(
        update(Run).where(Run.id.in_(sorted(ids))).values(held_reason=None, wake_count=Run.wake_count + 1)
    )
    return Released([WakeUp(r.id, r.wake_count + 1, r.root_run_id or r.id) for r in rows if r.id in ids])


async def _locked(session: AsyncSession, stmt: Select[*tuple[Any, ...]]) -> list[Any]:
    """The rows ``stmt`` finds that still match once locked, locked by primary key in id order.

    On MariaDB a locking read takes a lock on every index entry it scans, and the held runs
    are found through an index on the status: ``SELECT ... FOR UPDATE`` with these filters
    locked every queued run of the deployment (and the gaps between them), so claims of
    other runs deadlocked with it. A plain read finds the candidates; only they are locked,
    by id (docs/architecture.md#lock-order), and read again under the lock."""
    ids = list(await session.scalars(stmt.with_only_columns(Run.id)))
    if not ids:
        return []
    # Filtered again under the lock: a candidate released or claimed meanwhile is skipped.
    locked = (
        stmt.where(Run.id.in_(ids))
        .order_by(None)
        .order_by(Run.id)
        .limit(None)
        .with_for_update()
        .with_hint(Run, "FORCE INDEX (PRIMARY)", "mysql")
    )
    return list(await session.execute(locked))


def _held_stmt(agent_ids: Collection[int] | None) -> Select[Any]:
    stmt = select(Run.id, Run.workspace_id, Run.agent_id, Run.budget, Run.wake_count, Run.root_run_id).where(
        Run.status == RunStatus.QUEUED.value, Run.held_reason.like(f"{QUOTA_PREFIX}%")
    )
    if agent_ids is not None:
        stmt = stmt.where(Run.agent_id.in_(sorted(agent_ids)))
    return stmt


async def _counts(session: AsyncSession, column: Any, ids: set[int], where: Any) -> dict[int, int]:
    rows = await session.execute(
        select(column, func.count()).where(column.in_(sorted(ids)), where).group_by(column)
    )
    return {key: int(count) for key, count in rows}
