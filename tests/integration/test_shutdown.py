"""Stopping a worker (SIGTERM, a rolling restart) while its jobs are running or finishing
(workers.main.stop_worker): nothing is logged as an ERROR, every run is handed back or
finished, and nothing is left holding the database."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from sqlalchemy import update

from app.db.orm import Run
from app.db.session import create_engine
from app.events.publish import raw_events
from app.keys import events_channel, run_job_prefix
from tests.conftest import stop_worker
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.support.graphql import pk
from tests.support.runs import get_run, scripted_agent, start_run
from tests.support.servers import sink_server
from tests.support.workers import WORKER_LOGS, spawn_worker

pytestmark = pytest.mark.timeout(240)


async def _read_log(pid: int) -> str:
    return await asyncio.to_thread(Path(WORKER_LOGS[pid]).read_text, errors="replace")


async def test_sigterm_right_after_runs_finish_logs_no_error(gql, workspace, settings, processes) -> None:
    """As the throughput bench stops its workers: frozen while the queue fills, then SIGTERM
    as soon as the last run's SUCCEEDED event arrives, while jobs are in arq's bookkeeping."""
    runs = 60
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "done"}])
    workers = [spawn_worker(settings, lease_s=5.0) for _ in range(2)]
    processes.extend(workers)
    client = aioredis.from_url(settings.effective_redis_url)
    pubsub = client.pubsub()
    await pubsub.subscribe(events_channel(settings.redis_prefix))
    try:
        await asyncio.sleep(3.0)  # start-up
        for p in workers:
            p.send_signal(signal.SIGSTOP)
        ids = {pk(await start_run(gql, workspace.operator, agent)) for _ in range(runs)}
        for p in workers:
            p.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while ids:
            assert time.monotonic() < deadline, f"{len(ids)} runs did not succeed"
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            for event in raw_events(msg["data"]) if msg else []:
                if event.get("type") == "RUN_STATUS_CHANGED" and event.get("status") == "SUCCEEDED":
                    ids.discard(event["run_id"])
        for p in workers:
            p.send_signal(signal.SIGTERM)
        codes = [await asyncio.to_thread(p.wait, 30) for p in workers]
    finally:
        await pubsub.aclose()
        await client.aclose()
    logs = [await _read_log(p.pid) for p in workers]
    assert codes == [0, 0], logs
    for log in logs:
        assert "ERROR" not in log, log


async def test_a_stopped_worker_waits_for_arqs_bookkeeping_before_closing(
    gql, workspace, settings, monkeypatch
) -> None:
    """The window the SIGTERM test can only hit by chance, held open: the run succeeded and
    arq is recording the job's end in Redis when the worker is stopped. ``run_worker`` must
    return only after that write ended (else it goes on unattended and is cut off when the
    runtime's Redis pool closes: ``Unclosed Pipeline client``)."""
    from arq.worker import Worker

    from workers.main import run_worker

    finish_job = Worker.finish_job
    entered, ended = asyncio.Event(), asyncio.Event()
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "done"}])
    # Started before the worker, so its job id is known: the shared queue can hold other
    # tests' stale jobs (the cron job's, or a run's another test left), which must not count.
    run_id = await start_run(gql, workspace.operator, agent)
    ours = f"{run_job_prefix(settings.redis_prefix)}{pk(run_id)}:"

    async def slow_finish_job(self: Worker, job_id: str, *args: Any, **kwargs: Any) -> None:
        if not job_id.startswith(ours):
            return await finish_job(self, job_id, *args, **kwargs)
        entered.set()
        await asyncio.sleep(0.5)
        await finish_job(self, job_id, *args, **kwargs)
        ended.set()

    monkeypatch.setattr(Worker, "finish_job", slow_finish_job)
    worker = asyncio.create_task(run_worker(settings))
    await asyncio.wait_for(entered.wait(), 30)
    worker.cancel()  # what run_stack does on SIGTERM
    await asyncio.gather(worker, return_exceptions=True)
    assert ended.is_set(), "run_worker returned while arq was still recording a job's end"
    assert (await get_run(gql, workspace.operator, run_id))["status"] == "SUCCEEDED"


