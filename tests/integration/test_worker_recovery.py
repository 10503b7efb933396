"""A worker's pace after Redis comes back (a private ``redis-server``, SIGKILLed twice).

arq keeps the error of every job whose end it could not record while Redis was down and
re-raises it from its poll loop later; each such stale error used to restart the loop after
a backoff that had climbed to 5 s, so the worker stalled about 5 s per job that ended during
the outage. The pace is read from the webhook receiver: calls started per second.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import DB_KIND
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.integration.test_resilience import (
    api,
    assert_no_recorded_step_repeated,
    changed,
    exited,
    redis_server,
    spawn_worker,
    wait_all,
    webhook_agent_steps,
)
from tests.support.runs import create_agent, start_run
from tests.support.servers import sink_server
from tests.support.throughput import NORMAL_SHARE, WINDOW_S, recovery

pytestmark = [
    pytest.mark.timeout(240),
    # Redis-side behaviour, the same whatever the database: once is enough (the production leg).
    pytest.mark.skipif(DB_KIND != "mysql", reason="Redis outages; run on the MariaDB leg"),
]

LEASE_S = 3.0
OUTAGE_S = 2.0
# Generous (a loaded CI box), and still far below one stale error's 5 s stall.
RECOVERY_BOUND_S = 2.5
GAP_S = 6.0  # between Redis answering and the next kill


async def test_after_redis_returns_the_worker_is_back_to_its_pace_within_moments(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    with redis_server(tmp_path) as (port, stop_redis, start_redis):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        async with sink_server(delay_s=0.3) as (sink, url), api(mine) as gql:
            agent = await create_agent(
                gql, workspace.admin, steps=webhook_agent_steps(url, 2), policy=ALLOW_WEBHOOK
            )
            worker = spawn_worker(mine, lease_s=LEASE_S, max_jobs=4)
            processes.append(worker)
            started = 0
            offering = asyncio.Event()

            async def offer() -> None:  # about ten runs a second, more than one worker can take
                nonlocal started
                while not offering.is_set():
                    await start_run(gql, workspace.operator, agent)
                    started += 1
                    await asyncio.sleep(0.1)

            producer = asyncio.create_task(offer())
            deadline = time.monotonic() + 60
            while len(sink.deliveries) < 4:
                assert time.monotonic() < deadline, "no call started"
                await asyncio.sleep(0.05)
            steady_from = time.time()
            await asyncio.sleep(3.0)
            baseline = (steady_from, time.time())
            back_at: list[float] = []
            for _ in range(2):
                stop_redis()
                await asyncio.sleep(OUTAGE_S)
                start_redis()  # returns once the port accepts connections
                back_at.append(time.time())
                await asyncio.sleep(GAP_S)
            offering.set()
            await producer

            measured = recovery(
                [d.arrived_at for d in sink.deliveries],
                baseline=baseline,
                back_at=back_at,
                horizon_s=GAP_S - WINDOW_S,
            )
            print(
                f"\nredis outage recovery: {measured.baseline_per_s} calls/s before; back to "
                f"{NORMAL_SHARE:.0%} of that pace {measured.recovered_after_s} s after Redis answered"
            )
            rows = await wait_all(sessionmaker, workspace.id, started, timeout_s=120)
            assert [s for _, s in rows] == ["SUCCEEDED"] * started
            await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 2 * started)
            assert not exited([worker]), exited([worker])
            assert measured.worst_s() < RECOVERY_BOUND_S, measured
