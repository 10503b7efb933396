"""Delegation through GraphQL with a real worker: ``agents.delegate`` starts a real child run,
the parent waits, and the child's outcome becomes the result of the parent's call."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import stop_worker
from tests.support.runs import CANCEL_RUN, DECIDE, get_run, scripted_agent, start_run, wait_run

TREE = """
query($id: ID!) {
  run(id: $id) {
    id status depth trigger result
    steps { tool status result childRun { id } }
    descendants { id depth status }
    children {
      id depth trigger status parent { id } root { id }
      delegation { task parentStep { tool } }
      children { id depth status result parent { id } root { id } path { id depth } }
    }
    path { id }
    pendingApprovals { id tool run { id depth } }
  }
}
"""


def delegate(agent: str, task: str, **extra: Any) -> dict[str, Any]:
    return {"call": "agents.delegate", "args": {"agent": agent, "task": task, **extra}}


async def agents(gql: Any, token: str, specs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Create agents by short name (unique names per test); returns short name -> real name."""
    names = {}
    for short, spec in specs.items():
        spec = {"tools": ["agents.*", "webhook.post", "http.*"], **spec}
        names[short] = f"{short}-{uuid.uuid4().hex[:8]}"
        await scripted_agent(gql, token, name=names[short], **spec)
    return names


async def root_id_of(gql: Any, token: str, name: str) -> str:
    data = await gql.ok("query { agents(first: 100) { edges { node { id name } } } }", token=token)
    [agent_id] = [e["node"]["id"] for e in data["agents"]["edges"] if e["node"]["name"] == name]
    return str(agent_id)


async def test_a_three_level_tree_succeeds_with_results_flowing_up(gql, workspace, worker) -> None:
    names = await agents(
        gql, workspace.admin, {"leaf": {"steps": [{"final": "leaf:{{ input.task }}:{{ input.n }}"}]}}
    )
    # Agents refer to each other by name, so each is created once the one it calls exists.
    names |= await agents(
        gql,
        workspace.admin,
        {
            "mid2": {
                "steps": [
                    delegate(names["leaf"], "deep", input={"n": 2}),
                    {"final": "{{ results[0].result }}"},
                ]
            },
        },
    )
    names |= await agents(
        gql,
        workspace.admin,
        {"root": {"steps": [delegate(names["mid2"], "top"), {"final": "{{ results[0] }}"}]}},
    )
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["root"]))
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED", run
    tree = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"]
    [child] = tree["children"]
    [grandchild] = child["children"]
    assert run["result"] == {
        "status": "SUCCEEDED",
        "result": "leaf:deep:2",
        "error": None,
        "runId": run["result"]["runId"],
    }
    assert child["id"] == tree["steps"][0]["childRun"]["id"]
    assert child["depth"] == 1 and grandchild["depth"] == 2 and child["trigger"] == "DELEGATION"
    assert child["delegation"] == {"task": "top", "parentStep": {"tool": "agents.delegate"}}
    assert child["parent"]["id"] == run_id and grandchild["parent"]["id"] == child["id"]
    assert child["root"]["id"] == run_id and grandchild["root"]["id"] == run_id
    assert grandchild["result"] == "leaf:deep:2"
    assert {d["id"] for d in tree["descendants"]} == {child["id"], grandchild["id"]}
    assert grandchild["path"] == [
        {"id": run_id, "depth": 0},
        {"id": child["id"], "depth": 1},
        {"id": grandchild["id"], "depth": 2},
    ]
    assert tree["path"] == [{"id": run_id}]


async def test_failure_and_cancellation_flow_up_as_outcomes(gql, workspace, worker) -> None:
    names = await agents(
        gql,
        workspace.admin,
        {
            "broken": {"steps": [{"final": "{{ input.missing.deeper }}"}]},
            "slow": {
                "steps": [{"call": "webhook.post", "args": {"url": "http://127.0.0.1:9/", "payload": {}}}]
            },
        },
    )
    names |= await agents(
        gql,
        workspace.admin,
        {
            "boss": {
                "steps": [
                    {"calls": [delegate(names["broken"], "a"), delegate(names["slow"], "b")]},
                    {"final": "{{ results }}"},
                ]
            }
        },
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["boss"]))
    # The slow child waits for approval of its webhook; cancel it from the root's inbox.
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_CHILD", timeout_s=30)
    for _ in range(100):
        tree = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"]
        if tree["pendingApprovals"]:
            break
        await asyncio.sleep(0.1)
    [approval] = tree["pendingApprovals"]
    assert approval["run"]["depth"] == 1
    await gql.ok(CANCEL_RUN, {"id": approval["run"]["id"], "reason": "not needed"}, token=workspace.operator)
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED", run
    failed, cancelled = run["result"]
    assert failed["status"] == "FAILED" and "model provider failed" in failed["error"]
    assert cancelled["status"] == "CANCELLED" and cancelled["error"] is None


