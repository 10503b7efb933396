"""Chaos at the scale of the incident that wedged the queue for an hour (docs/operating/outages.md):
100 runs of three ``webhook.post`` calls to a receiver answering in 1 s, 20 SIGKILLs of a
worker about a second apart, each replaced at once, lease 6 s; then Redis restarted and
database connections killed, repeatedly, under load. ``make chaos`` (MariaDB by default).

The short versions are in tests/integration/test_resilience.py.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest

from tests.conftest import DB_KIND
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.integration.test_resilience import (
    _kill_session_connections,
    api,
    assert_no_recorded_step_repeated,
    changed,
    exited,
    redis_server,
    spawn_worker,
    wait_all,
    webhook_agent_steps,
)
from tests.support.runs import scripted_agent, start_run
from tests.support.servers import sink_server

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

LEASE_S = 6.0


async def test_kill_storm_at_incident_scale_never_wedges(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    runs, kills = 100, 20
    rng = random.Random(2026)
    async with sink_server(delay_s=1.0) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
        )
        live = [spawn_worker(settings, lease_s=LEASE_S, max_jobs=16) for _ in range(2)]
        processes.extend(live)
        for _ in range(runs):
            await start_run(gql, workspace.operator, agent)
        deadline = time.monotonic() + 120
        while sink.in_flight() < 1:
            assert time.monotonic() < deadline, "no call in flight"
            await asyncio.sleep(0.05)
        for _ in range(kills):
            await asyncio.sleep(1.0)
            victim = live.pop(rng.randrange(len(live)))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            fresh = spawn_worker(settings, lease_s=LEASE_S, max_jobs=16)
            live.append(fresh)
            processes.append(fresh)
        last_kill = time.monotonic()
        rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=300)
        print(
            f"\nincident scale: all {runs} runs done {time.monotonic() - last_kill:.1f}s after the last kill"
        )
        assert [s for _, s in rows] == ["SUCCEEDED"] * runs
        await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
    assert not exited(live), exited(live)


async def test_redis_restarted_again_and_again_under_load(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    runs = 40
    with redis_server(tmp_path) as (port, stop_redis, start_redis):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        async with sink_server(delay_s=0.5) as (sink, url), api(mine) as gql:
            agent = await scripted_agent(
                gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
            )
            workers = [spawn_worker(mine, lease_s=2.0) for _ in range(2)]
            processes.extend(workers)
            for _ in range(runs):
                await start_run(gql, workspace.operator, agent)
            for _ in range(4):
                await asyncio.sleep(2.0)
                stop_redis()
                await asyncio.sleep(2.0)
                start_redis()
            rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=180)
            assert [s for _, s in rows] == ["SUCCEEDED"] * runs
            await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
            assert not exited(workers), exited(workers)


@pytest.mark.skipif(DB_KIND != "mysql", reason="server-side connection kills")
async def test_database_connections_killed_again_and_again(
    gql, workspace, settings, sessionmaker, engine, processes
) -> None:
    runs = 40
    async with sink_server(delay_s=0.5) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
        )
        workers = [spawn_worker(settings, lease_s=2.0) for _ in range(2)]
        processes.extend(workers)
        for _ in range(runs):
            await start_run(gql, workspace.operator, agent)
        for _ in range(10):
            await asyncio.sleep(1.0)
            await _kill_session_connections(engine)
        rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=180)
        assert [s for _, s in rows] == ["SUCCEEDED"] * runs
        await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
        assert not exited(workers), exited(workers)
