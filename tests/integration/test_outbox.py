"""After-commit delivery (app.services.transitions.outbox) against a real Redis: a wake-up is
the job arq's own ``enqueue_job`` would have written, enqueued at most once per job id, and
event messages go out in seq order in the same round trip."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from arq.connections import ArqRedis
from arq.constants import result_key_prefix
from arq.jobs import Job, JobStatus

from app import keys
from app.events.publish import decode_messages
from app.services.runtime import Runtime
from app.services.transitions import outbox
from app.services.transitions.outbox import WakeUp, after_commit, enqueue_run
from tests.integration.test_event_hub import event, fresh_id


def job(rt: Runtime, run_id: int, wake: int) -> Job:
    job_id = keys.run_job_id(rt.settings.redis_prefix, run_id, wake)
    return Job(job_id, rt.redis, _queue_name=keys.queue_name(rt.settings.redis_prefix))


async def test_a_wake_up_is_the_job_arq_would_enqueue(runtime: Runtime) -> None:
    run_id = fresh_id()
    await enqueue_run(runtime, run_id, 3, 77)
    queued = job(runtime, run_id, 3)
    assert await queued.status() == JobStatus.queued
    info = await queued.info()
    assert info is not None
    assert (info.function, info.args, info.kwargs, info.job_try) == ("execute_run", (run_id, 3, 77), {}, None)
    ttl_ms = await runtime.redis.pttl(f"arq:job:{queued.job_id}")
    assert 0.99 * runtime.redis.expires_extra_ms < ttl_ms <= runtime.redis.expires_extra_ms


async def test_a_job_id_is_enqueued_at_most_once(runtime: Runtime) -> None:
    run_id = fresh_id()
    await enqueue_run(runtime, run_id, 1, run_id)
    first = await job(runtime, run_id, 1).info()
    await asyncio.sleep(0.01)
    await enqueue_run(runtime, run_id, 1, run_id)
    again = await job(runtime, run_id, 1).info()
    assert first is not None and again is not None and again.enqueue_time == first.enqueue_time
    queue = keys.queue_name(runtime.settings.redis_prefix)
    assert await runtime.redis.zcount(queue, "-inf", "+inf") >= 1
    assert await runtime.redis.zscore(queue, job(runtime, run_id, 1).job_id) is not None

    # A job that already ran (its result is kept) is not enqueued again either.
    done = fresh_id()
    await runtime.redis.set(result_key_prefix + job(runtime, done, 1).job_id, b"x")
    await enqueue_run(runtime, done, 1, done)
    assert await runtime.redis.zscore(queue, job(runtime, done, 1).job_id) is None


async def test_events_and_wake_ups_go_out_together_in_seq_order(runtime: Runtime) -> None:
    root = fresh_id()
    pubsub = runtime.redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.events_channel(runtime.settings.redis_prefix))
    try:
        events = [event(1, root, seq) for seq in (3, 1, 2)]
        await after_commit(runtime, events, [WakeUp(root, 1, root)])
        got: list[list[int]] = []  # the seqs of each message
        deadline = asyncio.get_running_loop().time() + 10
        while sum(map(len, got)) < 3 and asyncio.get_running_loop().time() < deadline:
            # None also stands for the subscription's confirmation (ignored): keep reading.
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
            if message is not None:
                got.append([e.seq for e in decode_messages(message["data"]) if e.root_run_id == root])
        assert got == [[1, 2, 3]]  # one PUBLISH for the transaction, in seq order
        assert await job(runtime, root, 1).status() == JobStatus.queued
    finally:
        await pubsub.aclose()


def _unreachable() -> ArqRedis:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return ArqRedis(host="127.0.0.1", port=port, socket_connect_timeout=1)


async def test_redis_trouble_is_logged_not_raised(runtime: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    working, runtime.redis = runtime.redis, _unreachable()
    try:
        await after_commit(runtime, [event(1, fresh_id(), 1)], [WakeUp(fresh_id(), 1, None)])
    finally:
        await runtime.redis.aclose()
        runtime.redis = working
    assert "could not publish 1 run event(s)" in caplog.text
    assert "could not enqueue run" in caplog.text


async def test_an_outage_is_one_warning_and_its_count_when_redis_is_back(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=outbox.__name__)
    working, runtime.redis = runtime.redis, _unreachable()
    try:
        for n in range(40):  # forty runs' transactions commit while Redis is away
            await after_commit(runtime, [event(1, fresh_id(), 1)], [WakeUp(fresh_id(), 1, None)] * (n % 2))
    finally:
        await runtime.redis.aclose()
        runtime.redis = working
    during = [r.getMessage() for r in caplog.records if r.name == outbox.__name__]
    assert len(during) == 1 and "could not publish 1 run event(s)" in during[0], during
    caplog.clear()
    back = fresh_id()
    await after_commit(runtime, [event(1, back, 1)], [WakeUp(back, 1, back)])
    await after_commit(runtime, [event(1, back, 2)], [])
    after = [r.getMessage() for r in caplog.records if r.name == outbox.__name__]
    assert len(after) == 1, after
    assert "40 after-commit send(s) failed" in after[0] and "40 event message(s)" in after[0], after
    assert "20 wake-up(s) not enqueued" in after[0], after
    assert await job(runtime, back, 1).status() == JobStatus.queued
    # The next outage is news again.
    working, runtime.redis = runtime.redis, _unreachable()
    try:
        await after_commit(runtime, [], [WakeUp(fresh_id(), 1, None)])
    finally:
        await runtime.redis.aclose()
        runtime.redis = working
    again = [r.getMessage() for r in caplog.records if r.name == outbox.__name__][1:]
    assert len(again) == 1 and "could not enqueue run" in again[0], again
