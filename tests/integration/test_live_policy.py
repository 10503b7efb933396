"""Tightening is live, loosening is not (docs/concepts/policy.md): a policy set to DENY while
a tree waits stops the next call of every run in it; a loosened one leaves a live run's
decisions as they were. GraphQL, a real worker, both databases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.runs import DECIDE, agent_name, get_run, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

pytestmark = pytest.mark.usefixtures("worker")

UPDATE_AGENT = "mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id } }"
DENY_HOOKS = {"rules": [{"tool": "webhook.*", "decision": "DENY"}]}
ALLOW_HOOKS = {"rules": [{"tool": "webhook.*", "decision": "ALLOW"}]}


def _hook(url: str, n: int) -> dict[str, Any]:
    return {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": n}}}


async def _approve_pending(gql: Any, workspace: Any, run_id: str) -> None:
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    for pending in run["pendingApprovals"]:
        await gql.ok(DECIDE, {"id": pending["id"], "approve": True}, token=workspace.operator)


async def test_deny_set_while_a_tree_waits_stops_the_next_call_of_every_run_in_it(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        child = await scripted_agent(
            gql, workspace.admin, steps=[_hook(url, 1), _hook(url, 2), {"final": "{{ results | length }}"}]
        )
        child_name = await agent_name(gql, workspace.viewer, child)
        parent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "agents.delegate", "args": {"agent": child_name, "task": "go"}},
                _hook(url, 3),
                {"final": "{{ results[-1] }}"},
            ],
            tools=["agents.delegate", "webhook.post"],
            policy=ALLOW_HOOKS,
        )
        parent_name = await agent_name(gql, workspace.viewer, parent)
        root = await start_run(gql, workspace.operator, parent)
        # The child waits for an approval of its first call: the whole tree waits.
        tree = await wait_run(gql, workspace.viewer, root, "WAITING_CHILD")
        child_run = tree["steps"][0]
        data = await gql.ok(
            "query($id: ID!) { run(id: $id) { children { id } } }", {"id": root}, token=workspace.viewer
        )
        [child_id] = [c["id"] for c in data["run"]["children"]]
        await wait_run(gql, workspace.viewer, child_id, "WAITING_APPROVAL")
        await gql.ok(UPDATE_AGENT, {"id": parent, "input": {"policy": DENY_HOOKS}}, token=workspace.admin)
        await _approve_pending(gql, workspace, child_id)  # decided before the DENY: it runs
        done = await wait_run(gql, workspace.viewer, root, timeout_s=30)
        child_done = await get_run(gql, workspace.viewer, child_id)
    assert child_run["tool"] == "agents.delegate"
    assert done["status"] == "SUCCEEDED", done
    first, second = child_done["steps"][0], child_done["steps"][1]
    assert first["status"] == "SUCCEEDED"
    # The child's next call and the parent's: DENIED by the parent's current policy.
    for step in (second, done["steps"][1]):
        assert step["status"] == "DENIED" and step["decision"] == "DENY", step
        assert step["decisionReason"].startswith(f"agent '{parent_name}' current policy"), step
    assert [d.payload["n"] for d in sink.deliveries] == [1]


async def test_a_loosened_policy_leaves_a_live_runs_decisions_unchanged(gql, workspace) -> None:
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=[_hook(url, 1), _hook(url, 2), {"final": "ok"}]
        )
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        await gql.ok(UPDATE_AGENT, {"id": agent, "input": {"policy": ALLOW_HOOKS}}, token=workspace.admin)
        await _approve_pending(gql, workspace, run_id)
        again = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        # A run started now gets the loosened policy.
        later = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    second = again["steps"][1]
    assert second["decision"] == "REQUIRE_APPROVAL" and "current policy" not in second["decisionReason"]
    assert later["status"] == "SUCCEEDED" and [s["decision"] for s in later["steps"][:2]] == [
        "ALLOW",
        "ALLOW",
    ]
    assert len(sink.deliveries) == 3