async def test_a_run_cancelled_twice_still_finishes_handing_itself_back(
    gql, workspace, runtime, monkeypatch
) -> None:
    """A second cancellation (a second signal, a stop timeout) while a cancelled run is handing
    itself back must not end the job before that write does: left unattended, the write's
    transaction outlives the worker's engine and event loop (on SQLite, with the whole database
    write-locked)."""
    from app.engine.loop import execute_run
    from app.engine.tools.registry import default_registry
    from app.services import runs

    release = runs.release
    entered, ended = asyncio.Event(), asyncio.Event()

    async def slow_release(*args: Any, **kwargs: Any) -> None:
        entered.set()
        await asyncio.sleep(0.3)
        await release(*args, **kwargs)
        ended.set()

    monkeypatch.setattr(runs, "release", slow_release)
    registry = default_registry(runtime.settings)
    async with sink_server(delay_s=1.0) as (sink, url):
        hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}
        agent = await scripted_agent(gql, workspace.admin, steps=[hook, {"final": 1}], policy=ALLOW_WEBHOOK)
        run_id = await start_run(gql, workspace.operator, agent)
        job = asyncio.create_task(execute_run(runtime, registry, pk(run_id), owner="w1"))
        deadline = time.monotonic() + 30
        while sink.in_flight() < 1:
            assert time.monotonic() < deadline, "no call in flight"
            await asyncio.sleep(0.02)
        job.cancel()
        await asyncio.wait_for(entered.wait(), 10)
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        assert job.cancelled()
        assert ended.is_set(), "the job ended before its run was handed back"
    await registry.aclose()
    assert (await get_run(gql, workspace.operator, run_id))["status"] == "QUEUED"


async def test_a_hand_back_the_database_never_answers_is_given_up(
    gql, workspace, runtime, monkeypatch
) -> None:
    """A stopping worker must end even when its hand-back write hangs: after
    ``RELEASE_WAIT_S`` the job gives the write up (the run's lease expires instead)."""
    from app.engine import loop
    from app.engine.tools.registry import default_registry
    from app.services import runs

    async def hanging_release(*args: Any, **kwargs: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(runs, "release", hanging_release)
    monkeypatch.setattr(loop, "RELEASE_WAIT_S", 0.3)
    registry = default_registry(runtime.settings)
    async with sink_server(delay_s=1.0) as (sink, url):
        hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}
        agent = await scripted_agent(gql, workspace.admin, steps=[hook, {"final": 1}], policy=ALLOW_WEBHOOK)
        run_id = await start_run(gql, workspace.operator, agent)
        job = asyncio.create_task(loop.execute_run(runtime, registry, pk(run_id), owner="w1"))
        deadline = time.monotonic() + 30
        while sink.in_flight() < 1:
            assert time.monotonic() < deadline, "no call in flight"
            await asyncio.sleep(0.02)
        job.cancel()
        job.cancel()  # a second signal changes nothing
        done, _ = await asyncio.wait({job}, timeout=5)
        assert done == {job} and job.cancelled()
    await registry.aclose()
    assert (await get_run(gql, workspace.operator, run_id))["status"] == "RUNNING"  # the lease will expire


@pytest.mark.parametrize("after_start_ms", [0, 5, 20, 300])
async def test_an_in_process_stop_mid_run_leaves_the_database_writable(
    gql, workspace, settings, after_start_ms
) -> None:
    """Stopped right after startRun (mid-claim) or during a call, the in-process worker ends
    with its run handed back or finished, and the next write does not wait for a lock."""
    from workers.main import build_worker

    async with sink_server(delay_s=1.0) as (_, url):
        hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}
        agent = await scripted_agent(gql, workspace.admin, steps=[hook, {"final": 1}], policy=ALLOW_WEBHOOK)
        w = build_worker(settings, handle_signals=False)
        task = asyncio.create_task(w.main())
        await asyncio.sleep(0.5)  # start-up
        run_id = await start_run(gql, workspace.operator, agent)
        await asyncio.sleep(after_start_ms / 1000)
        await stop_worker(w, task)
    engine = create_engine(settings.effective_database_url)
    try:
        started = time.monotonic()
        async with engine.begin() as conn:
            await conn.execute(update(Run).where(Run.id == pk(run_id)).values(wake_count=Run.wake_count))
        write_s = time.monotonic() - started
    finally:
        await engine.dispose()
    assert write_s < 1.0, f"the next write waited {write_s:.1f} s for a lock"
    run = await get_run(gql, workspace.operator, run_id)
    assert run["status"] in ("QUEUED", "SUCCEEDED"), run
