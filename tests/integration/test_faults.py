"""Fault tests with real processes: a worker killed mid-call, Redis losing everything.

The workers here are real ``enverif worker`` processes against the leg's database and the
test Redis, so a SIGKILL is a real crash: no cleanup code runs.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import redis.asyncio as aioredis
from sqlalchemy import select

from app.db.orm import RunStep
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.servers import sink_server
from tests.support.workers import WORKER_LOGS, spawn_worker, wait_for

ALLOW_WEBHOOK = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


async def test_sigkill_mid_webhook_loses_nothing_and_repeats_no_recorded_step(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    async with sink_server(delay_s=1.0) as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": n}}}
                for n in (1, 2, 3)
            ]
            + [{"final": "done"}],
            policy=ALLOW_WEBHOOK,
        )
        first = spawn_worker(settings)
        processes.append(first)
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_for(lambda: sink.in_flight() >= 1, 30, "the first delivery to be in flight")
        first.send_signal(signal.SIGKILL)
        first.wait()
        processes.append(spawn_worker(settings))
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)

    assert run["status"] == "SUCCEEDED", run
    async with sessionmaker() as session:
        steps = list(
            await session.scalars(
                select(RunStep).where(RunStep.workspace_id == workspace.id, RunStep.tool == "webhook.post")
            )
        )
    assert len(steps) == 3
    keys = {str(s.id): s for s in steps}
    for key, step in keys.items():
        assert sink.completions(key) == 1, f"step {key} completed {sink.completions(key)} times"
        assert step.finished_at is not None
        for delivery in sink.deliveries:
            if delivery.key == key:
                # Nothing was sent for a step after its result was recorded.
                assert delivery.arrived_at <= step.finished_at.timestamp() + 0.001
    # The killed call was retried with the same key (and deduplicated by the receiver).
    retried = [k for k in keys if sum(1 for d in sink.deliveries if d.key == k) == 2]
    assert len(retried) == 1
    assert all(d.key in keys for d in sink.deliveries)


async def test_flushall_while_queued_loses_no_run(gql, workspace, settings, processes) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ input.n }}"}])
    run_ids = [await start_run(gql, workspace.operator, agent, {"n": n}) for n in range(5)]
    client = aioredis.from_url(settings.effective_redis_url)
    try:
        assert await client.zcard(f"{settings.redis_prefix}:queue") >= 5
        await client.flushall()
    finally:
        await client.aclose()
    processes.append(spawn_worker(settings))
    results = [await wait_run(gql, workspace.viewer, r, timeout_s=60) for r in run_ids]
    assert [r["status"] for r in results] == ["SUCCEEDED"] * 5
    assert [r["result"] for r in results] == list(range(5))


async def test_sigterm_finishes_the_call_then_hands_the_run_back_at_once(
    gql, workspace, settings, processes
) -> None:
    """A graceful stop lets the call in flight finish and records it, then hands the run back
    at once instead of leaving it to wait out its (long) lease; nothing is sent twice and the
    stopped worker logs no error."""
    from tests.support.runs import get_run

    async with sink_server(delay_s=1.0) as (sink, url):
        hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}
        agent = await scripted_agent(
            gql, workspace.admin, steps=[hook, hook, {"final": "done"}], policy=ALLOW_WEBHOOK
        )
        first = spawn_worker(settings, lease_s=600)
        processes.append(first)
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_for(lambda: sink.in_flight() >= 1, 30, "the delivery to be in flight")
        first.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(first.wait, 15) == 0
        log = await asyncio.to_thread(Path(WORKER_LOGS[first.pid]).read_text, errors="replace")
        assert "ERROR" not in log, log
        assert (await get_run(gql, workspace.viewer, run_id))["status"] == "QUEUED"
        assert len(sink.deliveries) == 1 and sink.in_flight() == 0
        processes.append(spawn_worker(settings, lease_s=600))
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED"
    keys = [d.key for d in sink.deliveries]
    assert len(keys) == 2 and len(set(keys)) == 2, keys
    assert all(key is not None and sink.completions(key) == 1 for key in keys)
