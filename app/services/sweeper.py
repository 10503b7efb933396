"""The sweeper: puts back what the queue lost (DESIGN §3.7).

- RUNNING runs whose lease expired (their worker died or hung) go back to QUEUED through
  the chokepoint, which bumps the wake count and enqueues a fresh job. The old worker, if it
  is still alive, is fenced off by the attempt number.
- QUEUED runs are enqueued again under their current job id. arq refuses a job id that is
  already queued or running, so this only re-creates jobs that vanished (Redis restarted
  empty, FLUSHALL, a failed enqueue after commit).
- QUEUED runs whose job a worker took and then died with, before claiming the run, get a
  new job id: arq would keep the old one locked for the whole job timeout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from arq.constants import in_progress_key_prefix
from redis.exceptions import RedisError
from sqlalchemy import select

from app.clock import utcnow
from app.db.orm import Run
from app.domain.runs import RunStatus
from app.keys import run_job_id
from app.services.runtime import Runtime
from app.services.transitions import enqueue_run, tree_tx

log = logging.getLogger(__name__)

BATCH = 500
# A run queued this recently most likely still has its job on the way; skip it this time.
QUEUED_GRACE_S = 1.0


@dataclass
class SweepReport:
    requeued_expired: int = 0
    reenqueued: int = 0
    reissued: int = 0


async def _job_held_by_dead_worker(rt: Runtime, run_id: int, wake: int) -> bool:
    """A job marked in progress whose run is still QUEUED long after: the worker took it
    and died before claiming (SIGKILL, OOM). arq keeps such a job locked for its whole
    timeout (PITFALLS: arq), so waiting for it would strand the run."""
    try:
        return bool(
            await rt.redis.exists(in_progress_key_prefix + run_job_id(rt.settings.redis_prefix, run_id, wake))
        )
    except RedisError:
        return False


async def _reissue(rt: Runtime, run_id: int, wake: int, root_id: int | None) -> None:
    """Give the run a new job id (a new wake-up). If the old job ever runs, its claim finds
    the run taken and does nothing."""
    async with tree_tx(rt, run_id, root_id=root_id) as tx:
        run = await tx.run(run_id)
        if run.status == RunStatus.QUEUED and run.wake_count == wake:
            tx.reissue_job(run)
            log.warning("sweeper: run %s was held by a vanished worker; issued a new job", run_id)


async def sweep(rt: Runtime) -> SweepReport:
    report = SweepReport()
    now = utcnow()
    async with rt.read_sessionmaker() as session:
        expired = list(
            await session.scalars(
                select(Run.id)
                .where(Run.status == RunStatus.RUNNING.value, Run.lease_expires_at < now)
                .limit(BATCH)
            )
        )
    for run_id in expired:
        async with tree_tx(rt, run_id) as tx:
            run = await tx.run(run_id)
            # Re-checked under the lock: the owner may have renewed or finished meanwhile.
            if (
                run.status != RunStatus.RUNNING
                or run.lease_expires_at is None
                or run.lease_expires_at >= tx.now
            ):
                continue
            await tx.set_run_status(run, RunStatus.QUEUED, reason=f"lease of {run.lease_owner} expired")
            report.requeued_expired += 1
    async with rt.read_sessionmaker() as session:
        queued = list(
            await session.execute(
                select(Run.id, Run.wake_count, Run.root_run_id, Run.queued_at)
                .where(
                    Run.status == RunStatus.QUEUED.value,
                    Run.queued_at < now - timedelta(seconds=QUEUED_GRACE_S),
                )
                .order_by(Run.queued_at)
                .limit(BATCH)
            )
        )
    stranded_before = now - timedelta(seconds=rt.settings.lease_s)
    for run_id, wake, root_id, queued_at in queued:
        if queued_at < stranded_before and await _job_held_by_dead_worker(rt, run_id, wake):
            await _reissue(rt, run_id, wake, root_id)
            report.reissued += 1
        else:
            await enqueue_run(rt, run_id, wake, root_id)
            report.reenqueued += 1
    if report.requeued_expired:
        log.warning("sweeper: %d runs had expired leases and were requeued", report.requeued_expired)
    return report
