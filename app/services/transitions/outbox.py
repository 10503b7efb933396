"""What a tree transaction sends out after it committed: its events (Redis pub/sub) and its
wake-ups (arq jobs). Redis failures are logged, never raised: the database already holds the
truth, subscribers re-read it on gaps and the sweeper re-enqueues lost jobs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.db.orm import RunEvent
from app.services.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WakeUp:
    """A job to enqueue after commit: one per time a run becomes QUEUED. ``wake`` is part
    of the arq job id, so each wake-up is a new job (PITFALLS: arq job ids)."""

    run_id: int
    wake: int
    root_id: int


async def after_commit(rt: Runtime, events: list[RunEvent], wakeups: list[WakeUp]) -> None:
    """Publish and enqueue. Redis failures are logged, never raised: the database already
    holds the truth, subscribers re-read it on gaps and the sweeper re-enqueues lost jobs."""
    if events:
        from app.events.publish import publish_events

        await publish_events(rt.redis, rt.settings.redis_prefix, events)
    for wakeup in wakeups:
        await enqueue_run(rt, wakeup.run_id, wakeup.wake, wakeup.root_id)


async def enqueue_run(rt: Runtime, run_id: int, wake: int, root_id: int | None = None) -> None:
    from app.keys import queue_name, run_job_id

    try:
        await rt.redis.enqueue_job(
            "execute_run",
            run_id,
            wake,
            root_id,
            _job_id=run_job_id(rt.settings.redis_prefix, run_id, wake),
            _queue_name=queue_name(rt.settings.redis_prefix),
        )
    except Exception:
        log.warning("could not enqueue run %s (wake %s); the sweeper will retry", run_id, wake, exc_info=True)