async def test_a_grandchilds_approval_shows_on_the_root_and_resumes_the_chain(gql, workspace, worker) -> None:
    from tests.support.servers import sink_server

    async with sink_server() as (sink, url):
        names = await agents(
            gql,
            workspace.admin,
            {"enricher": {"steps": [{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"x": 1}}},
                                    {"final": "posted {{ results[0].status }}"}]}},
        )  # fmt: skip
        names |= await agents(gql, workspace.admin, {"mid": {"steps": [delegate(names["enricher"], "post"),
                                                                        {"final": "{{ results[0].result }}"}]}})  # fmt: skip
        names |= await agents(gql, workspace.admin, {"lead": {"steps": [delegate(names["mid"], "go"),
                                                                         {"final": "{{ results[0].result }}"}]}})  # fmt: skip
        run_id = await start_run(
            gql, workspace.operator, await root_id_of(gql, workspace.admin, names["lead"])
        )
        approvals: list[dict[str, Any]] = []
        for _ in range(200):
            approvals = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"][
                "pendingApprovals"
            ]
            if approvals:
                break
            await asyncio.sleep(0.1)
        [approval] = approvals
        assert approval["tool"] == "webhook.post" and approval["run"]["depth"] == 2
        assert sink.deliveries == []
        await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=workspace.operator)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED" and run["result"] == "posted 200", run
    assert len(sink.deliveries) == 1


@pytest.fixture
async def shallow_worker(settings: Any) -> AsyncIterator[Any]:
    """A worker whose deployment allows delegation one level deep."""
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"max_delegation_depth": 1}), handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)


async def test_cycles_depth_and_unknown_agents_are_refused_as_results(
    gql, workspace, make_workspace, shallow_worker
) -> None:
    other = await make_workspace()
    await scripted_agent(gql, other.admin, name="elsewhere", steps=[{"final": "x"}])
    names = await agents(gql, workspace.admin, {"leaf": {"steps": [{"final": "x"}]}})
    names |= await agents(gql, workspace.admin, {"paused": {"steps": [{"final": "x"}]}})
    paused_id = await root_id_of(gql, workspace.admin, names["paused"])
    await gql.ok(
        "mutation($id: ID!) { updateAgent(id: $id, input: {status: PAUSED}) { id } }", {"id": paused_id},
        token=workspace.admin,
    )  # fmt: skip
    names |= await agents(gql, workspace.admin, {"mid": {"steps": [delegate(names["leaf"], "too deep"),
                                                                    {"final": "{{ results[0] }}"}]}})  # fmt: skip
    me = f"self-{uuid.uuid4().hex[:8]}"
    await scripted_agent(
        gql,
        workspace.admin,
        name=me,
        tools=["agents.*"],
        steps=[
            {"calls": [delegate(me, "me again"), delegate("elsewhere", "x"), delegate(names["paused"], "x"),
                       delegate("", "x"), delegate(names["mid"], "one level")]},
            {"call": "agents.list", "args": {}},
            {"final": "{{ results }}"},
        ],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, me))
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED", run
    cycle, foreign, paused, empty, mid, listed = run["result"]
    assert cycle["error"]["code"] == "DELEGATION_CYCLE"
    assert foreign["error"]["code"] == "UNKNOWN_AGENT"
    assert paused["error"]["code"] == "AGENT_NOT_ACTIVE"
    assert empty["error"]["code"] == "INVALID_ARGUMENTS"
    # The mid agent ran at depth 1; its own delegation (depth 2) was refused inside it.
    assert mid["status"] == "SUCCEEDED" and mid["result"]["error"]["code"] == "DELEGATION_DEPTH_EXCEEDED"
    listed_names = {a["name"] for a in listed["agents"]}
    assert names["leaf"] in listed_names and names["mid"] in listed_names
    assert me not in listed_names and names["paused"] not in listed_names and "elsewhere" not in listed_names
    tree = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"]
    assert len(tree["descendants"]) == 1  # refusals create no run


