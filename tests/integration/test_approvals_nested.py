"""Approvals in run trees, the cases peers break on (docs/concepts/approvals.md): a
grandchild's approval decided while the root is being cancelled, two siblings' approvals
decided at the same moment, and ``scope: RUN`` in a child not reaching its sibling or parent.
Through GraphQL with a real worker; the races matter on MariaDB (row locks). An approval
decided while the run's worker is SIGKILLed: tests/chaos/test_approval_kills.py (make chaos)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from tests.integration.test_delegation import delegate
from tests.support.runs import CANCEL_RUN, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

DECIDE = """
mutation($id: ID!, $decision: ApprovalDecision!, $scope: ApprovalScope) {
  decideApproval(id: $id, decision: $decision, scope: $scope) { id status decision scope }
}
"""
APPROVALS = """
query { approvals(first: 100) { edges { node { id tool status decision scope reason run { id } } } } }
"""
# Pages sized to these small trees: a tree's lists nested in full would cost more than a
# query may (docs/graphql/frontends.md#paging).
TREE = """
query($id: ID!) {
  run(id: $id) {
    id status
    descendants: descendantsConnection(first: 20) { edges { node { id status depth
      steps: stepsConnection(first: 20) { edges { node { tool status approval { id status } } } } } } }
    steps { tool status approval { id status } }
  }
}
"""


async def _tree(gql: Any, root: str, token: str) -> dict[str, Any]:
    """The run tree of ``root``, its pages unwrapped into lists."""
    run = (await gql.ok(TREE, {"id": root}, token=token))["run"]
    descendants = [edge["node"] for edge in run["descendants"]["edges"]]
    for d in descendants:
        d["steps"] = [edge["node"] for edge in d["steps"]["edges"]]
    return {**run, "descendants": descendants}


def _hook(url: str, n: int) -> dict[str, Any]:
    return {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": n}}}


async def _agent(gql: Any, admin: str, steps: list[dict[str, Any]], short: str, **fields: Any) -> str:
    name = f"{short}-{uuid.uuid4().hex[:8]}"
    await scripted_agent(gql, admin, name=name, steps=steps, tools=["agents.*", "webhook.post"], **fields)
    return name


async def _agent_id(gql: Any, token: str, name: str) -> str:
    data = await gql.ok("query($n: String!) { agentByName(name: $n) { id } }", {"n": name}, token=token)
    return str(data["agentByName"]["id"])


async def _approvals(gql: Any, token: str, runs: set[str]) -> list[dict[str, Any]]:
    edges = (await gql.ok(APPROVALS, token=token))["approvals"]["edges"]
    return [e["node"] for e in edges if e["node"]["run"]["id"] in runs]


async def _pending(gql: Any, token: str, runs: set[str], count: int) -> list[dict[str, Any]]:
    """The pending approvals of ``runs`` once there are ``count`` of them."""
    deadline = time.monotonic() + 30
    while True:
        found = [a for a in await _approvals(gql, token, runs) if a["status"] == "PENDING"]
        if len(found) == count:
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)


async def _tree_runs(gql: Any, token: str, root: str, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        tree = await _tree(gql, root, token)
        if len(tree["descendants"]) == count:
            return tree
        assert time.monotonic() < deadline, tree
        await asyncio.sleep(0.05)


async def test_a_grandchilds_approval_decided_while_the_root_is_cancelled(gql, workspace, worker) -> None:
    async with sink_server() as (sink, url):
        leaf = await _agent(gql, workspace.admin, [_hook(url, 1), {"final": "{{ results }}"}], "leaf")
        mid = await _agent(gql, workspace.admin, [delegate(leaf, "deep"), {"final": "{{ results }}"}], "mid")
        root_agent = await _agent(
            gql, workspace.admin, [delegate(mid, "top"), {"final": "{{ results }}"}], "root"
        )
        ran: list[bool] = []
        approved: list[bool] = []
        for _ in range(3):  # the race goes either way; each way must hold
            root = await start_run(
                gql, workspace.operator, await _agent_id(gql, workspace.viewer, root_agent)
            )
            tree = await _tree_runs(gql, workspace.viewer, root, 2)
            runs = {root, *(d["id"] for d in tree["descendants"])}
            [pending] = await _pending(gql, workspace.viewer, runs, 1)
            cancel, decide = await asyncio.gather(
                gql.raw(CANCEL_RUN, {"id": root, "reason": "stop"}, token=workspace.operator),
                gql.raw(DECIDE, {"id": pending["id"], "decision": "APPROVE"}, token=workspace.operator),
            )
            if "errors" in decide:  # the cancel came first: the approval was closed with the run
                assert [e["extensions"]["code"] for e in decide["errors"]] == ["INVALID_TRANSITION"], decide
            await wait_run(gql, workspace.viewer, root)
            tree = await _tree(gql, root, workspace.viewer)
            statuses = [d["status"] for d in tree["descendants"]]
            if "errors" in cancel:  # approved first, and the whole tree ended before the cancel
                assert [e["extensions"]["code"] for e in cancel["errors"]] == ["INVALID_TRANSITION"], cancel
                assert "errors" not in decide and tree["status"] == "SUCCEEDED", tree
                assert statuses == ["SUCCEEDED", "SUCCEEDED"], tree
            elif "errors" in decide:
                assert tree["status"] == "CANCELLED" and statuses == ["CANCELLED", "CANCELLED"], tree
            else:  # approved first: the leaf, then the middle, may have ended before the cancel
                assert tree["status"] == "CANCELLED", tree
                assert statuses in (["CANCELLED", "CANCELLED"], ["CANCELLED", "SUCCEEDED"],
                                    ["SUCCEEDED", "SUCCEEDED"]), tree  # fmt: skip
            steps = [s for d in tree["descendants"] for s in d["steps"]] + tree["steps"]
            assert all(
                s["status"] not in {"PENDING", "RUNNING", "WAITING_APPROVAL", "WAITING_CHILD"} for s in steps
            )
            [approval] = await _approvals(gql, workspace.viewer, runs)
            expected = "REJECTED" if "errors" in decide else "APPROVED"
            assert approval["status"] == expected, (approval, decide)
            ran.append(statuses[1] == "SUCCEEDED")
            approved.append("errors" not in decide)
        # A call goes out only for an approval that was decided before its run ended (one cut
        # off by the cancel may or may not have been sent).
        assert sum(ran) <= len(sink.deliveries) <= sum(approved)


async def test_two_siblings_approvals_decided_at_the_same_moment(gql, workspace, worker) -> None:
    async with sink_server() as (sink, url):
        child = await _agent(
            gql, workspace.admin, [_hook(url, 1), {"final": "{{ results[0].status }}"}], "child"
        )
        root_agent = await _agent(
            gql, workspace.admin,
            [{"calls": [delegate(child, "a"), delegate(child, "b")]}, {"final": "{{ results }}"}], "root",
        )  # fmt: skip
        root = await start_run(gql, workspace.operator, await _agent_id(gql, workspace.viewer, root_agent))
        tree = await _tree_runs(gql, workspace.viewer, root, 2)
        runs = {d["id"] for d in tree["descendants"]}
        first, second = await _pending(gql, workspace.viewer, runs, 2)
        decided = await asyncio.gather(
            gql.ok(DECIDE, {"id": first["id"], "decision": "APPROVE"}, token=workspace.operator),
            gql.ok(DECIDE, {"id": second["id"], "decision": "APPROVE"}, token=workspace.operator),
        )
        assert [d["decideApproval"]["status"] for d in decided] == ["APPROVED", "APPROVED"]
        run = await wait_run(gql, workspace.viewer, root, timeout_s=30)
        assert run["status"] == "SUCCEEDED", run
        assert len(sink.deliveries) == 2
    tree = await _tree(gql, root, workspace.viewer)
    assert [d["status"] for d in tree["descendants"]] == ["SUCCEEDED", "SUCCEEDED"]
    # Each child's outcome reached the parent's own step for it.
    assert [s["status"] for s in run["steps"][:2]] == ["SUCCEEDED", "SUCCEEDED"]


async def test_scope_run_in_a_child_reaches_neither_its_sibling_nor_its_parent(
    gql, workspace, worker
) -> None:
    async with sink_server() as (sink, url):
        child = await _agent(gql, workspace.admin, [_hook(url, 1), _hook(url, 2), {"final": "done"}], "child")
        root_agent = await _agent(
            gql, workspace.admin,
            [{"calls": [delegate(child, "a"), delegate(child, "b")]}, _hook(url, 3), {"final": "done"}], "root",
        )  # fmt: skip
        root = await start_run(gql, workspace.operator, await _agent_id(gql, workspace.viewer, root_agent))
        tree = await _tree_runs(gql, workspace.viewer, root, 2)
        a, b = (d["id"] for d in tree["descendants"])
        pending = await _pending(gql, workspace.viewer, {a, b}, 2)
        in_a = next(p for p in pending if p["run"]["id"] == a)
        await gql.ok(
            DECIDE, {"id": in_a["id"], "decision": "APPROVE", "scope": "RUN"}, token=workspace.operator
        )
        # a goes on through its second call without asking; b still waits on its first.
        await wait_run(gql, workspace.viewer, a)
        b_pending = await _pending(gql, workspace.viewer, {b}, 1)
        assert [p["run"]["id"] for p in b_pending] == [b]
        a_approvals = await _approvals(gql, workspace.viewer, {a})
        assert [(x["status"], x["scope"]) for x in a_approvals] == [("APPROVED", "RUN"), ("APPROVED", "RUN")]
        await gql.ok(DECIDE, {"id": b_pending[0]["id"], "decision": "APPROVE"}, token=workspace.operator)
        [b_second] = await _pending(gql, workspace.viewer, {b}, 1)  # CALL scope: b asks again
        await gql.ok(DECIDE, {"id": b_second["id"], "decision": "APPROVE"}, token=workspace.operator)
        # The parent's own call of the same tool is not approved by its child's decision.
        [parents] = await _pending(gql, workspace.viewer, {root}, 1)
        assert parents["scope"] is None
        await gql.ok(DECIDE, {"id": parents["id"], "decision": "REJECT"}, token=workspace.operator)
        run = await wait_run(gql, workspace.viewer, root, timeout_s=30)
        assert run["status"] == "SUCCEEDED", run
        assert sorted(d.payload["n"] for d in sink.deliveries) == [1, 1, 2, 2]
