"""Approvals decided the way people decide (docs/concepts/approvals.md): every decision kind
through GraphQL with a real worker, scope RUN, deadlines and the audit trail."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import select

from app.db.orm import AuditEvent
from tests.conftest import stop_worker
from tests.support.graphql import pk
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

DECIDE = """
mutation($id: ID!, $decision: ApprovalDecision, $approve: Boolean, $reason: String, $arguments: JSON,
         $response: JSON, $scope: ApprovalScope) {
  decideApproval(id: $id, decision: $decision, approve: $approve, reason: $reason, arguments: $arguments,
                 response: $response, scope: $scope) {
    id status decision scope reason response decidedBy { kind id }
  }
}
"""
RUN = """
query($id: ID!) {
  run(id: $id) {
    id status result
    steps { tool status arguments originalArguments editedBy { kind id } result errorCode
            approval { id status decision scope reason expiresAt decidedBy { kind id } } }
    pendingApprovals { id tool arguments expiresAt }
  }
}
"""
UPDATE_POLICY = """
mutation($id: ID!, $policy: PolicyInput) { updateAgent(id: $id, input: {policy: $policy}) { id } }
"""
DEEP: Any = "bottom"
for _ in range(40):  # deeper than ENVERIF_MAX_JSON_DEPTH: not storable as the step's result
    DEEP = {"d": DEEP}
MEMORIES = "query($id: ID!) { agent(id: $id) { memories(first: 10) { edges { node { key value } } } } }"


async def _run(gql: Any, token: str, run_id: str) -> dict[str, Any]:
    return (await gql.ok(RUN, {"id": run_id}, token=token))["run"]  # type: ignore[no-any-return]


async def _waiting(gql: Any, workspace: Any, run_id: str, count: int = 1) -> dict[str, Any]:
    """The run once it waits with ``count`` pending approvals."""
    deadline = time.monotonic() + 20
    while True:
        run = await _run(gql, workspace.viewer, run_id)
        if run["status"] == "WAITING_APPROVAL" and len(run["pendingApprovals"]) == count:
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


def _hook(url: str, n: int) -> dict[str, Any]:
    return {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": n}}}


async def _hook_run(gql: Any, workspace: Any, url: str, *, calls: int = 1, **agent: Any) -> tuple[str, str]:
    steps = [_hook(url, n) for n in range(1, calls + 1)] + [{"final": "{{ results }}"}]
    agent_id = await scripted_agent(gql, workspace.admin, steps=steps, **agent)
    return agent_id, await start_run(gql, workspace.operator, agent_id)


async def _audited(sessionmaker: Any, workspace: Any, approval_id: str) -> list[AuditEvent]:
    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(AuditEvent)
                .where(AuditEvent.workspace_id == workspace.id, AuditEvent.object_type == "Approval",
                       AuditEvent.object_id == pk(approval_id))
                .order_by(AuditEvent.seq)
            )
        )  # fmt: skip


async def test_edit_runs_the_tool_with_the_edited_arguments_and_the_step_keeps_both(
    gql, workspace, worker, sessionmaker
) -> None:
    async with sink_server() as (sink, url):
        _, run_id = await _hook_run(gql, workspace, url)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        # Checked against the tool's schema first: nothing is decided.
        bad = await gql.error(
            DECIDE,
            {"id": pending["id"], "decision": "EDIT", "arguments": {"payload": 1}},
            token=workspace.operator,
        )
        assert bad["extensions"] == {"code": "VALIDATION_FAILED", "field": "arguments"}, bad
        assert "url" in bad["message"]
        edited = {"url": url + "/hook", "payload": {"n": 99}}
        decided = (
            await gql.ok(
                DECIDE, {"id": pending["id"], "decision": "EDIT", "arguments": edited, "reason": "fix n"},
                token=workspace.operator,
            )
        )["decideApproval"]  # fmt: skip
        assert (decided["status"], decided["decision"], decided["scope"]) == ("APPROVED", "EDIT", "CALL")
        run = await wait_run(gql, workspace.viewer, run_id)
        assert [d.payload for d in sink.deliveries] == [{"n": 99}]
    run = await _run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED", run
    step = run["steps"][0]
    assert step["arguments"] == edited
    assert step["originalArguments"] == {"url": url + "/hook", "payload": {"n": 1}}
    assert step["editedBy"]["kind"] == "TOKEN" and step["editedBy"] == decided["decidedBy"]
    [event] = await _audited(sessionmaker, workspace, pending["id"])
    assert event.action == "approval.decide" and event.actor_kind == "TOKEN"
    assert event.diff["decision"]["after"] == "EDIT"
    assert event.diff["arguments"] == {"before": step["originalArguments"], "after": edited}


async def test_an_edit_the_policy_now_denies_is_refused_and_a_rejection_reason_reaches_the_model(
    gql, workspace, worker, sessionmaker
) -> None:
    async with sink_server() as (sink, url):
        agent_id, run_id = await _hook_run(gql, workspace, url)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        # Tightened since the call was asked: the edit is decided again on the live chain.
        await gql.ok(UPDATE_POLICY, {"id": agent_id, "policy": {"rules": [{"tool": "webhook.post", "decision": "DENY"}]}},
                     token=workspace.admin)  # fmt: skip
        refused = await gql.error(
            DECIDE, {"id": pending["id"], "decision": "EDIT", "arguments": {"url": url + "/x", "payload": {}}},
            token=workspace.operator,
        )  # fmt: skip
        assert refused["extensions"] == {"code": "VALIDATION_FAILED", "field": "arguments"}
        assert "DENY" in refused["message"]
        assert (await _run(gql, workspace.viewer, run_id))["pendingApprovals"][0]["id"] == pending["id"]
        await gql.ok(DECIDE, {"id": pending["id"], "decision": "REJECT", "reason": "not on a Friday"},
                     token=workspace.operator)  # fmt: skip
        run = await wait_run(gql, workspace.viewer, run_id)
        assert sink.deliveries == []
    assert run["status"] == "SUCCEEDED", run
    # The scripted model's final answer is what it saw: the rejection, with the reason.
    [seen] = run["result"]
    assert seen["error"]["code"] == "REJECTED" and "not on a Friday" in seen["error"]["message"], seen
    assert run["steps"][0]["status"] == "REJECTED"
    assert [e.diff["decision"]["after"] for e in await _audited(sessionmaker, workspace, pending["id"])] == [
        "REJECT"
    ]


async def test_an_edit_of_memory_remember_passes_the_credential_guard(gql, workspace, worker) -> None:
    agent_id = await scripted_agent(
        gql, workspace.admin, tools=["memory.*"],
        policy={"rules": [{"tool": "memory.remember", "decision": "REQUIRE_APPROVAL"}]},
        steps=[{"call": "memory.remember", "args": {"key": "deploy", "value": "at noon"}}, {"final": "ok"}],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, agent_id)
    [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
    secret = "token ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    refused = await gql.error(
        DECIDE, {"id": pending["id"], "decision": "EDIT", "arguments": {"key": "deploy", "value": secret}},
        token=workspace.operator,
    )  # fmt: skip
    assert refused["extensions"] == {"code": "CREDENTIAL_REJECTED", "field": "arguments"}
    assert "ghp_" not in refused["message"]
    run = await _run(gql, workspace.viewer, run_id)
    assert "ghp_" not in str(run)  # the secret was stored nowhere
    await gql.ok(DECIDE, {"id": pending["id"], "decision": "EDIT", "arguments": {"key": "deploy", "value": "at one"}},
                 token=workspace.operator)  # fmt: skip
    assert (await wait_run(gql, workspace.viewer, run_id))["status"] == "SUCCEEDED"
    memories = (await gql.ok(MEMORIES, {"id": agent_id}, token=workspace.viewer))["agent"]["memories"][
        "edges"
    ]
    assert [(m["node"]["key"], m["node"]["value"]) for m in memories] == [("deploy", "at one")]


async def test_respond_gives_the_model_the_response_without_running_the_tool(gql, workspace, worker) -> None:
    async with sink_server() as (sink, url):
        _, run_id = await _hook_run(gql, workspace, url)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        decided = (
            await gql.ok(
                DECIDE,
                {"id": pending["id"], "decision": "RESPOND", "response": {"status": 204}},
                token=workspace.operator,
            )
        )["decideApproval"]
        assert (decided["status"], decided["decision"], decided["response"]) == (
            "RESPONDED",
            "RESPOND",
            {"status": 204},
        )
        run = await wait_run(gql, workspace.viewer, run_id)
        assert sink.deliveries == []
    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == [{"response": {"status": 204}}]
    assert run["steps"][0]["status"] == "SUCCEEDED"


async def test_scope_run_approves_the_tools_later_calls_in_that_run_only(
    gql, workspace, worker, sessionmaker
) -> None:
    async with sink_server() as (sink, url):
        agent_id, run_id = await _hook_run(gql, workspace, url, calls=3)
        other_run = await start_run(gql, workspace.operator, agent_id)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        decided = (
            await gql.ok(
                DECIDE, {"id": pending["id"], "decision": "APPROVE", "scope": "RUN"}, token=workspace.operator
            )
        )["decideApproval"]
        await wait_run(gql, workspace.viewer, run_id)
        run = await _run(gql, workspace.viewer, run_id)
        assert run["status"] == "SUCCEEDED", run
        approvals = [s["approval"] for s in run["steps"] if s["tool"]]
        assert [(a["status"], a["decision"], a["scope"]) for a in approvals] == [
            ("APPROVED", "APPROVE", "RUN")
        ] * 3
        assert all(a["decidedBy"] == decided["decidedBy"] for a in approvals)
        assert [d.payload for d in sink.deliveries] == [{"n": 1}, {"n": 2}, {"n": 3}]
        # Another run of the same agent is not approved by it.
        other = await _waiting(gql, workspace, other_run)
        assert other["steps"][0]["status"] == "WAITING_APPROVAL"
    for approval in approvals[1:]:
        [event] = await _audited(sessionmaker, workspace, approval["id"])
        assert (event.actor_kind, event.actor_id) == ("TOKEN", pk(decided["decidedBy"]["id"]))
        assert event.diff["scope"]["after"] == "RUN"


@pytest.mark.parametrize(
    ("variables", "code", "field"),
    [
        ({}, "VALIDATION_FAILED", "decision"),
        ({"approve": True, "decision": "APPROVE"}, "VALIDATION_FAILED", "decision"),
        ({"decision": "RESPOND"}, "VALIDATION_FAILED", "response"),
        ({"decision": "EDIT"}, "VALIDATION_FAILED", "arguments"),
        ({"decision": "REJECT", "scope": "RUN"}, "VALIDATION_FAILED", "scope"),
        ({"decision": "APPROVE", "arguments": {"a": 1}}, "VALIDATION_FAILED", "arguments"),
        ({"decision": "RESPOND", "response": DEEP}, "VALIDATION_FAILED", "response"),
    ],
)
async def test_bad_decisions_are_refused_with_their_code(
    gql, workspace, worker, variables, code, field
) -> None:
    async with sink_server() as (_, url):
        _, run_id = await _hook_run(gql, workspace, url)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        error = await gql.error(DECIDE, {"id": pending["id"], **variables}, token=workspace.operator)
        assert error["extensions"] == {"code": code, "field": field}, error
        viewer = await gql.error(DECIDE, {"id": pending["id"], "decision": "APPROVE"}, token=workspace.viewer)
        assert viewer["extensions"]["code"] == "FORBIDDEN"
        assert len((await _run(gql, workspace.viewer, run_id))["pendingApprovals"]) == 1


async def test_a_rules_timeout_expires_the_approval_within_a_sweep_and_rejects_the_call(
    gql, workspace, worker, settings, sessionmaker
) -> None:
    policy = {"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL", "timeoutS": 1}]}
    async with sink_server() as (sink, url):
        _, run_id = await _hook_run(gql, workspace, url, policy=policy)
        [pending] = (await _waiting(gql, workspace, run_id))["pendingApprovals"]
        assert pending["expiresAt"] is not None
        await wait_run(gql, workspace.viewer, run_id)
        assert sink.deliveries == []
    run = await _run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED", run
    [seen] = run["result"]
    assert seen["error"]["code"] == "REJECTED" and "approval expired" in seen["error"]["message"]
    approval = run["steps"][0]["approval"]
    assert approval["status"] == "EXPIRED" and approval["decidedBy"] == {"kind": "SYSTEM", "id": None}
    [event] = await _audited(sessionmaker, workspace, pending["id"])
    assert event.actor_kind == "SYSTEM" and event.diff["status"]["after"] == "EXPIRED"
    # Within one sweep interval of the deadline (plus the time to write it).
    decided = event.at.replace(tzinfo=None) - _parse(pending["expiresAt"]).replace(tzinfo=None)
    assert decided.total_seconds() <= settings.sweep_interval_s + 1.0, decided


async def test_the_deployments_default_timeout_applies_when_no_rule_sets_one(
    gql, workspace, settings
) -> None:
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"approval_timeout_s": 1}), handle_signals=False)
    task = asyncio.create_task(w.main())
    try:
        async with sink_server() as (sink, url):
            _, run_id = await _hook_run(gql, workspace, url)
            run = await wait_run(gql, workspace.viewer, run_id)
            assert sink.deliveries == []
    finally:
        await stop_worker(w, task)
    assert run["steps"][0]["approval"]["status"] == "EXPIRED"
    assert "within 1 s" in run["result"][0]["error"]["message"]


def _parse(value: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(value)
