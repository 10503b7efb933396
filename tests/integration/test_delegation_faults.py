"""Delegation under worker crashes, with real ``enverif worker`` processes: the parent resumes
exactly once with its child's outcome, however the crash falls."""

from __future__ import annotations

import asyncio
import signal
import uuid
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import select

from app.db.orm import RunEvent, RunStep
from app.graphql.ids import from_global_id
from tests.support.runs import get_run, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server
from tests.support.workers import spawn_worker, wait_for

ALLOW = {"default": "ALLOW"}


async def _tree(gql: Any, token: str, url: str) -> str:
    child = f"child-{uuid.uuid4().hex[:8]}"
    await scripted_agent(
        gql, token, name=child, policy=ALLOW,
        steps=[{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"from": "child"}}},
               {"final": "child posted {{ results[0].status }}"}],
    )  # fmt: skip
    # The parent allows it too: a child never gets a more permissive decision than its parent.
    return await scripted_agent(
        gql, token, tools=["agents.*"], policy=ALLOW,
        steps=[{"call": "agents.delegate", "args": {"agent": child, "task": "post it"}},
               {"final": "{{ results[0] }}"}],
    )  # fmt: skip


async def _resumes(sessionmaker: Any, root: int) -> list[RunEvent]:
    """The times the parent was woken after its child ended. A dead worker's run is requeued
    when its lease expires too: that is not a wake-up, and is told apart by its reason."""
    async with sessionmaker() as session:
        events = list(
            await session.scalars(select(RunEvent).where(RunEvent.root_run_id == root).order_by(RunEvent.seq))
        )
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
    [child_end] = [
        e.seq
        for e in events
        if e.run_id != root and e.status == "SUCCEEDED" and e.type == "RUN_STATUS_CHANGED"
    ]
    # A wake-up carries no reason; a requeue after a dead worker's lease expired says so.
    return [
        e for e in events
        if e.run_id == root and e.type == "RUN_STATUS_CHANGED" and e.status == "QUEUED" and e.seq > child_end
        and not (e.payload or {}).get("reason")
    ]  # fmt: skip


async def test_sigkill_while_the_child_runs(gql, workspace, settings, sessionmaker, processes) -> None:
    async with sink_server(delay_s=1.0) as (sink, url):
        agent = await _tree(gql, workspace.admin, url)
        first = spawn_worker(settings)
        processes.append(first)
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_for(lambda: sink.in_flight() >= 1, 30, "the child's webhook to be in flight")
        first.send_signal(signal.SIGKILL)
        first.wait()
        processes.append(spawn_worker(settings))
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["status"] == "SUCCEEDED" and run["result"]["result"] == "child posted 200"
    [key] = {d.key for d in sink.deliveries}
    assert key is not None and sink.completions(key) == 1
    assert len(await _resumes(sessionmaker, from_global_id(run_id, "Run"))) == 1


async def test_a_child_that_ended_while_no_worker_listened_still_wakes_its_parent_once(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    async with sink_server() as (_sink, url):
        agent = await _tree(gql, workspace.admin, url)
        first = spawn_worker(settings)
        processes.append(first)
        run_id = await start_run(gql, workspace.operator, agent)
        root = from_global_id(run_id, "Run")

        async def child_done() -> bool:
            async with sessionmaker() as session:
                step = await session.scalar(select(RunStep).where(RunStep.run_id == root, RunStep.seq == 1))
            return step is not None and step.status == "SUCCEEDED"

        for _ in range(600):
            if await child_done():
                break
            await asyncio.sleep(0.01)
        # The child ended and handed its outcome to the parent's step; kill the worker before
        # it resumes the parent, and drop the parent's job with everything else in Redis.
        first.send_signal(signal.SIGKILL)
        first.wait()
        client = aioredis.from_url(settings.effective_redis_url)
        try:
            keys = [k async for k in client.scan_iter(f"{settings.redis_prefix}*")]
            keys += [k async for k in client.scan_iter("arq:*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
        processes.append(spawn_worker(settings))
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["status"] == "SUCCEEDED"
    assert len(await _resumes(sessionmaker, root)) == 1
    assert (await get_run(gql, workspace.viewer, run_id))["steps"][0]["status"] == "SUCCEEDED"
