"""A worker's pace after Redis comes back (a private ``redis-server``, SIGKILLed twice).

arq keeps the error of every job whose end it could not record while Redis was down and
re-raises it from its poll loop later; each such stale error used to restart the loop after
a backoff that had climbed to 5 s, so the worker stalled about 5 s per job that ended during
the outage. The pace is read from the webhook receiver: calls started per second.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from arq import create_pool
from redis.exceptions import ConnectionError as RedisConnectionError

from app.services import health
from app.services.runtime import redis_settings
from tests.conftest import DB_KIND
from tests.integration.test_resilience import changed, redis_server
from tests.support.throughput import Load, assert_back_to_pace
from workers.main import build_worker

pytestmark = pytest.mark.timeout(240)

# Generous (a loaded CI box), and still far below one stale error's 5 s stall.
RECOVERY_BOUND_S = 2.5


# Redis-side behaviour, the same whatever the database: once is enough (the production leg).
@pytest.mark.skipif(DB_KIND != "mysql", reason="Redis outages; run on the MariaDB leg")
async def test_after_redis_returns_the_worker_is_back_to_its_pace_within_moments(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    await assert_back_to_pace(
        Load(workers=1, max_jobs=4, runs_per_s=10, outages=2, outage_s=2.0, gap_s=6.0), bound_s=RECOVERY_BOUND_S,
        settings=settings, workspace=workspace, sessionmaker=sessionmaker, processes=processes, tmp_path=tmp_path,
    )  # fmt: skip


async def test_a_start_that_fails_keeps_no_concurrency_slot(settings, tmp_path) -> None:
    """arq takes a slot before marking a job in progress in Redis; when Redis fails right
    then, no slot may stay taken, or a worker reused across restarts loses one per outage
    until it takes no job at all."""
    with redis_server(tmp_path) as (port, stop_redis, _):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0", worker_max_jobs=2)
        pool = await create_pool(redis_settings(mine))
        try:
            worker = build_worker(mine, redis_pool=pool, handle_signals=False)
            stop_redis()
            for _ in range(3):  # one more than the slots there are
                with pytest.raises(RedisConnectionError):
                    await asyncio.wait_for(worker.start_jobs([b"no-such-job"]), 10)
            assert worker.job_counter == 0
            assert worker.sem._value == worker.max_jobs + 1  # arq's bound, all free again
        finally:
            await pool.aclose()


async def test_a_worker_that_does_not_poll_is_not_counted_alive(runtime, settings) -> None:
    """/healthz and ``worker --check`` count workers that take jobs, not processes that beat."""
    mine = changed(settings, redis_prefix=f"{settings.redis_prefix}-polling")
    rt = replace(runtime, settings=mine)
    polling = [False]
    beats = asyncio.create_task(
        health.heartbeat_loop(rt, "stalled-worker", lambda: 0, polling=lambda: polling[0])
    )
    try:
        deadline = time.monotonic() + 10
        while not await health.beating_workers(rt.redis, mine.redis_prefix):
            assert time.monotonic() < deadline, "no heartbeat"
            await asyncio.sleep(0.05)
        body, healthy = await health.report(rt)
        assert not healthy and (body["workers"], body["workersNotPolling"]) == (0, 1)
        assert await health.live_workers(rt.redis, mine.redis_prefix) == []

        polling[0] = True
        deadline = time.monotonic() + 3 * health.HEARTBEAT_INTERVAL_S
        while not (body := (await health.report(rt))[0])["workers"]:
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.1)
        assert body["workersNotPolling"] == 0
    finally:
        beats.cancel()
        await asyncio.gather(beats, return_exceptions=True)
        await health.forget(rt.redis, mine.redis_prefix, "stalled-worker")


async def test_a_job_this_worker_still_runs_is_not_taken_again(settings, runtime) -> None:
    """Its in-progress key can lapse while the job runs (renewals missed on a loaded box):
    the queue entry is then free to take, but not by the process already running it."""
    from arq.constants import in_progress_key_prefix

    from app.keys import queue_name

    worker = build_worker(settings, redis_pool=runtime.redis, handle_signals=False)
    job_id = f"{settings.redis_prefix}:lapsed-{time.monotonic_ns()}"
    await runtime.redis.zadd(queue_name(settings.redis_prefix), {job_id: 1})
    still_running = asyncio.create_task(asyncio.sleep(30))
    worker.tasks[job_id] = still_running
    try:
        await worker.start_jobs([job_id.encode()])
        assert worker.tasks[job_id] is still_running and worker.job_counter == 0
        assert not await runtime.redis.exists(in_progress_key_prefix + job_id)  # not marked by us
    finally:
        still_running.cancel()
        await runtime.redis.zrem(queue_name(settings.redis_prefix), job_id)


async def test_jobs_are_taken_in_one_round_trip_skipping_those_in_progress_elsewhere(
    settings, tmp_path
) -> None:
    """arq pays WATCH, EXISTS, ZSCORE and MULTI/EXEC for every job it looks at, also for the
    ones another worker is running; one script checks and marks the whole head instead. A job
    another worker runs, one no longer queued and one not yet due are left alone."""
    from arq.constants import in_progress_key_prefix
    from arq.utils import timestamp_ms

    from app.keys import queue_name

    with redis_server(tmp_path) as (port, _, _):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        pool = await create_pool(redis_settings(mine))
        try:
            worker = build_worker(mine, redis_pool=pool, handle_signals=False)
            job_ids = [f"{mine.redis_prefix}:job-{n}" for n in range(6)]
            queue = queue_name(mine.redis_prefix)
            await pool.zadd(queue, {j: 1 for j in job_ids[:4]})
            await pool.zadd(queue, {job_ids[4]: timestamp_ms() + 60_000})  # delayed: not due
            # job_ids[5] is not queued (it ended, and its entry went with it).
            for job_id in job_ids[1:4]:  # three taken elsewhere, one free
                await pool.set(in_progress_key_prefix + job_id, b"1", px=60_000)
            await pool.config_resetstat()
            await worker.start_jobs([j.encode() for j in job_ids])
            stats = await pool.info("commandstats")
            calls = {
                name: stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("eval", "watch", "multi")
            }
            assert calls == {"eval": 1, "watch": 0, "multi": 0}
            assert list(worker.tasks) == job_ids[:1] and worker.job_counter == 1
            ttl_ms = await pool.pttl(in_progress_key_prefix + job_ids[0])
            assert 0 < ttl_ms <= worker.in_progress_timeout_s * 1000
            for job_id in job_ids[4:]:
                assert not await pool.exists(in_progress_key_prefix + job_id)
            await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
        finally:
            await pool.aclose()


async def test_a_poll_takes_as_many_queued_jobs_as_it_has_slots_for(settings, tmp_path) -> None:
    """arq reads a hundred jobs of the queue's head on every poll; a worker with 3 free
    slots marks 3 of them in progress (the oldest), in one round trip, and a worker with no
    free slot, or asked only about the jobs it runs itself, asks nothing."""
    from arq.constants import in_progress_key_prefix

    from app.keys import queue_name

    with redis_server(tmp_path) as (port, _, _):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        pool = await create_pool(redis_settings(mine))
        release = asyncio.Event()
        try:
            worker = build_worker(mine, redis_pool=pool, handle_signals=False, max_jobs=3)

            async def held_job(job_id: str, score: int) -> None:
                await release.wait()

            worker.run_job = held_job  # type: ignore[method-assign]
            job_ids = [f"{mine.redis_prefix}:job-{n:02d}" for n in range(20)]
            await pool.zadd(queue_name(mine.redis_prefix), {j: 1 for j in job_ids})

            async def round_trips(*ids: str) -> int:
                await pool.config_resetstat()
                await worker.start_jobs([j.encode() for j in ids])
                stats = await pool.info("commandstats")
                # Redis 7 names subcommands ``cmdstat_config|resetstat``; INFO counts once it ran.
                ours = {
                    k: v for k, v in stats.items() if not k.startswith(("cmdstat_config", "cmdstat_info"))
                }
                return sum(int(v.get("calls", 0)) for v in ours.values())

            # One script, whose commands Redis counts as well: EVAL, then EXISTS, ZSCORE and
            # PSETEX for each of the three jobs it takes, and nothing about the other 17.
            assert await round_trips(*job_ids) == 1 + 3 * 3
            assert sorted(worker.tasks) == job_ids[:3]
            assert all([await pool.exists(in_progress_key_prefix + j) for j in job_ids[:3]])
            assert not any([await pool.exists(in_progress_key_prefix + j) for j in job_ids[3:]])
            assert await round_trips(*job_ids) == 0  # no free slot
            worker.job_counter -= 1  # a slot frees up; the 3 it runs are not asked about
            assert await round_trips(*job_ids[:3]) == 0 and sorted(worker.tasks) == job_ids[:3]
        finally:
            release.set()
            await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
            await pool.aclose()
