"""Lock conflicts on MariaDB (docs/architecture.md#lock-order): a write path whose
transaction the database picks as a deadlock's victim (error 1213) runs again
(``retry_deadlocks``) instead of failing. MariaDB's row locks (SQLite has one writer and no
deadlock); the quota release's own case is in test_quotas.py."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text

from app.domain.runs import RunStatus
from app.services import runs
from tests.conftest import DB_KIND
from tests.integration.test_quotas import LOCK_WAITS
from tests.support.graphql import pk
from tests.support.runs import scripted_agent, start_run

pytestmark = pytest.mark.skipif(DB_KIND != "mysql", reason="MariaDB's row locks")


async def test_a_claim_chosen_as_a_deadlocks_victim_runs_again(gql, workspace, runtime, engine) -> None:
    """A worker's claim of a run whose agent has a quota locks the run's tree, then the
    agent's row; a transaction that took them the other way round, and wrote more, makes the
    claim MariaDB's victim. Run again once the other one is gone, the claim takes the run
    (before: the job failed with error 1213, and the run waited for the sweeper)."""
    agent = await scripted_agent(gql, workspace.admin, name="claim-victim", steps=[{"final": "done"}],
                                 budget={"maxConcurrentRuns": 2})  # fmt: skip
    run = await start_run(gql, workspace.operator, agent)  # no worker: the test claims it
    async with engine.connect() as other, engine.connect() as probe:
        await other.begin()
        # The heavier transaction (rows written): InnoDB rolls back the lighter one.
        await other.execute(text("CREATE TEMPORARY TABLE weight (n INT PRIMARY KEY) ENGINE=InnoDB"))
        await other.execute(text("INSERT INTO weight VALUES " + ",".join(f"({n})" for n in range(200))))
        await other.execute(text("SELECT id FROM agents WHERE id = :id FOR UPDATE"), {"id": pk(agent)})
        claiming = asyncio.create_task(runs.claim(runtime, pk(run), owner="victim"))
        deadline = time.monotonic() + 20
        while not await probe.scalar(LOCK_WAITS):  # the claim holds the run, waits for the agent
            assert time.monotonic() < deadline and not claiming.done(), "the claim never waited"
            await asyncio.sleep(0.25)
        await other.execute(text("SELECT id FROM agent_runs WHERE id = :id FOR UPDATE"), {"id": pk(run)})
        await other.rollback()
    claim = await claiming
    assert claim is not None and claim.run.status == RunStatus.RUNNING.value and claim.attempt == 1
