"""Chaos: workers SIGKILLed again and again while runs with side effects are in flight.

`make chaos` runs this on MariaDB (the leg where row locks are real). The short version,
one kill, is part of `make test` (tests/integration/test_faults.py).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest
from sqlalchemy import select

from app.db.orm import Run, RunStep
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.support.runs import scripted_agent, start_run
from tests.support.servers import sink_server
from tests.support.workers import spawn_worker

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

RUNS = 30
WORKERS = 2
KILL_EVERY_S = 0.8
DEADLINE_S = 120


async def test_runs_survive_repeated_worker_kills(gql, workspace, settings, sessionmaker, processes) -> None:
    rng = random.Random(1234)
    async with sink_server(delay_s=0.2) as (sink, url):
        hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"run": "{{ run.id }}"}}}
        page = {"call": "http.get", "args": {"url": url + "/page"}}
        agent = await scripted_agent(
            gql, workspace.admin, steps=[hook, page, hook, hook, {"final": "done"}], policy=ALLOW_WEBHOOK
        )
        live = [spawn_worker(settings, lease_s=2.0) for _ in range(WORKERS)]
        processes.extend(live)
        run_ids = [await start_run(gql, workspace.operator, agent) for _ in range(RUNS)]
        kills = 0
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            await asyncio.sleep(KILL_EVERY_S)
            async with sessionmaker() as session:
                open_runs = await session.scalar(
                    select(Run.id)
                    .where(
                        Run.workspace_id == workspace.id,
                        Run.status.notin_(["SUCCEEDED", "FAILED", "CANCELLED"]),
                    )
                    .limit(1)
                )
            if open_runs is None:
                break
            if kills < 25:
                victim = live.pop(rng.randrange(len(live)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                fresh = spawn_worker(settings, lease_s=2.0)
                live.append(fresh)
                processes.append(fresh)
        else:
            async with sessionmaker() as session:
                stuck = (await session.execute(
                    select(Run.id, Run.status, Run.attempt, Run.wake_count, Run.lease_owner, Run.lease_expires_at)
                    .where(Run.workspace_id == workspace.id, Run.status != "SUCCEEDED")
                )).all()  # fmt: skip
            raise AssertionError(f"runs did not all finish before the deadline: {stuck}")

    async with sessionmaker() as session:
        statuses = list(await session.scalars(select(Run.status).where(Run.workspace_id == workspace.id)))
        steps = list(
            await session.scalars(
                select(RunStep).where(RunStep.workspace_id == workspace.id, RunStep.tool == "webhook.post")
            )
        )
    assert statuses == ["SUCCEEDED"] * RUNS
    assert len(run_ids) == RUNS and kills >= 3
    assert len(steps) == 3 * RUNS
    for step in steps:
        key = str(step.id)
        assert sink.completions(key) == 1, f"step {key} completed {sink.completions(key)} times"
        assert step.finished_at is not None
        late = [
            d for d in sink.deliveries if d.key == key and d.arrived_at > step.finished_at.timestamp() + 0.001
        ]
        assert not late, f"step {key} was sent again after its result was recorded"
