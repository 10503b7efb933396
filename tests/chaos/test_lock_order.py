"""One lock order (docs/architecture.md#lock-order): a claim locks its tree's root, the run,
then the workspace's and the agent's rows; ``updateAgent(status: ACTIVE)`` and
``resumeWorkspace`` lock the held runs they release before the agent's or workspace's row.
Toggled against a worker claiming those runs (an agent with ``maxConcurrentRuns``, so each
claim locks the agent's row), no mutation fails, no transaction deadlocks, and every run
ends. GraphQL, a real worker; it is MariaDB's row locks this is about.

A race that fails only by chance, so it runs with ``make chaos``: the quota's own release
(``release_quota``, after a run ends) can be a deadlock's victim; it runs again then
(``retry_deadlocks``; tests/integration/test_quotas.py makes it the victim on purpose), and
a worker's claim that deadlocks logs the driver's error, which this test counts."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.integration.test_holds import PAUSE, RESUME, SET_STATUS
from tests.integration.test_quotas import RUNS
from tests.support.runs import scripted_agent, start_run

pytestmark = pytest.mark.chaos

RUN_COUNT = 12
TOGGLES = 20


@pytest.mark.usefixtures("worker")
async def test_releasing_held_runs_races_their_claims_without_a_deadlock(gql, workspace, caplog) -> None:
    caplog.set_level(logging.WARNING)
    agent = await scripted_agent(gql, workspace.admin, name="lock-order", steps=[{"final": "done"}],
                                 budget={"maxConcurrentRuns": 3})  # fmt: skip
    # Started in a paused workspace: each claim holds its run.
    await gql.ok(PAUSE, {"reason": "lock order"}, token=workspace.admin)
    runs = [await start_run(gql, workspace.operator, agent) for _ in range(RUN_COUNT)]
    await gql.ok(SET_STATUS, {"id": agent, "status": "PAUSED"}, token=workspace.admin)
    await gql.ok(RESUME, token=workspace.admin)
    for i in range(TOGGLES):
        # gql.ok: any error (a deadlock is an INTERNAL one) fails the test here.
        await gql.ok(SET_STATUS, {"id": agent, "status": "ACTIVE"}, token=workspace.admin)
        await asyncio.sleep(0.01 * (i % 3))
        if i % 2:
            await gql.ok(PAUSE, {"reason": "lock order"}, token=workspace.admin)
            await gql.ok(SET_STATUS, {"id": agent, "status": "PAUSED"}, token=workspace.admin)
            await gql.ok(RESUME, token=workspace.admin)
        else:
            await gql.ok(SET_STATUS, {"id": agent, "status": "PAUSED"}, token=workspace.admin)
    await gql.ok(SET_STATUS, {"id": agent, "status": "ACTIVE"}, token=workspace.admin)
    deadline = time.monotonic() + 40
    while True:
        found = (await gql.ok(RUNS, {"ids": runs}, token=workspace.viewer))["nodes"]
        if all(r["status"] == "SUCCEEDED" for r in found):
            break
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)
    assert all(r["heldReason"] is None for r in found), found
    # A worker's claim that deadlocked fails its job (logged, with the driver's error 1213).
    assert "Deadlock found" not in caplog.text and "1213" not in caplog.text, caplog.text
