"""Budget refusals and exhaustion as live events (docs/concepts/budgets.md): a call refused
over a limit streams ``BUDGET_EXCEEDED`` (with its step and the message the model read), a
repeat ``LOOP_DETECTED``, and a run that runs out ``BUDGET_EXCEEDED`` with ``ended``. Read
with the ``runTree`` subscription over a real uvicorn, a real worker, both databases."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.main import create_app
from app.settings import Settings
from tests.integration.test_budgets import agent, spend, start
from tests.support.servers import serve
from tests.support.ws import GraphQLWS, ws_url


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url


@pytest.mark.usefixtures("worker")
async def test_refusals_loops_and_running_out_stream_as_events(gql, workspace, api) -> None:
    same = {"call": "memory.search", "args": {"query": "again"}}
    steps = [
        {"calls": [same, same, same]},  # the third is over maxCallsPerTurn 2
        {"calls": [same, same]},
        {"calls": [same, same]},  # the sixth identical call: LOOP_DETECTED
        # 120 tokens: maxTokens 100 spent, so the run ends instead of making this call.
        {"call": "memory.search", "args": {"query": "last"}, "usage": spend(80, 40)},
        {"final": "never"},
    ]
    _, agent_id = await agent(gql, workspace.admin, "spender", steps,
                              budget={"maxCallsPerTurn": 2, "maxTokens": 100})  # fmt: skip
    run_id = await start(gql, workspace.operator, agent_id)
    sock = await GraphQLWS.open(ws_url(api), workspace.viewer)
    try:
        await sock.subscribe("1", run_id)
        stream = await sock.events("1", timeout_s=60)
    finally:
        await sock.close()
    assert stream.complete
    budget = [e for e in stream if e["type"] in {"BUDGET_EXCEEDED", "LOOP_DETECTED"}]
    assert [(e["type"], e["payload"].get("refused"), e["payload"].get("ended")) for e in budget] == [
        ("BUDGET_EXCEEDED", True, None),
        ("LOOP_DETECTED", True, None),
        ("BUDGET_EXCEEDED", None, True),
    ], budget
    refused, loop, ended = budget
    assert refused["stepId"] and refused["payload"]["tool"] == "memory.search"
    assert refused["payload"]["message"].startswith("maxCallsPerTurn 2 set by agent 'spender-")
    assert "ENVERIF_MAX_IDENTICAL_CALLS" in loop["payload"]["message"]
    assert ended["run"]["status"] == "FAILED" and ended["runId"] == run_id
    assert ended["payload"]["message"].startswith("maxTokens 100 set by agent 'spender-")
