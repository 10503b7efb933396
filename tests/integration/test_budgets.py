"""Budgets through GraphQL with a real worker (docs/concepts/budgets.md): usage is recorded
per turn, run and subtree; calls over a limit are refused with BUDGET_EXCEEDED; spent tokens
end runs FAILED with Run.errorCode; a child is held to what its ancestors have left."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.integration.test_delegation import delegate
from tests.support.runs import scripted_agent, wait_run

USAGE = "inputTokens outputTokens cacheReadTokens cacheWriteTokens costUsd toolCalls children turns runs"
TREE = f"""
query($id: ID!) {{
  run(id: $id) {{
    id status error errorCode
    usage {{ {USAGE} }}
    treeUsage {{ {USAGE} }}
    budget {{ name limit used remaining imposedBy imposedOnRunId }}
    steps {{ tool status errorCode result usage {{ inputTokens outputTokens turns toolCalls }} }}
    descendants {{ id status errorCode error usage {{ {USAGE} }} treeUsage {{ {USAGE} }} parent {{ id }}
                   budget {{ name limit used remaining imposedBy imposedOnRunId }} }}
  }}
}}
"""
START = """
mutation($agentId: ID!, $input: JSON, $budget: JSON) {
  startRun(agentId: $agentId, input: $input, budget: $budget) { id status }
}
"""


def name(short: str) -> str:
    return f"{short}-{uuid.uuid4().hex[:8]}"


async def agent(
    gql: Any, token: str, short: str, steps: list[dict[str, Any]], **fields: Any
) -> tuple[str, str]:
    real = name(short)
    agent_id = await scripted_agent(
        gql, token, name=real, steps=steps, tools=["agents.*", "memory.*"], **fields
    )
    return real, agent_id


async def start(gql: Any, token: str, agent_id: str, budget: dict[str, Any] | None = None) -> str:
    data = await gql.ok(START, {"agentId": agent_id, "budget": budget}, token=token)
    return str(data["startRun"]["id"])


async def tree(gql: Any, token: str, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = (await gql.ok(TREE, {"id": run_id}, token=token))["run"]
    return run


def limit(run: dict[str, Any], key: str) -> dict[str, Any]:
    [found] = [b for b in run["budget"] if b["name"] == key]
    return found


def spend(n_in: int, n_out: int) -> dict[str, int]:
    return {"input_tokens": n_in, "output_tokens": n_out}


STEP_PAGE = """query($id: ID!, $after: String) { run(id: $id) {
  stepsConnection(first: 100, after: $after) { edges { node { tool status errorCode result } }
    pageInfo { hasNextPage endCursor } } } }"""


async def all_steps(gql: Any, token: str, run_id: str) -> list[dict[str, Any]]:
    """Every step of a run, page by page (``Run.steps`` holds the first page only)."""
    steps: list[dict[str, Any]] = []
    after = None
    while True:
        page = (await gql.ok(STEP_PAGE, {"id": run_id, "after": after}, token=token))["run"][
            "stepsConnection"
        ]
        steps += [edge["node"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return steps
        after = page["pageInfo"]["endCursor"]


async def test_a_300_call_turn_runs_max_calls_per_turn_and_refuses_the_rest(gql, workspace, worker) -> None:
    calls = [{"call": "memory.search", "args": {"query": f"q{i}"}} for i in range(300)]
    _, agent_id = await agent(gql, workspace.admin, "wide", [{"calls": calls}, {"final": "done"}])
    run_id = await start(gql, workspace.operator, agent_id)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=60))["status"] == "SUCCEEDED"
    run = await tree(gql, workspace.viewer, run_id)
    tool_steps = [s for s in await all_steps(gql, workspace.viewer, run_id) if s["tool"] == "memory.search"]
    assert len(tool_steps) == 300
    executed = [s for s in tool_steps if s["status"] == "SUCCEEDED"]
    refused = [s for s in tool_steps if s["errorCode"] == "BUDGET_EXCEEDED"]
    assert len(executed) == 16 and len(refused) == 284  # ENVERIF_MAX_CALLS_PER_TURN
    assert "maxCallsPerTurn 16 set by the deployment (ENVERIF_MAX_CALLS_PER_TURN)" in str(
        refused[0]["result"]
    )
    assert run["usage"]["toolCalls"] == 16 and run["usage"]["turns"] == 2
    assert limit(run, "maxCallsPerTurn")["imposedBy"].startswith("the deployment")


async def test_identical_calls_are_answered_loop_detected(gql, workspace, worker) -> None:
    same = {"call": "memory.search", "args": {"query": "again"}}
    _, agent_id = await agent(gql, workspace.admin, "loop", [same] * 7 + [{"final": "done"}])
    run_id = await start(gql, workspace.operator, agent_id)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=30))["status"] == "SUCCEEDED"
    codes = [s["errorCode"] for s in (await tree(gql, workspace.viewer, run_id))["steps"] if s["tool"]]
    assert codes == [None] * 5 + ["LOOP_DETECTED"] * 2  # ENVERIF_MAX_IDENTICAL_CALLS = 5


async def test_leaves_spending_tokens_stop_the_tree_at_the_roots_max_tokens(gql, workspace, worker) -> None:
    # Each leaf spends 100 tokens per turn for 5 turns; the root allows 250 over its subtree.
    leaf_steps = [
        {"call": "memory.search", "args": {"query": f"l{i}"}, "usage": spend(60, 40)} for i in range(5)
    ]
    leaf, _ = await agent(gql, workspace.admin, "leaf", [*leaf_steps, {"final": "leaf done"}])
    mid, _ = await agent(gql, workspace.admin, "mid", [delegate(leaf, "dig"), {"final": "{{ results[0] }}"}])
    _, root_id = await agent(
        gql, workspace.admin, "root", [delegate(mid, "plan"), {"final": "{{ results[0] }}"}],
        budget={"maxTokens": 250},
    )  # fmt: skip
    run_id = await start(gql, workspace.operator, root_id)
    root = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert root["status"] == "FAILED", root
    run = await tree(gql, workspace.viewer, run_id)
    assert run["errorCode"] == "BUDGET_EXCEEDED"
    assert "maxTokens 250 set by agent 'root-" in run["error"]
    [mid_run] = [d for d in run["descendants"] if d["parent"]["id"] == run_id]
    [leaf_run] = [d for d in run["descendants"] if d["parent"]["id"] == mid_run["id"]]
    assert leaf_run["status"] == "FAILED" and leaf_run["errorCode"] == "BUDGET_EXCEEDED"
    # Three turns of 100: the third reaches the limit, and nothing more is asked.
    assert leaf_run["usage"]["inputTokens"] + leaf_run["usage"]["outputTokens"] == 300
    assert leaf_run["usage"]["turns"] == 3
    # Every ancestor's treeUsage is the sum of its subtree.
    for key in ("inputTokens", "outputTokens", "turns", "toolCalls"):
        assert mid_run["treeUsage"][key] == mid_run["usage"][key] + leaf_run["treeUsage"][key]
        assert run["treeUsage"][key] == run["usage"][key] + mid_run["treeUsage"][key]
    assert run["treeUsage"]["runs"] == 3 and mid_run["treeUsage"]["runs"] == 2
    assert run["usage"]["children"] == 1


async def test_a_child_is_held_to_its_parents_remainder(gql, workspace, worker) -> None:
    waiting = [{"call": "memory.search", "args": {"query": "x"}, "usage": spend(10, 0)}, {"final": "ok"}]
    child, _ = await agent(gql, workspace.admin, "child", waiting, budget={"maxTokens": 10_000})
    _, root_id = await agent(
        gql, workspace.admin, "parent",
        [{"call": "memory.search", "args": {"query": "y"}, "usage": spend(300, 100)}, delegate(child, "go"),
         {"final": "{{ results[1] }}"}],
        budget={"maxTokens": 1_000},
    )  # fmt: skip
    run_id = await start(gql, workspace.operator, root_id)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=30))["status"] == "SUCCEEDED"
    run = await tree(gql, workspace.viewer, run_id)
    [child_run] = run["descendants"]
    held = limit(child_run, "maxTokens")
    # The parent used 400 before delegating, the child 10: 1000 - 410 left for the child.
    assert held["imposedOnRunId"] == run_id and held["imposedBy"].startswith("agent 'parent-")
    assert held["used"] == 10 and held["remaining"] == 590 and held["limit"] == 600
    assert limit(run, "maxTokens")["remaining"] == 590


async def test_max_tree_runs_across_turns_refuses_children_beyond_it(gql, workspace, worker) -> None:
    leaf, _ = await agent(gql, workspace.admin, "leaf", [{"final": "leaf"}])
    turn = {"calls": [delegate(leaf, f"t{i}") for i in range(3)]}
    _, root_id = await agent(gql, workspace.admin, "fan", [turn, turn, {"final": "done"}])
    run_id = await start(gql, workspace.operator, root_id, budget={"maxTreeRuns": 5})
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=30))["status"] == "SUCCEEDED"
    run = await tree(gql, workspace.viewer, run_id)
    assert len(run["descendants"]) == 4  # the root counts: 5 runs in all
    refused = [s for s in run["steps"] if s["errorCode"] == "BUDGET_EXCEEDED"]
    assert len(refused) == 2 and "maxTreeRuns 5 set by the caller" in str(refused[0]["result"])
    assert run["treeUsage"]["runs"] == 5
    assert limit(run, "maxTreeRuns") | {"imposedOnRunId": None} == {
        "name": "maxTreeRuns", "limit": 5.0, "used": 5.0, "remaining": 0.0, "imposedBy": "the caller",
        "imposedOnRunId": None,
    }  # fmt: skip


async def test_siblings_racing_for_the_last_of_a_budget_never_overspend(gql, workspace, worker) -> None:
    # Five children run at once; each delegates twice. The root's subtree may hold 10 runs:
    # the root, its five children, and only four of the ten grandchildren asked for.
    leaf, _ = await agent(gql, workspace.admin, "leaf", [{"final": "leaf"}])
    mid, _ = await agent(
        gql, workspace.admin, "mid", [{"calls": [delegate(leaf, "a"), delegate(leaf, "b")]}, {"final": "m"}]
    )
    _, root_id = await agent(
        gql, workspace.admin, "racer",
        [{"calls": [delegate(mid, f"m{i}") for i in range(5)]}, {"final": "done"}],
        budget={"maxTreeRuns": 10},
    )  # fmt: skip
    run_id = await start(gql, workspace.operator, root_id)
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=60))["status"] == "SUCCEEDED"
    run = await tree(gql, workspace.viewer, run_id)
    assert len(run["descendants"]) == 9 and run["treeUsage"]["runs"] == 10
    mids = [d for d in run["descendants"] if d["parent"]["id"] == run_id]
    assert len(mids) == 5 and sum(m["usage"]["children"] for m in mids) == 4
    assert sum(m["treeUsage"]["runs"] for m in mids) == 9


async def test_bad_budgets_are_refused_naming_the_field(gql, workspace) -> None:
    create = "mutation($input: CreateAgentInput!) { createAgent(input: $input) { id } }"
    model = {"provider": "scripted", "steps": []}
    for budget, field in [
        ({"maxTokens": -1}, "budget.maxTokens"),
        ({"maxTokens": 0}, "budget.maxTokens"),
        ({"maxTurns": "many"}, "budget.maxTurns"),
        ({"maxTurns": 10**9}, "budget.maxTurns"),
        ({"maxTurns": 1.5}, "budget.maxTurns"),
        ({"maxSpeed": 3}, "budget.maxSpeed"),
        ({"maxCostUsd": 1.0}, "budget.maxCostUsd"),  # the scripted model has no price
        ([1], "budget"),
    ]:
        err = await gql.error(create, {"input": {"name": name("bad"), "model": model, "budget": budget}},
                              token=workspace.admin)  # fmt: skip
        assert err["extensions"]["code"] == "VALIDATION_FAILED", (budget, err)
        assert err["extensions"]["field"] == field, (budget, err)
    _, agent_id = await agent(gql, workspace.admin, "strict", [], budget={"maxTokens": 100})
    for budget, field in [({"maxTokens": 101}, "budget.maxTokens"), ({"maxTurns": 51}, "budget.maxTurns")]:
        err = await gql.error(START, {"agentId": agent_id, "budget": budget}, token=workspace.operator)
        assert err["extensions"]["code"] == "VALIDATION_FAILED" and err["extensions"]["field"] == field, err
        assert "may only tighten" in err["message"]
    runs = await gql.ok("query { runs(first: 5) { edges { node { id } } } }", token=workspace.viewer)
    assert runs["runs"]["edges"] == []  # nothing half-written


async def test_max_wall_s_ends_a_run_waiting_for_approval(gql, workspace, worker, runtime) -> None:
    from app.services.sweeper import sweep

    ask = [{"call": "memory.search", "args": {"query": "wait"}}, {"final": "never"}]
    _, agent_id = await agent(
        gql, workspace.admin, "slow", ask, budget={"maxWallS": 4},
        policy={"rules": [{"tool": "memory.search", "decision": "REQUIRE_APPROVAL"}]},
    )  # fmt: skip
    run_id = await start(gql, workspace.operator, agent_id)
    await wait_run(gql, workspace.viewer, run_id, statuses="WAITING_APPROVAL", timeout_s=20)
    await asyncio.sleep(4.2)
    # Nothing but the sweeper notices a waiting run's time (the worker's sweeper loop may
    # have been first: then this sweep finds nothing left to end).
    await sweep(runtime)
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=10)
    assert run["status"] == "FAILED" and run["pendingApprovals"] == []
    assert run["steps"][0]["status"] == "CANCELLED"  # it had started: the sweeper ended it while it waited
    full = await tree(gql, workspace.viewer, run_id)
    assert full["errorCode"] == "BUDGET_EXCEEDED" and "maxWallS 4 set by agent 'slow-" in full["error"]


async def test_runs_show_prints_usage_and_budget(gql, workspace, worker, enverif) -> None:
    import json

    from tests.support.cli import in_thread

    steps = [{"call": "memory.search", "args": {"query": "a"}, "usage": spend(20, 10)}, {"final": "ok"}]
    _, agent_id = await agent(gql, workspace.admin, "shown", steps)
    run_id = await start(gql, workspace.operator, agent_id, budget={"maxTokens": 500})
    assert (await wait_run(gql, workspace.viewer, run_id, timeout_s=20))["status"] == "SUCCEEDED"
    shown = await in_thread(enverif, "runs", "show", run_id, "--workspace", workspace.name, "--json")
    run = json.loads(shown.stdout)["run"]
    assert run["usage"]["inputTokens"] == 20 and run["tree_usage"]["runs"] == 1
    [tokens] = [b for b in run["budget"] if b["name"] == "maxTokens"]
    assert (tokens["used"], tokens["remaining"], tokens["imposed_by"]) == (30, 470, "the caller")
    human = await in_thread(enverif, "runs", "show", run_id, "--workspace", workspace.name)
    assert "usage     30 tokens" in human.stdout
    assert "budget    maxTokens 30/500 (470 left, set by the caller)" in human.stdout
