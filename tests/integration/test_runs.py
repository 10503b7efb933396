"""The run loop through GraphQL with a real arq worker, on the leg's database."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select

from app.db.orm import RunEvent
from tests.support.runs import (
    CANCEL_RUN,
    DECIDE,
    PENDING_APPROVALS,
    get_run,
    scripted_agent,
    start_run,
    wait_run,
)
from tests.support.servers import sink_server

pytestmark = pytest.mark.usefixtures("worker")

ALLOW_WEBHOOK = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


async def test_three_call_scripted_run_succeeds_with_its_steps(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "http.get", "args": {"url": url + "/page?n={{ input.n }}"}},
                {"call": "http.get", "args": {"url": url + "/page?n=2"}},
                {
                    "call": "webhook.post",
                    "args": {"url": url + "/hook", "payload": {"got": "{{ results[0].body }}"}},
                },
                {"final": {"first": "{{ results[0].body }}", "second": "{{ results[1].body }}"}},
            ],
            policy=ALLOW_WEBHOOK,
        )
        run_id = await start_run(gql, workspace.operator, agent, {"n": 1})
        run = await wait_run(gql, workspace.viewer, run_id)

    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == {"first": "page 1", "second": "page 2"}
    tools = [s["tool"] for s in run["steps"]]
    assert tools == ["http.get", "http.get", "webhook.post", None]
    assert [s["seq"] for s in run["steps"]] == [1, 2, 3, 4]
    assert all(s["status"] == "SUCCEEDED" for s in run["steps"])
    assert run["steps"][0]["decision"] == "ALLOW"
    assert "webhook.post" in run["steps"][2]["decisionReason"]
    assert run["steps"][0]["result"]["status"] == 200
    assert sink.pages == 2
    [delivery] = sink.deliveries
    assert delivery.payload == {"got": "page 1"}
    # The idempotency key is the step's id: opaque to clients, but the same step every time.
    assert delivery.key is not None and sink.completions(delivery.key) == 1


async def test_run_events_are_gap_free_and_ordered(gql, workspace, sessionmaker) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "done"}])
    run_id = await start_run(gql, workspace.operator, agent)
    await wait_run(gql, workspace.viewer, run_id)
    async with sessionmaker() as session:
        events = list(await session.scalars(select(RunEvent).where(RunEvent.workspace_id == workspace.id)))
    by_root: dict[int, list[int]] = {}
    for e in events:
        by_root.setdefault(e.root_run_id, []).append(e.seq)
    for seqs in by_root.values():
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
    types = [e.type for e in sorted(events, key=lambda e: e.seq)]
    assert types[0] == "RUN_CREATED" and types[-1] == "RUN_STATUS_CHANGED"


async def _approval_run(gql: Any, workspace: Any, url: str) -> tuple[str, dict[str, Any]]:
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[
            {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}},
            {"final": "{{ results[-1] }}"},
        ],
    )
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    return run_id, run


async def test_approve_runs_the_tool_when_the_run_resumes(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        run_id, run = await _approval_run(gql, workspace, url)
        [step] = run["steps"]
        assert step["status"] == "WAITING_APPROVAL" and step["decision"] == "REQUIRE_APPROVAL"
        assert "risk" in step["decisionReason"].lower() or "EXTERNAL_WRITE" in step["decisionReason"]
        [pending] = run["pendingApprovals"]
        assert pending["tool"] == "webhook.post"
        listed = await gql.ok(PENDING_APPROVALS, token=workspace.viewer)
        assert pending["id"] in [e["node"]["id"] for e in listed["approvals"]["edges"]]
        assert sink.deliveries == []  # nothing is sent before an operator says so

        decided = await gql.ok(
            DECIDE, {"id": pending["id"], "approve": True, "reason": "ok"}, token=workspace.operator
        )
        assert decided["decideApproval"]["status"] == "APPROVED"
        run = await wait_run(gql, workspace.viewer, run_id)

    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["status"] == 200
    assert run["steps"][0]["status"] == "SUCCEEDED"
    assert len(sink.deliveries) == 1
    again = await gql.error(DECIDE, {"id": pending["id"], "approve": False}, token=workspace.operator)
    assert again["extensions"]["code"] == "INVALID_TRANSITION"


async def test_reject_shows_the_rejection_to_the_model(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        run_id, run = await _approval_run(gql, workspace, url)
        approval_id = run["pendingApprovals"][0]["id"]
        await gql.ok(
            DECIDE, {"id": approval_id, "approve": False, "reason": "not today"}, token=workspace.operator
        )
        run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED"
    assert run["steps"][0]["status"] == "REJECTED"
    assert run["result"] == {"error": {"code": "REJECTED", "message": "not today"}}
    assert sink.deliveries == []


async def test_viewer_cannot_decide(gql, workspace) -> None:
    async with sink_server() as (_sink, url):
        _run_id, run = await _approval_run(gql, workspace, url)
        err = await gql.error(
            DECIDE, {"id": run["pendingApprovals"][0]["id"], "approve": True}, token=workspace.viewer
        )
    assert err["extensions"]["code"] == "FORBIDDEN"


async def test_deny_is_recorded_and_the_model_sees_it(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[{"call": "http.get", "args": {"url": url + "/page"}}, {"final": "{{ results[-1] }}"}],
            policy={"rules": [{"tool": "http.*", "decision": "DENY"}]},
        )
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "SUCCEEDED"
    step = run["steps"][0]
    assert step["status"] == "DENIED" and step["decision"] == "DENY"
    assert "http.*" in step["decisionReason"]
    assert run["result"]["error"]["code"] == "DENIED"
    assert sink.pages == 0


@pytest.mark.parametrize("pattern", ["Webhook.post", " webhook.post", "webhook.POST"])
async def test_a_deny_rule_spelt_differently_still_denies(gql, workspace, pattern: str) -> None:
    """Under a default of ALLOW these rules once matched nothing and the post went out."""
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}},
                {"final": "done"},
            ],
            policy={"default": "ALLOW", "rules": [{"tool": pattern, "decision": "DENY"}]},
        )
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["steps"][0]["status"] == "DENIED", run["steps"]
    assert sink.deliveries == []


async def test_cancel_a_waiting_run_closes_its_approvals(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        run_id, run = await _approval_run(gql, workspace, url)
        approval_id = run["pendingApprovals"][0]["id"]
        data = await gql.ok(CANCEL_RUN, {"id": run_id, "reason": "changed my mind"}, token=workspace.operator)
        assert data["cancelRun"]["status"] == "CANCELLED"
        err = await gql.error(DECIDE, {"id": approval_id, "approve": True}, token=workspace.operator)
        assert err["extensions"]["code"] == "INVALID_TRANSITION"
        run = await get_run(gql, workspace.viewer, run_id)
        again = await gql.error(CANCEL_RUN, {"id": run_id}, token=workspace.operator)
    assert run["status"] == "CANCELLED" and run["pendingApprovals"] == []
    assert run["steps"][0]["status"] == "CANCELLED"
    assert again["extensions"]["code"] == "INVALID_TRANSITION"
    assert sink.deliveries == []


async def test_cancel_a_running_run_stops_it_and_the_worker_writes_nothing_more(
    gql, workspace, sessionmaker
) -> None:
    async with sink_server(delay_s=1.5) as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}},
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 2}}},
            ],
            policy=ALLOW_WEBHOOK,
        )
        run_id = await start_run(gql, workspace.operator, agent)
        run = await wait_run(gql, workspace.viewer, run_id, "RUNNING")
        while not run["steps"] or sink.in_flight() == 0:
            await asyncio.sleep(0.02)
            run = await get_run(gql, workspace.viewer, run_id)
        await gql.ok(CANCEL_RUN, {"id": run_id}, token=workspace.operator)
        async with sessionmaker() as session:
            seq_at_cancel = await _last_seq(session, workspace.id)
        await asyncio.sleep(2.5)  # the in-flight call returns meanwhile; its result must be dropped
        run = await get_run(gql, workspace.viewer, run_id)
        async with sessionmaker() as session:
            seq_after = await _last_seq(session, workspace.id)
    assert run["status"] == "CANCELLED"
    assert [s["status"] for s in run["steps"]] == ["CANCELLED"]
    assert seq_after == seq_at_cancel
    assert [d.payload for d in sink.deliveries] == [{"n": 1}]  # the second call never went out


async def test_consecutive_reads_are_recorded_as_ordinary_steps(gql, workspace, sessionmaker) -> None:
    """Allowed READ calls may run before their rows exist (batched); what is recorded is
    the same: one step per call, in order, each with its decision, events gap-free."""
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"calls": [{"call": "http.get", "args": {"url": url + "/page?n=1"}},
                           {"call": "http.get", "args": {"url": url + "/page?n=2"}}]},
                {"call": "http.get", "args": {"url": url + "/page?n={{ results|length + 1 }}"}},
                {"final": "{{ results | map(attribute='body') | join(',') }}"},
            ],
        )  # fmt: skip
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "SUCCEEDED" and run["result"] == "page 1,page 2,page 3"
    assert [(s["seq"], s["tool"], s["status"], s["decision"]) for s in run["steps"]] == [
        (1, "http.get", "SUCCEEDED", "ALLOW"),
        (2, "http.get", "SUCCEEDED", "ALLOW"),
        (3, "http.get", "SUCCEEDED", "ALLOW"),
        (4, None, "SUCCEEDED", None),
    ]
    assert sink.pages == 3
    async with sessionmaker() as session:
        events = list(
            await session.scalars(
                select(RunEvent).where(RunEvent.workspace_id == workspace.id).order_by(RunEvent.seq)
            )
        )
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("STEP_STARTED") == 3


async def _last_seq(session: Any, workspace_id: int) -> int:
    from sqlalchemy import func

    return int(await session.scalar(select(func.count()).where(RunEvent.workspace_id == workspace_id)) or 0)


async def test_a_failing_tool_fails_the_step_and_the_run_goes_on(gql, workspace) -> None:
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[
            {"call": "http.get", "args": {"url": "http://127.0.0.1:9/nothing-listens-here"}},
            {"final": "{{ results[-1] }}"},
        ],
    )
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "SUCCEEDED"
    assert run["steps"][0]["status"] == "FAILED"
    assert run["steps"][0]["error"]
    assert run["result"]["error"]["code"] == "HTTP_ERROR"


async def test_an_unknown_tool_is_a_failed_step(gql, workspace) -> None:
    agent = await scripted_agent(
        gql, workspace.admin, steps=[{"call": "no.such.tool", "args": {}}, {"final": "{{ results[-1] }}"}]
    )
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["steps"][0]["status"] == "FAILED"
    assert run["result"]["error"]["code"] == "UNKNOWN_TOOL"


async def test_a_failing_provider_fails_the_run(gql, workspace, model_server, monkeypatch) -> None:
    # A variable the deployment binds to its model server (tests/conftest.py), at a path
    # where nothing answers but a 404; PATH, or another server, would be refused.
    monkeypatch.setenv("TEST_OPENAI_KEY_FOR_ENVERIF", "sk-test")
    agent = await scripted_agent(
        gql,
        workspace.admin,
        model={
            "provider": "openai",
            "model": "m",
            "base_url": model_server.bound_url + "/down",
            "api_key_env": "TEST_OPENAI_KEY_FOR_ENVERIF",
        },
    )
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent), timeout_s=60)
    assert run["status"] == "FAILED"
    assert "model provider failed: openai: HTTP 404 Not Found" in run["error"], run


async def test_a_template_error_fails_the_run_with_a_clear_error(gql, workspace) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ results[5].nope }}"}])
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "FAILED"
    assert run["error"]


async def test_paused_agent_cannot_start(gql, workspace) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": 1}])
    await gql.ok(
        "mutation($id: ID!) { updateAgent(id: $id, input: {status: PAUSED}) { id } }",
        {"id": agent},
        token=workspace.admin,
    )
    err = await gql.error(
        "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": agent}, token=workspace.operator
    )
    assert err["extensions"]["code"] == "CONFLICT"


async def test_another_workspace_cannot_touch_runs(gql, workspace, make_workspace) -> None:
    other = await make_workspace()
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": 1}])
    err = await gql.error(
        "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": agent}, token=other.operator
    )
    assert err["extensions"]["code"] == "NOT_FOUND"
    run_id = await start_run(gql, workspace.operator, agent)
    err = await gql.error(CANCEL_RUN, {"id": run_id}, token=other.operator)
    assert err["extensions"]["code"] == "NOT_FOUND"
    data = await gql.raw("query($id: ID!) { run(id: $id) { id status } }", {"id": run_id}, token=other.viewer)
    assert data.get("data") in (None, {"run": None}) and "status" not in str(data.get("data"))


async def test_bad_run_input_is_refused_and_nothing_is_written(gql, workspace, sessionmaker) -> None:
    from sqlalchemy import func

    from app.db.orm import Run

    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": 1}])
    huge = {"blob": "x" * 300_000}
    err = await gql.error(
        "mutation($a: ID!, $i: JSON) { startRun(agentId: $a, input: $i) { id } }",
        {"a": agent, "i": huge},
        token=workspace.operator,
    )
    assert err["extensions"]["code"] == "VALIDATION_FAILED" and err["extensions"]["field"] == "input"
    err = await gql.error(
        "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": agent}, token=workspace.viewer
    )
    assert err["extensions"]["code"] == "FORBIDDEN"
    async with sessionmaker() as session:
        count = await session.scalar(
            select(func.count()).select_from(Run).where(Run.workspace_id == workspace.id)
        )
    assert count == 0
    run_id = await start_run(gql, workspace.operator, agent)
    err = await gql.error(CANCEL_RUN, {"id": run_id, "reason": "r" * 3000}, token=workspace.operator)
    assert err["extensions"]["code"] == "VALIDATION_FAILED" and err["extensions"]["field"] == "reason"


async def test_steps_record_their_turns(gql, workspace) -> None:
    async with sink_server() as (_sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"calls": [{"call": "http.get", "args": {"url": url + "/page"}}] * 2},
                {"call": "http.get", "args": {"url": url + "/page"}},
                {"final": "ok"},
            ],
        )
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, run_id)
    data = await gql.ok(
        "query($id: ID!) { run(id: $id) { steps { seq turn tool } } }", {"id": run_id}, token=workspace.viewer
    )
    assert [(s["seq"], s["turn"], s["tool"]) for s in data["run"]["steps"]] == [
        (1, 0, "http.get"),
        (2, 0, "http.get"),
        (3, 1, "http.get"),
        (4, 2, None),
    ]
