"""The live kill switch (docs/concepts/holds.md): pausing an agent or a workspace holds its
runs where they stand, resuming lets them go on with nothing sent twice; cancelRuns cancels
in bulk; a cancel reaches a worker mid-call at once. GraphQL, a real worker, both databases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import stop_worker
from tests.support.runs import CANCEL_RUN, DECIDE, get_run, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

ALLOW = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}
SET_STATUS = """
mutation($id: ID!, $status: AgentStatus!) { updateAgent(id: $id, input: {status: $status}) { id status } }
"""
HELD = "query($id: ID!) { run(id: $id) { id status heldReason steps { seq status } } }"
PAUSE = "mutation($reason: String!) { pauseWorkspace(reason: $reason) { pausedAt pausedReason } }"
RESUME = "mutation { resumeWorkspace { pausedAt pausedReason } }"
CANCEL_RUNS = """
mutation($filter: RunFilterInput!, $all: Boolean, $reason: String) {
  cancelRuns(filter: $filter, all: $all, reason: $reason) { id status cancelledBy { kind name } }
}
"""


@pytest.fixture
async def long_lease_worker(settings) -> AsyncIterator[Any]:
    """A worker whose lease renewals come only every 10 s: whatever reaches a run sooner
    came through a stop notice."""
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"lease_s": 30.0}), handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)


def _calls(url: str, n: int) -> list[dict[str, Any]]:
    return [*({"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": i}}} for i in range(n)),
            {"final": "done"}]  # fmt: skip


async def _held(gql: Any, token: str, run_id: str, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = (await gql.ok(HELD, {"id": run_id}, token=token))["run"]
        if run["status"] == "QUEUED" and run["heldReason"]:
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


async def _step_running(gql: Any, token: str, run_id: str, seq: int = 1) -> None:
    deadline = time.monotonic() + 15
    while True:
        run = await get_run(gql, token, run_id)
        if any(s["seq"] == seq and s["status"] == "RUNNING" for s in run["steps"]):
            return
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.02)


def _each_key_once(sink: Any, n: int) -> None:
    keys = [d.key for d in sink.deliveries]
    assert len(keys) == n and len(set(keys)) == n, keys


@pytest.mark.usefixtures("long_lease_worker")
async def test_pausing_an_agent_mid_call_and_between_steps_holds_both_runs(gql, workspace) -> None:
    async with sink_server(delay_s=2.0) as (sink, url):
        # A run that waits for its approval: between steps when the pause comes.
        waiting_agent = await scripted_agent(gql, workspace.admin, steps=_calls(url, 1))
        between = await start_run(gql, workspace.operator, waiting_agent)
        pending = (await wait_run(gql, workspace.viewer, between, "WAITING_APPROVAL"))["pendingApprovals"]
        # And one in the middle of its first call (of two) when the pause comes.
        agent = await scripted_agent(gql, workspace.admin, steps=_calls(url, 2), policy=ALLOW)
        mid_call = await start_run(gql, workspace.operator, agent)
        await _step_running(gql, workspace.viewer, mid_call)
        for a in (agent, waiting_agent):
            await gql.ok(SET_STATUS, {"id": a, "status": "PAUSED"}, token=workspace.admin)
        await gql.ok(DECIDE, {"id": pending[0]["id"], "approve": True}, token=workspace.operator)
        held_mid = await _held(gql, workspace.viewer, mid_call)
        held_between = await _held(gql, workspace.viewer, between)
        await asyncio.sleep(1.5)  # time enough to start another step, were it allowed
        assert "PAUSED" in held_mid["heldReason"] and "PAUSED" in held_between["heldReason"]
        # The call in flight finished and was recorded; the next one never started.
        assert [
            s["status"]
            for s in (await gql.ok(HELD, {"id": mid_call}, token=workspace.viewer))["run"]["steps"]
        ] == ["SUCCEEDED"]
        assert len(sink.deliveries) == 1
        for a in (agent, waiting_agent):
            await gql.ok(SET_STATUS, {"id": a, "status": "ACTIVE"}, token=workspace.admin)
        done = [await wait_run(gql, workspace.viewer, r, timeout_s=20) for r in (mid_call, between)]
    assert [r["status"] for r in done] == ["SUCCEEDED", "SUCCEEDED"], done
    _each_key_once(sink, 3)
    assert (await gql.ok(HELD, {"id": mid_call}, token=workspace.viewer))["run"]["heldReason"] is None


@pytest.mark.usefixtures("worker")
async def test_a_paused_workspace_holds_every_agent_and_resume_lets_them_go(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        agents = [
            await scripted_agent(gql, workspace.admin, steps=_calls(url, 1), policy=ALLOW) for _ in range(2)
        ]
        paused = (await gql.ok(PAUSE, {"reason": "incident 42"}, token=workspace.admin))["pauseWorkspace"]
        assert paused["pausedReason"] == "incident 42" and paused["pausedAt"]
        again = await gql.error(PAUSE, {"reason": "x"}, token=workspace.admin)
        assert again["extensions"]["code"] == "INVALID_TRANSITION"
        runs = [await start_run(gql, workspace.operator, a) for a in agents]
        held = [await _held(gql, workspace.viewer, r) for r in runs]
        assert all(h["heldReason"] == "workspace paused: incident 42" for h in held)
        await asyncio.sleep(1.0)  # the sweeper's turn comes and goes: held runs get no job
        assert sink.deliveries == []
        resumed = (await gql.ok(RESUME, token=workspace.admin))["resumeWorkspace"]
        assert resumed["pausedAt"] is None
        done = [await wait_run(gql, workspace.viewer, r) for r in runs]
    assert all(r["status"] == "SUCCEEDED" for r in done), done
    _each_key_once(sink, 2)
    not_paused = await gql.error(RESUME, token=workspace.admin)
    assert not_paused["extensions"]["code"] == "INVALID_TRANSITION"


async def test_pause_input_and_roles_are_checked(gql, workspace) -> None:
    too_long = await gql.error(PAUSE, {"reason": "x" * 2_001}, token=workspace.admin)
    assert too_long["extensions"] == {"code": "VALIDATION_FAILED", "field": "reason"}
    empty = await gql.error(PAUSE, {"reason": "  "}, token=workspace.admin)
    assert empty["extensions"] == {"code": "VALIDATION_FAILED", "field": "reason"}
    operator = await gql.error(PAUSE, {"reason": "x"}, token=workspace.operator)
    assert operator["extensions"]["code"] == "FORBIDDEN"


async def test_cancel_runs_needs_a_filter_or_all(gql, workspace, make_workspace) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    other = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    elsewhere = await make_workspace()
    theirs = await start_run(
        gql, elsewhere.operator, await scripted_agent(gql, elsewhere.admin, steps=[{"final": "x"}])
    )
    mine = [await start_run(gql, workspace.operator, agent) for _ in range(2)]
    kept = await start_run(gql, workspace.operator, other)
    refused = await gql.error(CANCEL_RUNS, {"filter": {}}, token=workspace.operator)
    assert refused["extensions"] == {"code": "VALIDATION_FAILED", "field": "filter"}
    viewer = await gql.error(CANCEL_RUNS, {"filter": {"agentId": agent}}, token=workspace.viewer)
    assert viewer["extensions"]["code"] == "FORBIDDEN"
    bad = await gql.error(CANCEL_RUNS, {"filter": {"status": ["SUCCEEDED"]}}, token=workspace.operator)
    assert bad["extensions"] == {"code": "VALIDATION_FAILED", "field": "filter.status"}
    cancelled = (await gql.ok(CANCEL_RUNS, {"filter": {"agentId": agent, "rootsOnly": True}, "reason": "stop"},
                              token=workspace.operator))["cancelRuns"]  # fmt: skip
    assert sorted(r["id"] for r in cancelled) == sorted(mine)
    assert all(r["status"] == "CANCELLED" and r["cancelledBy"]["kind"] == "TOKEN" for r in cancelled)
    assert (await get_run(gql, workspace.viewer, kept))["status"] == "QUEUED"
    everything = (await gql.ok(CANCEL_RUNS, {"filter": {}, "all": True}, token=workspace.operator))[
        "cancelRuns"
    ]
    assert [r["id"] for r in everything] == [kept]
    assert (await get_run(gql, elsewhere.viewer, theirs))["status"] == "QUEUED"


async def test_a_cancel_reaches_a_call_in_flight_at_once_and_says_it_may_have_been_sent(
    gql, workspace, long_lease_worker
) -> None:
    async with sink_server(delay_s=5.0) as (sink, url):
        agent = await scripted_agent(gql, workspace.admin, steps=_calls(url, 2), policy=ALLOW)
        run_id = await start_run(gql, workspace.operator, agent)
        await _step_running(gql, workspace.viewer, run_id)
        await gql.ok(CANCEL_RUN, {"id": run_id, "reason": "now"}, token=workspace.operator)
        cancelled_at = time.monotonic()
        # The worker cuts the call off long before its next renewal (10 s) would have told it.
        while any(not t.done() for t in long_lease_worker.tasks.values()):
            assert time.monotonic() - cancelled_at < 3.0, "the worker is still executing the cancelled run"
            await asyncio.sleep(0.02)
        run = await get_run(gql, workspace.viewer, run_id)
        await asyncio.sleep(0.5)
    assert run["status"] == "CANCELLED"
    [step, *rest] = run["steps"]
    assert step["status"] == "CANCELLED" and step["result"]["sent"] == "unknown", step
    assert step["result"]["error"]["code"] == "RUN_ENDED"
    assert all(s["status"] == "CANCELLED" and s["result"]["sent"] is False for s in rest), rest
    assert len(sink.deliveries) == 1  # the second call was never started
