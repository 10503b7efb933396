"""policyPreview and Schedule.nextFireTimes over GraphQL: the preview is the engine's own
decision (the pure policy code) along a path of agents' current policies, readable by every
role, and refuses what it cannot judge with the field; the next fire times are the server's
cron arithmetic."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.domain.policy import PolicyLink, RiskClass, effective_decision, parse_policy
from app.domain.schedules import next_fire_at

CREATE = "mutation($i: CreateAgentInput!) { createAgent(input: $i) { id name } }"
PREVIEW = """
query($tool: String!, $ids: [ID!]!) {
  policyPreview(tool: $tool, agentIds: $ids) { tool risk decision reason links { agentName decision source } }
}"""
MODEL = {"provider": "scripted", "steps": [{"final": "ok"}]}

ROOT_POLICY = {"rules": [{"tool": "webhook.*", "decision": "REQUIRE_APPROVAL"}]}
CHILD_POLICY = {"default": "ALLOW", "rules": [{"tool": "http.*", "decision": "DENY"}]}


async def agent(gql: Any, token: str, policy: dict[str, Any]) -> dict[str, Any]:
    data = await gql.ok(
        CREATE, {"i": {"name": f"pv-{uuid.uuid4().hex[:8]}", "model": MODEL, "policy": policy}}, token=token
    )
    created: dict[str, Any] = data["createAgent"]
    return created


@pytest.mark.parametrize(
    ("tool", "risk"),
    [
        ("webhook.post", RiskClass.EXTERNAL_WRITE),
        ("http.get", RiskClass.READ),
        ("memory.remember", RiskClass.INTERNAL_WRITE),
        ("memory.forget", RiskClass.DESTRUCTIVE),
    ],
)
async def test_the_preview_is_the_engines_decision_along_the_path(
    gql: Any, workspace: Any, tool: str, risk: RiskClass
) -> None:
    root = await agent(gql, workspace.admin, ROOT_POLICY)
    child = await agent(gql, workspace.admin, CHILD_POLICY)
    data = await gql.ok(PREVIEW, {"tool": tool, "ids": [root["id"], child["id"]]}, token=workspace.viewer)
    chain = [
        PolicyLink(root["name"], parse_policy(ROOT_POLICY)),
        PolicyLink(child["name"], parse_policy(CHILD_POLICY)),
    ]
    expected = effective_decision(chain, tool, risk)
    preview = data["policyPreview"]
    assert (preview["risk"], preview["decision"], preview["reason"]) == (
        risk.value,
        expected.decision.value,
        expected.reason,
    )
    assert [link["agentName"] for link in preview["links"]] == [root["name"], child["name"]]


async def test_a_tightened_policy_shows_at_once(gql: Any, workspace: Any) -> None:
    root = await agent(gql, workspace.admin, ROOT_POLICY)
    await gql.ok(
        "mutation($id: ID!) { updateAgent(id: $id, input: {policy: {default: DENY}}) { id } }",
        {"id": root["id"]},
        token=workspace.admin,
    )
    data = await gql.ok(PREVIEW, {"tool": "http.get", "ids": [root["id"]]}, token=workspace.operator)
    assert data["policyPreview"]["decision"] == "DENY"
    assert data["policyPreview"]["reason"] == f"agent '{root['name']}' default -> DENY"


async def test_what_the_preview_cannot_judge_is_refused_with_the_field(
    gql: Any, workspace: Any, make_workspace: Any
) -> None:
    mine = await agent(gql, workspace.admin, ROOT_POLICY)
    other = await make_workspace()
    theirs = await agent(gql, other.admin, ROOT_POLICY)
    cases = [
        ({"tool": "no.such.tool", "ids": [mine["id"]]}, "VALIDATION_FAILED", "tool"),
        ({"tool": "mcp.nothing.here", "ids": [mine["id"]]}, "VALIDATION_FAILED", "tool"),
        ({"tool": "http.get", "ids": []}, "VALIDATION_FAILED", "agentIds"),
        ({"tool": "http.get", "ids": [theirs["id"]]}, "NOT_FOUND", None),
        ({"tool": "http.get", "ids": ["not-an-id"]}, "NOT_FOUND", "agentIds"),
    ]
    for variables, code, field in cases:
        error = await gql.error(PREVIEW, variables, token=workspace.viewer)
        assert error["extensions"]["code"] == code, (variables, error)
        if field:
            assert error["extensions"].get("field") == field, (variables, error)


async def test_next_fire_times_follow_the_cron_in_its_timezone_and_stop_while_paused(
    gql: Any, workspace: Any
) -> None:
    root = await agent(gql, workspace.admin, ROOT_POLICY)
    fields = "id enabled nextFireAt nextFireTimes(count: 4)"
    data = await gql.ok(
        f'mutation($a: ID!) {{ createSchedule(agentId: $a, input: {{cron: "30 9 * * 1-5", timezone: "Europe/Berlin"}}) {{ {fields} }} }}',
        {"a": root["id"]},
        token=workspace.operator,
    )
    schedule = data["createSchedule"]
    times = [datetime.fromisoformat(t) for t in schedule["nextFireTimes"]]
    assert len(times) == 4 and times[0] == datetime.fromisoformat(schedule["nextFireAt"])
    for before, after in itertools.pairwise(times):
        assert after == next_fire_at("30 9 * * 1-5", "Europe/Berlin", after=before)
    assert all(t.astimezone(UTC).minute == 30 for t in times)
    paused = await gql.ok(
        f"mutation($id: ID!) {{ updateSchedule(id: $id, input: {{enabled: false}}) {{ {fields} }} }}",
        {"id": schedule["id"]},
        token=workspace.operator,
    )
    assert paused["updateSchedule"]["nextFireTimes"] == []
    await gql.ok(
        "mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": schedule["id"]}, token=workspace.operator
    )
