"""Runs through GraphQL: the execution tree, its relations, the query budget of a whole tree,
and the run mutations wired to the run services."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from app.db import orm
from app.domain.runs import RunStatus
from tests.support.graphql import create_agent, create_memory, gid, pk
from tests.support.trees import Rows

RUN_FIELDS = """
id status trigger input result error depth createdAt startedAt finishedAt cancelReason
agent { id name } parent { id } root { id } delegation { task parentStep { id seq } }
"""

MAX_TREE_QUERIES = 16

TREE = """
query($id: ID!) {
  run(id: $id) {
    id status agent { name } steps { id seq tool status decision childRun { id } approval { id } }
    pendingApprovals { id run { id } }
    injectedMemories { id key }
    descendants { id depth parent { id } root { id } agent { name } }
    children {
      id agent { name } stepsConnection(first: 2) { edges { node { id tool } } }
      delegation { task parentStep { id } }
      children {
        id agent { name } stepsConnection(first: 2) { edges { node { id tool } } } parent { id }
        childrenConnection(first: 2) { edges { node { id agent { name } } } }
      }
    }
  }
}
"""


@contextmanager
def count_statements(app: Any) -> Iterator[list[str]]:
    """Every SQL statement the app's engine sends while the block runs."""
    statements: list[str] = []
    engine = app.state.runtime.engine.sync_engine

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def _build_tree(
    rows: Rows, agents: list[int], *, children: int, grandchildren: int
) -> tuple[orm.Run, int]:
    """A 3-level tree: root -> children -> grandchildren, two steps per run (the second a
    delegation step pointing at a child). Returns the root and the number of runs."""
    root = await rows.run(agents[0], status="WAITING_CHILD")
    count = 1
    for i in range(children):
        step = await rows.step(root, seq=i, tool="agents.delegate", status="WAITING_CHILD")
        child = await rows.run(agents[i % len(agents)], parent=root, task=f"task {i}", parent_step_id=step.id)
        count += 1
        for j in range(grandchildren):
            await rows.step(child, seq=j, tool="agents.delegate")
            grandchild = await rows.run(agents[j % len(agents)], parent=child, status="WAITING_APPROVAL")
            count += 1
            waiting = await rows.step(grandchild, seq=0, tool="webhook.post", status="WAITING_APPROVAL")
            await rows.approval(grandchild, waiting)
    return root, count


async def test_a_whole_tree_costs_a_bounded_number_of_queries(
    gql: Any, app: Any, workspace: Any, sessionmaker: Any
) -> None:
    agents = [pk((await create_agent(gql, workspace.admin))["id"]) for _ in range(3)]
    rows = Rows(sessionmaker, workspace.id)
    small, small_count = await _build_tree(rows, agents, children=3, grandchildren=2)
    large, large_count = await _build_tree(rows, agents, children=3, grandchildren=12)
    assert (small_count, large_count) == (10, 40)

    counts = {}
    for root, size in [(small, small_count), (large, large_count)]:
        with count_statements(app) as statements:
            data = await gql.ok(TREE, {"id": gid("Run", root.id)}, token=workspace.viewer)
        # SQLite's BEGIN IMMEDIATE per short session is bookkeeping, not a query.
        counts[size] = len([s for s in statements if not s.startswith("BEGIN")])
        run = data["run"]
        assert len(run["descendants"]) == size - 1
        assert {d["root"]["id"] for d in run["descendants"]} == {gid("Run", root.id)}
        assert len(run["pendingApprovals"]) == size - 4  # one per grandchild
        grandchildren = [g for c in run["children"] for g in c["children"]]
        assert len(grandchildren) == size - 4
        assert all(g["agent"]["name"] for g in grandchildren)

    # One query per relation per level, plus authentication: about 12. Batches can split
    # across event-loop ticks depending on timing, hence a bound rather than an exact figure;
    # a per-run query anywhere would blow it for the 40-run tree.
    assert counts[10] <= MAX_TREE_QUERIES, counts
    assert counts[40] <= MAX_TREE_QUERIES, counts


