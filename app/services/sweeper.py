"""The sweeper: puts back what the queue lost (DESIGN §3.7).

- RUNNING runs whose lease expired (their worker died or hung) go back to QUEUED through
  the chokepoint, which bumps the wake count and enqueues a fresh job. The old worker, if it
  is still alive, is fenced off by the attempt number.
- QUEUED runs are enqueued again under their current job id. arq refuses a job id that is
  already queued or running, so this only re-creates jobs that vanished (Redis restarted
  empty, FLUSHALL, a failed enqueue after commit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select

from app.clock import utcnow
from app.db.orm import Run
from app.domain.runs import RunStatus
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


async def sweep(rt: Runtime) -> SweepReport:
    report = SweepReport()
    now = utcnow()
    async with rt.sessionmaker() as session:
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
    async with rt.sessionmaker() as session:
        queued = list(
            await session.execute(
                select(Run.id, Run.wake_count, Run.root_run_id)
                .where(
                    Run.status == RunStatus.QUEUED.value,
                    Run.queued_at < now - timedelta(seconds=QUEUED_GRACE_S),
                )
                .order_by(Run.queued_at)
                .limit(BATCH)
            )
        )
    for run_id, wake, root_id in queued:
        await enqueue_run(rt, run_id, wake, root_id)
        report.reenqueued += 1
    if report.requeued_expired:
        log.warning("sweeper: %d runs had expired leases and were requeued", report.requeued_expired)
    return report
