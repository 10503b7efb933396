"""The sweeper: puts back what the queue lost (docs/operating/outages.md).

- RUNNING runs whose lease expired (their worker died or hung) go back to QUEUED through
  the chokepoint, which bumps the wake count and enqueues a fresh job. The old worker, if it
  is still alive, is fenced off by the attempt number.
- QUEUED runs are enqueued again under their current job id. arq refuses a job id that is
  already queued or running, so this only re-creates jobs that vanished (Redis restarted
  empty, FLUSHALL, a failed enqueue after commit).
- QUEUED runs whose job a worker took and then died with, before claiming the run, get a
  new job id: arq would keep the old one locked until its in-progress key expires.
- Pending approvals past their deadline become EXPIRED, their calls rejected; due approval
  webhook notifications are sent (app/services/approval_webhooks.py).
- arq's leftovers that the database says are dead are removed: queue entries (and their
  in-progress, job and retry keys) of runs that ended, are waiting, or have moved on to a
  newer job id (wake count). arq workers read only the head of the queue and skip entries
  marked in progress, so leftovers at the head would otherwise starve every worker.
- Runs held for a quota whose slot is free again are released (a workspace's quota frees
  only here; an agent's also at once when one of its runs stops, ``release_quota``).
- Audit events appended since the last sweep are sealed into their workspace's hash chain
  (``services.audit``), so none stays unsealed longer than about an interval.

Lease expiry is compared on the database's clock (``app.db.clock``), never a worker's.
Every worker process runs ``sweeper_loop`` as its own task on its own timer, not as an arq
job: a sweeper queued behind the jobs it is meant to unstick would be starved with them.
Only one worker sweeps per interval (a Redis "turn" key); if Redis is away, each sweeps.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from redis.exceptions import RedisError
from sqlalchemy import select

from app.db.clock import db_now
from app.db.orm import Approval, Run
from app.domain.budgets import refusal_message, spent
from app.domain.model_errors import ModelErrorCode
from app.domain.runs import CANCELLABLE_RUN, ApprovalStatus, RunStatus
from app.keys import queue_name, run_job_id, run_job_prefix, sweeper_turn_key
from app.outages import is_outage
from app.services import audit
from app.services.approval_webhooks import deliver_due
from app.services.approvals import expire_overdue
from app.services.runtime import Runtime
from app.services.transitions import enqueue_run, release_quota, tree_tx

log = logging.getLogger(__name__)

BATCH = 500
# A run queued this recently most likely still has its job on the way; skip it this time.
QUEUED_GRACE_S = 1.0
# How much of the queue's head is checked for leftovers per sweep. arq reads the oldest
# max(max_jobs * 5, 100) entries, so the head is what must be clean.
QUEUE_HEAD = 1000
# States in which a run can use a job: QUEUED (to be claimed) and RUNNING (being run).
JOB_STATES = frozenset({RunStatus.QUEUED.value, RunStatus.RUNNING.value})


@dataclass
class SweepReport:
    requeued_expired: int = 0
    reenqueued: int = 0
    reissued: int = 0
    dropped_jobs: int = 0
    out_of_time: int = 0
    expired_approvals: int = 0
    notifications: int = 0
    quota_released: int = 0  # quota-held runs that fit again (docs/concepts/budgets.md#quotas)
    sealed_audit: int = 0


async def _job_held_by_dead_worker(rt: Runtime, run_id: int, wake: int) -> bool:
    """A job marked in progress whose run is still QUEUED long after: the worker took it
    and died before claiming (SIGKILL, OOM). arq keeps such a job locked for as long
    as its in-progress key lives (docs/architecture.md), so waiting for it would strand the run."""
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


async def _end_overdue(rt: Runtime, now: datetime) -> int:
    """Runs past their wall-clock deadline (``maxWallS``, theirs or an ancestor's) end FAILED
    with BUDGET_EXCEEDED, even while they wait for an approval or a child: nothing of theirs
    would otherwise notice the time passing (docs/concepts/budgets.md)."""
    async with rt.read_sessionmaker() as session:
        overdue = list(
            await session.scalars(
                select(Run.id)
                .where(Run.deadline_at < now, Run.status.in_([s.value for s in CANCELLABLE_RUN]))
                .order_by(Run.deadline_at)
                .limit(BATCH)
            )
        )
    ended = 0
    for run_id in overdue:
        async with tree_tx(rt, run_id) as tx:
            run = await tx.run(run_id)
            if RunStatus(run.status) not in CANCELLABLE_RUN:
                continue
            found = spent(await tx.chain_ledgers(rt.settings, run))
            if found is None or found.key != "maxWallS":
                continue  # re-checked under the lock, on the database's clock
            await tx.set_run_status(run, RunStatus.FAILED, error=refusal_message(found),
                                    error_code=ModelErrorCode.BUDGET_EXCEEDED)  # fmt: skip
            ended += 1
    return ended


async def _expire_approvals(rt: Runtime, now: datetime) -> int:
    """Approvals past their deadline fail safe: EXPIRED, the call rejected with that reason
    (docs/concepts/approvals.md). Within one sweep interval of the deadline."""
    async with rt.read_sessionmaker() as session:
        overdue = list(
            await session.scalars(
                select(Approval.id)
                .where(Approval.expires_at <= now, Approval.status == ApprovalStatus.PENDING.value)
                .order_by(Approval.expires_at)
                .limit(BATCH)
            )
        )
    return await expire_overdue(rt, overdue)


async def sweep(rt: Runtime) -> SweepReport:
    report = SweepReport()
    async with rt.read_sessionmaker() as session:
        now = await db_now(session)
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
                or run.lease_expires_at >= tx.now  # the database's clock (TreeTx)
            ):
                continue
            # An abandoned claim: it counts toward ENVERIF_MAX_ATTEMPTS.
            await tx.requeue_abandoned(run, reason=f"lease of {run.lease_owner} expired")
            report.requeued_expired += 1
    async with rt.read_sessionmaker() as session:
        queued = list(
            await session.execute(
                select(Run.id, Run.wake_count, Run.root_run_id, Run.queued_at)
                .where(
                    Run.status == RunStatus.QUEUED.value,
                    # Held runs have no job until released (docs/concepts/holds.md).
                    Run.held_reason.is_(None),
                    Run.queued_at < now - timedelta(seconds=QUEUED_GRACE_S),
                )
                .order_by(Run.queued_at)
                .limit(BATCH)
            )
        )
    stranded_before = now - timedelta(seconds=rt.settings.lease_s)
    for run_id, wake, root_id, queued_at in queued:
        if (
            queued_at is not None
            and queued_at < stranded_before
            and await _job_held_by_dead_worker(rt, run_id, wake)
        ):
            await _reissue(rt, run_id, wake, root_id)
            report.reissued += 1
        else:
            await enqueue_run(rt, run_id, wake, root_id)
            report.reenqueued += 1
    report.out_of_time = await _end_overdue(rt, now)
    report.expired_approvals = await _expire_approvals(rt, now)
    report.notifications = await deliver_due(rt, now)
    report.quota_released = await release_quota(rt)
    report.dropped_jobs = await drop_dead_jobs(rt)
    report.sealed_audit = await audit.seal_pending(rt.sessionmaker)
    if report.requeued_expired:
        log.warning("sweeper: %d runs had expired leases and were requeued", report.requeued_expired)
    if report.dropped_jobs:
        log.warning("sweeper: removed %d stale jobs from the queue", report.dropped_jobs)
    return report


def _parse_job_id(prefix: str, job_id: str) -> tuple[int, int] | None:
    head = run_job_prefix(prefix)
    if not job_id.startswith(head):
        return None
    run_id, _, wake = job_id[len(head) :].partition(":")
    if not (run_id.isdigit() and wake.isdigit()):
        return None
    return int(run_id), int(wake)


async def drop_dead_jobs(rt: Runtime) -> int:
    """Remove queue entries the database says no run needs: the run ended or is waiting
    (its job can only find it unclaimable), or the run has a newer job id (its lease expired
    and it was requeued, or its job was reissued). Their in-progress keys go too.

    Safe against races: the job id is read from Redis before the run from the database, and
    the wake count is committed before a job id is enqueued, so an entry is never newer than
    the row read after it. Removing an entry a live worker is running changes nothing for
    that worker (arq removes it when the job ends anyway), and its claim is fenced."""
    prefix = rt.settings.redis_prefix
    members = await rt.redis.zrange(queue_name(prefix), 0, QUEUE_HEAD - 1)
    jobs: dict[str, tuple[int, int]] = {}
    for member in members:
        job_id = member.decode() if isinstance(member, bytes) else str(member)
        parsed = _parse_job_id(prefix, job_id)
        if parsed is not None:
            jobs[job_id] = parsed
    if not jobs:
        return 0
    async with rt.read_sessionmaker() as session:
        rows = {
            run_id: (status, wake_count)
            for run_id, status, wake_count in await session.execute(
                select(Run.id, Run.status, Run.wake_count).where(Run.id.in_({r for r, _ in jobs.values()}))
            )
        }
    dead = [
        job_id
        for job_id, (run_id, wake) in jobs.items()
        if run_id not in rows or rows[run_id][0] not in JOB_STATES or wake < rows[run_id][1]
    ]
    if dead:
        async with rt.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(queue_name(prefix), *dead)
            for job_id in dead:
                pipe.delete(
                    in_progress_key_prefix + job_id, job_key_prefix + job_id, retry_key_prefix + job_id
                )
            await pipe.execute()
    return len(dead)


async def _my_turn(rt: Runtime) -> bool:
    """Whether this process sweeps now: one sweeper per interval across all workers."""
    ttl_ms = max(100, int(rt.settings.sweep_interval_s * 1000 * 0.8))
    try:
        return bool(await rt.redis.set(sweeper_turn_key(rt.settings.redis_prefix), b"1", nx=True, px=ttl_ms))
    except RedisError:
        return True  # Redis is away: lease expiry still has to be handled from the database


async def sweeper_loop(rt: Runtime) -> None:
    """Sweep now and then every ``ENVERIF_SWEEP_INTERVAL_S`` until cancelled. An outage
    (database or Redis) is logged once and retried next interval; the loop never ends on it."""
    failing = False
    while True:
        try:
            if await _my_turn(rt):
                await sweep(rt)
            if failing:
                log.warning("sweeper: working again")
            failing = False
        except Exception as exc:
            if not is_outage(exc):
                log.exception("sweeper: a sweep failed")
            elif not failing:
                log.warning("sweeper: a service is unavailable (%s); retrying", type(exc).__name__)
            failing = is_outage(exc)
        await asyncio.sleep(rt.settings.sweep_interval_s)