async def test_run_tree_relations(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    parent_agent = await create_agent(gql, workspace.admin)
    child_agent = await create_agent(gql, workspace.admin)
    memory = await create_memory(gql, workspace.operator, parent_agent["id"], key="injected")
    rows = Rows(sessionmaker, workspace.id)
    root = await rows.run(
        pk(parent_agent["id"]), status="WAITING_CHILD", injected=[pk(memory["id"]), 999_999]
    )
    step = await rows.step(root, seq=0, tool="agents.delegate", status="WAITING_CHILD")
    child = await rows.run(
        pk(child_agent["id"]),
        parent=root,
        status="WAITING_APPROVAL",
        task="summarise",
        parent_step_id=step.id,
    )
    async with sessionmaker() as session, session.begin():
        (await session.get_one(orm.RunStep, step.id)).child_run_id = child.id
    waiting = await rows.step(
        child, seq=0, tool="webhook.post", status="WAITING_APPROVAL", decision="REQUIRE_APPROVAL"
    )
    approval = await rows.approval(child, waiting)
    await rows.approval(child, await rows.step(child, seq=1, tool="webhook.post"), status="APPROVED")

    query = f"""query($id: ID!) {{ run(id: $id) {{ {RUN_FIELDS}
        injectedMemories {{ id key }}
        pendingApprovals {{ id status tool arguments run {{ id }} step {{ id }} }}
        steps {{ seq tool childRun {{ id }} }}
        children {{ {RUN_FIELDS}
          stepsConnection(first: 5) {{ edges {{ node {{ seq status decision decisionReason approval {{ id status }} }} }} }}
          pendingApprovals {{ id }} }} }} }}"""
    run = (await gql.ok(query, {"id": gid("Run", root.id)}, token=workspace.viewer))["run"]
    assert run["depth"] == 0
    assert run["parent"] is None
    assert run["root"] == {"id": gid("Run", root.id)}
    assert run["delegation"] is None
    assert run["trigger"] == "API"
    assert run["agent"]["id"] == parent_agent["id"]
    # A deleted (or never existing) injected memory is left out, not an error.
    assert run["injectedMemories"] == [{"id": memory["id"], "key": "injected"}]
    assert run["steps"] == [{"seq": 0, "tool": "agents.delegate", "childRun": {"id": gid("Run", child.id)}}]
    assert [a["id"] for a in run["pendingApprovals"]] == [gid("Approval", approval.id)]
    assert run["pendingApprovals"][0]["run"] == {"id": gid("Run", child.id)}

    (kid,) = run["children"]
    assert kid["depth"] == 1
    assert kid["trigger"] == "DELEGATION"
    assert kid["parent"] == {"id": gid("Run", root.id)}
    assert kid["root"] == {"id": gid("Run", root.id)}
    assert kid["delegation"] == {"task": "summarise", "parentStep": {"id": gid("RunStep", step.id), "seq": 0}}
    kid_step = kid["stepsConnection"]["edges"][0]["node"]
    assert kid_step["approval"] == {"id": gid("Approval", approval.id), "status": "PENDING"}
    assert kid_step["decision"] == "REQUIRE_APPROVAL"
    assert kid["pendingApprovals"] == [{"id": gid("Approval", approval.id)}]


async def test_runs_list_filters(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    a = await create_agent(gql, workspace.admin)
    b = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    r1 = await rows.run(pk(a["id"]), status="SUCCEEDED")
    r2 = await rows.run(pk(b["id"]), status="FAILED")
    r3 = await rows.run(pk(a["id"]), parent=r1, status="RUNNING")
    query = """query($status: [RunStatus!], $agentId: ID, $roots: Boolean) {
      runs(status: $status, agentId: $agentId, rootsOnly: $roots) { edges { node { id } } } }"""

    async def ids(**variables: Any) -> list[int]:
        data = await gql.ok(query, variables, token=workspace.viewer)
        return [pk(e["node"]["id"]) for e in data["runs"]["edges"]]

    assert await ids() == [r3.id, r2.id, r1.id]
    assert await ids(status=["SUCCEEDED", "RUNNING"]) == [r3.id, r1.id]
    assert await ids(agentId=a["id"]) == [r3.id, r1.id]
    assert await ids(roots=True) == [r2.id, r1.id]
    assert await ids(agentId=a["id"], roots=True, status=["SUCCEEDED"]) == [r1.id]
    agent_runs = await gql.ok(
        "query($id: ID!) { agent(id: $id) { runs(status: [RUNNING]) { edges { node { id } } } } }",
        {"id": a["id"]},
        token=workspace.viewer,
    )
    assert [pk(e["node"]["id"]) for e in agent_runs["agent"]["runs"]["edges"]] == [r3.id]


async def test_start_and_cancel_run(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    started = await gql.ok(
        'mutation($a: ID!) { startRun(agentId: $a, input: {topic: "x"}) '
        "{ id status trigger input depth root { id } } }",
        {"a": agent["id"]},
        token=workspace.operator,
    )
    run = started["startRun"]
    assert run["status"] == RunStatus.QUEUED
    assert run["trigger"] == "API"
    assert run["input"] == {"topic": "x"}
    assert run["root"] == {"id": run["id"]}

    cancelled = await gql.ok(
        'mutation($id: ID!) { cancelRun(id: $id, reason: "enough") { id status cancelReason finishedAt } }',
        {"id": run["id"]},
        token=workspace.operator,
    )
    assert cancelled["cancelRun"]["status"] == "CANCELLED"
    error = await gql.error(
        "mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": run["id"]}, token=workspace.operator
    )
    assert error["extensions"]["code"] == "INVALID_TRANSITION"

    error = await gql.error(
        "mutation($a: ID!) { startRun(agentId: $a) { id } }", {"a": agent["id"]}, token=workspace.viewer
    )
    assert error["extensions"]["code"] == "FORBIDDEN"


async def test_decide_approval(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    run = await rows.run(pk(agent["id"]), status="WAITING_APPROVAL")
    step = await rows.step(
        run, seq=0, tool="webhook.post", status="WAITING_APPROVAL", decision="REQUIRE_APPROVAL"
    )
    approval = await rows.approval(run, step)
    decide = """mutation($id: ID!, $ok: Boolean!) {
      decideApproval(id: $id, approve: $ok, reason: "looks fine") {
        id status reason decidedAt run { id status } } }"""
    error = await gql.error(decide, {"id": gid("Approval", approval.id), "ok": True}, token=workspace.viewer)
    assert error["extensions"]["code"] == "FORBIDDEN"
    decided = (
        await gql.ok(decide, {"id": gid("Approval", approval.id), "ok": True}, token=workspace.operator)
    )["decideApproval"]
    assert decided["status"] == "APPROVED"
    assert decided["reason"] == "looks fine"
    assert decided["decidedAt"] is not None
    error = await gql.error(
        decide, {"id": gid("Approval", approval.id), "ok": False}, token=workspace.operator
    )
    assert error["extensions"]["code"] == "INVALID_TRANSITION"
    listed = await gql.ok("{ approvals(status: APPROVED) { edges { node { id } } } }", token=workspace.viewer)
    assert [e["node"]["id"] for e in listed["approvals"]["edges"]] == [gid("Approval", approval.id)]
    listed = await gql.ok("{ approvals(status: PENDING) { edges { node { id } } } }", token=workspace.viewer)
    assert listed["approvals"]["edges"] == []
