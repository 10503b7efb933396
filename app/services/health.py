"""Liveness: workers' heartbeats in Redis, and what ``/healthz`` and ``worker --check`` report.

A worker writes its heartbeat key every ``HEARTBEAT_INTERVAL_S`` with a TTL of a few
intervals, so a worker that died (SIGKILL, OOM, a lost host) disappears from the count on
its own within ``HEARTBEAT_TTL_S``; one that stops cleanly deletes its key at once. Redis
rather than the database: a heartbeat per worker every few seconds is exactly the kind of
short-lived, losable state Redis is for, and losing it (Redis restarted) only makes workers
look absent until their next beat.

A beat also says whether the worker's poll loop is working (``polling``): a process that is
alive but takes no job and runs no cron (its poll loop failing, or waiting for Redis) is not
counted as a live worker, so ``/healthz`` turns ``degraded`` and ``enverif worker --check``
fails for it, rather than reporting a worker that does nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import func, select

from app.db.clock import as_utc, now_sql
from app.db.orm import Run
from app.domain.runs import RunStatus
from app.keys import worker_heartbeat_key, workers_index
from app.services.runtime import Runtime

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 2.0
# Three missed beats: long enough to ride out a busy event loop, short enough that a dead
# worker stops being counted within seconds.
HEARTBEAT_TTL_S = 3 * HEARTBEAT_INTERVAL_S
PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class WorkerBeat:
    owner: str
    host: str
    pid: int
    started_at: float  # unix seconds
    jobs: int  # jobs in progress at the last beat
    polling: bool = True  # its poll loop finished a turn recently (absent from older beats)


async def beat(redis: Redis, prefix: str, worker: WorkerBeat) -> None:
    value = json.dumps(worker.__dict__)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(worker_heartbeat_key(prefix, worker.owner), value, px=int(HEARTBEAT_TTL_S * 1000))
        pipe.sadd(workers_index(prefix), worker.owner)
        await pipe.execute()


async def forget(redis: Redis, prefix: str, owner: str) -> None:
    """A worker stopping cleanly: stop counting it now rather than when its beat expires."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.delete(worker_heartbeat_key(prefix, owner))
        pipe.srem(workers_index(prefix), owner)
        await pipe.execute()


async def live_workers(redis: Redis, prefix: str) -> list[WorkerBeat]:
    """The workers that beat and whose poll loop works: those that take queued runs."""
    return [w for w in await beating_workers(redis, prefix) if w.polling]


async def beating_workers(redis: Redis, prefix: str) -> list[WorkerBeat]:
    """Every worker process with a live heartbeat, polling or not."""
    owners = sorted(
        m.decode() if isinstance(m, bytes) else str(m)
        for m in await redis.smembers(workers_index(prefix))  # type: ignore[misc]
    )
    if not owners:
        return []
    values = await redis.mget([worker_heartbeat_key(prefix, o) for o in owners])
    alive: list[WorkerBeat] = []
    gone: list[str] = []
    for owner, value in zip(owners, values, strict=True):
        if value is None:
            gone.append(owner)
            continue
        try:
            alive.append(WorkerBeat(**json.loads(value)))
        except (ValueError, TypeError):
            gone.append(owner)
    if gone:
        await redis.srem(workers_index(prefix), *gone)  # type: ignore[misc]
    return alive


def this_worker(owner: str, *, started_at: float, jobs: int, polling: bool = True) -> WorkerBeat:
    return WorkerBeat(
        owner=owner,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=started_at,
        jobs=jobs,
        polling=polling,
    )


async def heartbeat_loop(
    rt: Runtime, owner: str, jobs: Callable[[], int], *, polling: Callable[[], bool] = lambda: True
) -> None:
    """Beat until cancelled; Redis being away is logged once per outage, never fatal."""
    started_at = time.time()
    failing = False
    was_polling = True
    while True:
        now_polling = polling()
        if now_polling != was_polling:
            if now_polling:
                log.warning("worker %s: its poll loop is working again", owner)
            else:
                log.warning("worker %s: its poll loop has stalled; not counted as alive", owner)
            was_polling = now_polling
        try:
            await beat(
                rt.redis,
                rt.settings.redis_prefix,
                this_worker(owner, started_at=started_at, jobs=jobs(), polling=now_polling),
            )
            if failing:
                log.warning("worker %s: heartbeat restored", owner)
            failing = False
        except Exception as exc:
            if not failing:
                log.warning("worker %s: cannot write its heartbeat (%s); retrying", owner, type(exc).__name__)
            failing = True
        await asyncio.sleep(HEARTBEAT_INTERVAL_S)


async def oldest_queued_age_s(rt: Runtime) -> float | None:
    """Seconds the oldest QUEUED run has waited, on the database's clock; None when none.

    One statement in a read-only session, which is also ``/healthz``'s database ping: a probe
    that waits for several round trips waits that many turns of a busy event loop (under a
    flood of requests, each turn is long), and on SQLite a write transaction would queue
    behind the process's writers (docs/operating/sqlite.md)."""
    async with rt.read_sessionmaker() as session:
        dialect = session.get_bind().dialect.name
        oldest, now_value = (
            await session.execute(
                select(func.min(Run.queued_at), now_sql(dialect)).where(Run.status == RunStatus.QUEUED.value)
            )
        ).one()
    if oldest is None:
        return None
    now = as_utc(now_value)
    return max(0.0, (now - oldest.replace(tzinfo=now.tzinfo)).total_seconds())


async def report(rt: Runtime) -> tuple[dict[str, Any], bool]:
    """What ``/healthz`` answers, and whether it is healthy: the database and Redis answer
    and at least one worker is alive (without one, nothing queued will ever run). The three
    probes run together; the database's is the queue's age."""
    database, redis, workers = await asyncio.gather(
        _probe("database", lambda: oldest_queued_age_s(rt)),
        _probe("redis", rt.redis.ping),
        _probe("workers", lambda: beating_workers(rt.redis, rt.settings.redis_prefix)),
    )
    age = database[1] if database[0] == "ok" else None
    beating: list[WorkerBeat] = workers[1] if workers[0] == "ok" and workers[1] is not None else []
    alive = sum(1 for w in beating if w.polling)
    healthy = database[0] == "ok" and redis[0] == "ok" and alive > 0
    body: dict[str, Any] = {
        "status": "ok" if healthy else "degraded",
        "database": database[0],
        "redis": redis[0],
        "workers": alive,
        # Processes alive but not polling (their poll loop failing or waiting for Redis).
        "workersNotPolling": len(beating) - alive,
        "oldestQueuedAgeS": None if age is None else round(age, 3),
    }
    return body, healthy


async def _probe(name: str, check: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
    """("ok", value), or a short error naming the failure's kind. Details go to the log only:
    the endpoint is unauthenticated and a driver's message can carry host names or queries."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            value = await check()
    except TimeoutError:
        log.warning("health check: %s timed out after %ss", name, PROBE_TIMEOUT_S)
        return f"error: timed out after {PROBE_TIMEOUT_S}s", None
    except Exception as exc:
        log.warning("health check: %s failed", name, exc_info=True)
        return f"error: {type(exc).__name__}", None
    return "ok", value
