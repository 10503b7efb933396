"""What a tree transaction sends out after it committed: its events (Redis pub/sub) and its
wake-ups (arq jobs), in one round trip to Redis. Redis failures are logged, never raised: the
database already holds the truth, subscribers re-read it on gaps and the sweeper re-enqueues
lost jobs.

A wake-up is enqueued exactly as arq's ``ArqRedis.enqueue_job`` does it (the same job and
queue keys, the same serialized job, the same expiry, and nothing written when a job or a
result with that id exists), but as one Lua script instead of WATCH, EXISTS and MULTI/EXEC:
three round trips fewer per wake-up, pipelined with the event messages. The script runs
atomically, which is what arq's WATCH guards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from redis.exceptions import RedisError

from app import keys
from app.domain.run_events import EventType
from app.domain.runs import TERMINAL_RUN
from app.events.publish import PUBLISH_TIMEOUT_S, EventMessage, encode_events
from app.services.runtime import Runtime

if TYPE_CHECKING:
    from app.db.orm import Run

log = logging.getLogger(__name__)

_ENDED = frozenset(status.value for status in TERMINAL_RUN)
RUN_STATUS_CHANGED = EventType.RUN_STATUS_CHANGED.value

EXECUTE_RUN = "execute_run"

# KEYS: job key, result key, queue. ARGV: expiry (ms), serialized job, score, job id.
_ENQUEUE_JOB = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 1
"""


@dataclass(frozen=True, slots=True)
class WakeUp:
    """A job to enqueue after commit: one per time a run becomes QUEUED. ``wake`` is part
    of the arq job id, so each wake-up is a new job: arq refuses a job id
    whose earlier job is queued, running or has a kept result (docs/architecture.md)."""

    run_id: int
    wake: int
    root_id: int | None


class Emit(Protocol):
    """``TreeTx.emit``: appends an event to the transaction's log. Its mixins declare it with
    this one signature, so a change to it cannot leave them out of step."""

    def __call__(
        self,
        run: Run,
        type: EventType,
        *,
        status: str | None = None,
        step_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> EventMessage: ...


async def after_commit(rt: Runtime, events: list[EventMessage], wakeups: list[WakeUp]) -> None:
    """Publish and enqueue, in one round trip. Never raises for Redis trouble."""
    if events or wakeups:
        await send(rt, encode_events(events) if events else [], wakeups, watch=_watch(rt, events))


def _watch(rt: Runtime, events: list[EventMessage]) -> list[int]:
    """The runs of this worker whose watchers to ask about: those the transaction touched,
    unless it ended them (no turn follows)."""
    watched = rt.output_watch
    if not watched:
        return []
    runs = {e.run_id for e in events if e.run_id in watched}
    if runs:
        runs -= {e.run_id for e in events if e.type == RUN_STATUS_CHANGED and e.status in _ENDED}
    return sorted(runs)


async def send(rt: Runtime, messages: list[str], wakeups: list[WakeUp], *, watch: Sequence[int] = ()) -> None:
    """Publish encoded event messages (in order), then enqueue the wake-ups: one pipeline.

    ``watch``: runs this worker executes whose ``runOutput`` watchers the same round trip
    asks about (``Runtime.output_watch``), so a turn's live output costs nothing when
    nobody watches (app.events.output)."""
    prefix = rt.settings.redis_prefix
    channel = keys.events_channel(prefix)
    try:
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            async with rt.redis.pipeline(transaction=False) as pipe:
                # Events first, in seq order (a pipeline keeps the order), then the jobs.
                for message in messages:
                    pipe.publish(channel, message)
                for wakeup in wakeups:
                    _enqueue(rt, pipe, wakeup)
                for run_id in watch:
                    pipe.exists(keys.output_watch_key(prefix, run_id))
                replies = await pipe.execute()
        if watch and rt.output_watch is not None:
            for run_id, found in zip(watch, replies[len(replies) - len(watch) :], strict=True):
                if run_id in rt.output_watch:
                    rt.output_watch[run_id] = bool(found)
    except (RedisError, OSError, TimeoutError) as exc:
        # One warning per outage, however many runs' sends it fails; the count comes when
        # Redis answers again (docs/operating/outages.md).
        if rt.send_outage.failed(messages=len(messages), wakeups=len(wakeups)):
            log.warning("%s; further failed sends are counted until Redis answers: %r",
                        _what_failed(channel, messages, wakeups), exc)  # fmt: skip
        return
    recovered = rt.send_outage.recovered()
    if recovered is not None:
        log.warning(recovered)


def _what_failed(channel: str, messages: list[str], wakeups: list[WakeUp]) -> str:
    parts = []
    if messages:
        parts.append(
            f"could not publish {len(messages)} run event(s) on {channel} (subscribers will re-read them)"
        )
    if wakeups:
        more = f" and {len(wakeups) - 1} more" if len(wakeups) > 1 else ""
        parts.append(
            f"could not enqueue run {wakeups[0].run_id} (wake {wakeups[0].wake}){more} (the sweeper will retry)"
        )
    return "; ".join(parts)


async def enqueue_run(rt: Runtime, run_id: int, wake: int, root_id: int | None = None) -> None:
    """Enqueue one wake-up (the sweeper's re-enqueue). Never raises for Redis trouble."""
    await after_commit(rt, [], [WakeUp(run_id, wake, root_id)])


def _enqueue(rt: Runtime, pipe: object, wakeup: WakeUp) -> None:
    job_id = keys.run_job_id(rt.settings.redis_prefix, wakeup.run_id, wakeup.wake)
    now_ms = timestamp_ms()
    job = serialize_job(
        EXECUTE_RUN,
        (wakeup.run_id, wakeup.wake, wakeup.root_id),
        {},
        None,
        now_ms,
        serializer=rt.redis.job_serializer,
    )
    pipe.eval(  # type: ignore[attr-defined]
        _ENQUEUE_JOB,
        3,
        job_key_prefix + job_id,
        result_key_prefix + job_id,
        keys.queue_name(rt.settings.redis_prefix),
        rt.redis.expires_extra_ms,
        job,
        now_ms,
        job_id,
    )