@pytest.mark.parametrize(
    ("parent_policy", "child_status", "reason_names"),
    [
        (None, "WAITING_APPROVAL", "parent"),  # the parent's default for EXTERNAL_WRITE is approval
        ({"rules": [{"tool": "webhook.*", "decision": "DENY"}]}, "DENIED", "parent"),
    ],
)
async def test_a_child_never_gets_a_more_permissive_decision_than_its_parent(
    gql, workspace, worker, parent_policy, child_status, reason_names
) -> None:
    names = await agents(
        gql,
        workspace.admin,
        {"child": {"policy": {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]},
                   "steps": [{"call": "webhook.post", "args": {"url": "http://127.0.0.1:9/", "payload": {}}},
                             {"final": "done"}]}},
    )  # fmt: skip
    parent_spec: dict[str, Any] = {"steps": [delegate(names["child"], "post"), {"final": "{{ results[0] }}"}]}
    if parent_policy is not None:
        parent_spec["policy"] = parent_policy
    names |= await agents(gql, workspace.admin, {"parent": parent_spec})
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["parent"]))
    step: dict[str, Any] = {}
    for _ in range(200):
        tree = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"]
        if tree["children"]:
            child = await get_run(gql, workspace.viewer, tree["children"][0]["id"])
            if child["steps"] and child["steps"][0]["status"] in ("WAITING_APPROVAL", "DENIED"):
                step = child["steps"][0]
                break
        await asyncio.sleep(0.1)
    assert step["status"] == child_status
    assert f"agent '{names[reason_names]}'" in step["decisionReason"]
    if child_status == "WAITING_APPROVAL":
        await gql.ok(CANCEL_RUN, {"id": run_id}, token=workspace.operator)


@pytest.mark.parametrize("delay_s", [0.0, 0.01, 0.03, 0.06, 0.1])
async def test_a_child_created_while_its_parent_is_cancelled_ends_cancelled(
    gql, workspace, worker, sessionmaker, delay_s
) -> None:
    """Cancel races the turn that creates children: whichever commits first, no child is
    left running under a cancelled parent."""
    from sqlalchemy import select

    from app.db.orm import Run
    from app.graphql.ids import from_global_id

    names = await agents(gql, workspace.admin, {"waiter": {"steps": [
        {"call": "webhook.post", "args": {"url": "http://127.0.0.1:9/", "payload": {}}}, {"final": "x"}]}})  # fmt: skip
    names |= await agents(gql, workspace.admin, {"boss": {"steps": [
        {"calls": [delegate(names["waiter"], f"t{i}") for i in range(3)]}, {"final": "x"}]}})  # fmt: skip
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["boss"]))
    await asyncio.sleep(delay_s)
    body = await gql.raw(CANCEL_RUN, {"id": run_id, "reason": "race"}, token=workspace.operator)
    assert not body.get("errors") or body["errors"][0]["extensions"]["code"] == "INVALID_TRANSITION"
    await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    root = from_global_id(run_id, "Run")
    for _ in range(100):  # let any job already picked up finish its (fenced) attempt
        async with sessionmaker() as session:
            tree = list(await session.scalars(select(Run).where(Run.root_run_id == root)))
        if all(r.status in ("CANCELLED", "SUCCEEDED", "FAILED") for r in tree):
            break
        await asyncio.sleep(0.05)
    assert {r.status for r in tree} == {"CANCELLED"}, [(r.id, r.status) for r in tree]


async def test_a_child_input_its_agent_does_not_take_is_refused_to_the_model(gql, workspace, worker) -> None:
    # issue 27 item 6: a delegated child's input meets its agent's inputSchema as startRun's does.
    schema = {
        "type": "object",
        "required": ["task", "company"],
        "properties": {"company": {"type": "string"}},
    }
    names = await agents(
        gql, workspace.admin, {"leaf": {"steps": [{"final": "{{ input.company }}"}], "inputSchema": schema}}
    )
    names |= await agents(
        gql,
        workspace.admin,
        {"root": {"steps": [{"calls": [delegate(names["leaf"], "no company"),
                                       delegate(names["leaf"], "with one", input={"company": "acme.example"})]},
                            {"final": "{{ results }}"}]}},
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["root"]))
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED", run
    refused, taken = run["result"]
    assert refused["error"]["code"] == "INVALID_ARGUMENTS"
    assert "'company' is a required property" in refused["error"]["message"]
    assert taken["status"] == "SUCCEEDED" and taken["result"] == "acme.example"
    tree = (await gql.ok(TREE, {"id": run_id}, token=workspace.viewer))["run"]
    assert len(tree["children"]) == 1  # the refused call started no child
