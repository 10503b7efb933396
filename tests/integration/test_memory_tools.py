"""The memory tools end to end: scripted agents on a real worker, driven and inspected
through GraphQL (runs, approvals, memories, revisions)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.db import orm
from tests.support.graphql import create_memory, gid, pk
from tests.support.runs import DECIDE, PENDING_APPROVALS, scripted_agent, start_run, wait_run

UPDATE_AGENT = """
mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id } }
"""
UPDATE_MEMORY = """
mutation($id: ID!, $input: MemoryPatch!) { updateMemory(id: $id, input: $input) { id value } }
"""
RUN = """
query($id: ID!) {
  run(id: $id) {
    status result
    injectedMemories { key value }
    steps { tool status result decision }
  }
}
"""
MEMORIES = """
query($agentId: ID!, $query: String) {
  memories(agentId: $agentId, query: $query, first: 20) {
    edges { node {
      id key value tags importance lastUsedAt sourceRun { id }
      revisions { action oldValue newValue byOperator sourceRun { id } }
    } }
  }
}
"""


async def _memories(gql: Any, token: str, agent_id: str, query: str | None = None) -> dict[str, Any]:
    data = await gql.ok(MEMORIES, {"agentId": agent_id, "query": query}, token=token)
    return {e["node"]["key"]: e["node"] for e in data["memories"]["edges"]}


async def _events(sessionmaker: Any, run_id: str, type: str) -> list[dict[str, Any]]:
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(orm.RunEvent)
            .where(orm.RunEvent.run_id == pk(run_id), orm.RunEvent.type == type)
            .order_by(orm.RunEvent.seq)
        )
        return [dict(r.payload or {}) for r in rows]


async def test_an_agent_remembers_and_its_next_run_finds_the_memory(
    gql: Any, workspace: Any, worker: Any, sessionmaker: Any
) -> None:
    steps = [
        {"call": "memory.search", "args": {"query": "{{ input.topic }}"}},
        {
            "call": "memory.remember",
            "args": {
                "key": "icp-decision",
                "value": "{{ input.decision }}",
                "tags": ["decision", "icp"],
                "importance": 0.9,
            },
        },
        {"call": "memory.search", "args": {"query": "fintech", "tags": ["decision"]}},
        {"final": {"injected": "{{ memories | map(attribute='key') | list }}", "results": "{{ results }}"}},
    ]
    agent_id = await scripted_agent(gql, workspace.admin, steps=steps, tools=["memory.*"])
    await create_memory(
        gql,
        workspace.operator,
        agent_id,
        key="icp-scope",
        value="ICP scope: European fintech",
        importance=0.5,
    )

    first_id = await start_run(
        gql,
        workspace.operator,
        agent_id,
        {"topic": "icp scope", "decision": "Target fintech with 50-500 staff"},
    )
    first = await wait_run(gql, workspace.operator, first_id)
    assert first["status"] == "SUCCEEDED", first
    search, remember, search_again = first["result"]["results"]
    assert search == {
        "memories": [
            {"key": "icp-scope", "value": "ICP scope: European fintech", "tags": [], "importance": 0.5}
        ]
    }
    assert remember == {"key": "icp-decision", "created": True}
    assert [m["key"] for m in search_again["memories"]] == ["icp-decision"]
    assert first["result"]["injected"] == ["icp-scope"]
    assert await _events(sessionmaker, first_id, "MEMORY_WRITTEN") == [
        {"key": "icp-decision", "action": "CREATE", "created": True}
    ]

    stored = await _memories(gql, workspace.viewer, agent_id)
    decision = stored["icp-decision"]
    assert (decision["value"], decision["tags"], decision["importance"]) == (
        "Target fintech with 50-500 staff",
        ["decision", "icp"],
        0.9,
    )
    assert decision["sourceRun"] == {"id": first_id}
    assert decision["lastUsedAt"] is not None  # the second search returned it

    # An operator corrects it; the history shows both, with who did it.
    await gql.ok(
        UPDATE_MEMORY,
        {"id": decision["id"], "input": {"value": "Target fintech, 50-1000 staff"}},
        token=workspace.operator,
    )

    # The second run starts with the decision injected and finds it by search; its own
    # remember (same key) updates the memory instead of adding one.
    second_id = await start_run(
        gql,
        workspace.operator,
        agent_id,
        {"topic": "decision", "decision": "Target fintech, 50-1000 staff, EU"},
    )
    second = await wait_run(gql, workspace.operator, second_id)
    assert second["status"] == "SUCCEEDED", second
    assert sorted(second["result"]["injected"]) == ["icp-decision", "icp-scope"]
    found = [m["key"] for m in second["result"]["results"][0]["memories"]]
    assert found[0] == "icp-decision"
    assert second["result"]["results"][1] == {"key": "icp-decision", "created": False}
    run = (await gql.ok(RUN, {"id": second_id}, token=workspace.viewer))["run"]
    assert {m["key"] for m in run["injectedMemories"]} == {"icp-decision", "icp-scope"}

    history = (await _memories(gql, workspace.viewer, agent_id))["icp-decision"]["revisions"]
    assert [(r["action"], r["byOperator"], r["sourceRun"]) for r in history] == [
        ("CREATE", False, {"id": first_id}),
        ("UPDATE", True, None),
        ("UPDATE", False, {"id": second_id}),
    ]
    assert [r["newValue"] for r in history] == [
        "Target fintech with 50-500 staff",
        "Target fintech, 50-1000 staff",
        "Target fintech, 50-1000 staff, EU",
    ]


async def test_injection_respects_the_budget(gql: Any, workspace: Any, worker: Any) -> None:
    agent_id = await scripted_agent(
        gql,
        workspace.admin,
        steps=[{"final": "{{ memories | map(attribute='key') | list }}"}],
        tools=["memory.*"],
    )
    await gql.ok(
        UPDATE_AGENT,
        {"id": agent_id, "input": {"memoryBudget": {"maxItems": 2, "maxChars": 40}}},
        token=workspace.admin,
    )
    await create_memory(gql, workspace.operator, agent_id, key="a", value="short fact", importance=0.2)
    await create_memory(gql, workspace.operator, agent_id, key="b", value="another fact", importance=0.9)
    await create_memory(gql, workspace.operator, agent_id, key="c", value="x" * 60, importance=1.0)
    await create_memory(gql, workspace.operator, agent_id, key="d", value="third fact", importance=0.5)
    run = await wait_run(gql, workspace.operator, await start_run(gql, workspace.operator, agent_id))
    assert run["result"] == ["b", "d"]


async def test_refused_writes_are_results_the_model_sees_and_store_nothing(
    gql: Any, workspace: Any, worker: Any, sessionmaker: Any
) -> None:
    secret = "ghp" + "_" + "Zx81Qm27Lw90Rt46Yp13Nc58Vb02Kd67Hs4J"
    steps = [
        {"call": "memory.remember", "args": {"key": "crm", "value": "CRM token " + secret}},
        {"call": "memory.remember", "args": {"key": "db_password", "value": "tulip42"}},
        {"call": "memory.remember", "args": {"key": "k", "value": "v", "importance": 2}},
        {"call": "memory.remember", "args": {"key": "", "value": "v"}},
        {"call": "memory.remember", "args": {"key": "k", "value": "v", "tags": ["t" * 65]}},
        {"call": "memory.search", "args": {"limit": 0}},
        {"call": "memory.remember", "args": {"key": "k", "value": "v", "colour": "red"}},
        {"call": "memory.remember", "args": {"key": "k" * 256, "value": "v"}},
        {"call": "memory.remember", "args": {"key": "k", "value": "v" * 16_385}},
        {"call": "memory.remember", "args": {"key": "k", "value": "v", "tags": [f"t{i}" for i in range(33)]}},
        {"final": "{{ results }}"},
    ]
    agent_id = await scripted_agent(gql, workspace.admin, steps=steps, tools=["memory.*"])
    run_id = await start_run(gql, workspace.operator, agent_id)
    run = await wait_run(gql, workspace.operator, run_id)
    assert run["status"] == "SUCCEEDED", run
    errors = [r["error"] for r in run["result"]]
    assert [e["code"] for e in errors] == [
        "CREDENTIAL_REJECTED",
        "CREDENTIAL_REJECTED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
        "VALIDATION_FAILED",
    ]
    assert "GitHub" in errors[0]["message"] and secret not in errors[0]["message"]
    assert "tulip42" not in errors[1]["message"]
    fields = ["importance", "key", "tags", "limit", "colour", "key", "value", "tags"]
    for error, field in zip(errors[2:], fields, strict=True):
        assert field in error["message"]
    assert await _memories(gql, workspace.viewer, agent_id) == {}
    assert await _events(sessionmaker, run_id, "MEMORY_WRITTEN") == []
    async with sessionmaker() as session:
        assert (
            await session.scalar(
                select(orm.MemoryRevision).where(orm.MemoryRevision.agent_id == pk(agent_id))
            )
            is None
        )


async def test_forget_waits_for_an_operator(gql: Any, workspace: Any, worker: Any, sessionmaker: Any) -> None:
    steps = [
        {"call": "memory.forget", "args": {"key": "obsolete"}},
        {"call": "memory.forget", "args": {"key": "never-existed"}},
        {"final": "{{ results }}"},
    ]
    # Even an agent whose policy allows everything cannot forget silently (DESTRUCTIVE clamp).
    agent_id = await scripted_agent(
        gql, workspace.admin, steps=steps, tools=["memory.*"], policy={"default": "ALLOW"}
    )
    await create_memory(gql, workspace.operator, agent_id, key="obsolete", value="old plan")
    run_id = await start_run(gql, workspace.operator, agent_id)
    for _ in range(2):
        await wait_run(gql, workspace.operator, run_id, "WAITING_APPROVAL")
        pending = await gql.ok(PENDING_APPROVALS, token=workspace.operator)
        mine = [e["node"] for e in pending["approvals"]["edges"] if e["node"]["run"]["id"] == run_id]
        assert [a["tool"] for a in mine] == ["memory.forget"]
        await gql.ok(DECIDE, {"id": mine[0]["id"], "approve": True}, token=workspace.operator)
    run = await wait_run(gql, workspace.operator, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == [{"key": "obsolete", "deleted": True}, {"key": "never-existed", "deleted": False}]
    assert await _memories(gql, workspace.viewer, agent_id) == {}
    assert await _events(sessionmaker, run_id, "MEMORY_WRITTEN") == [
        {"key": "obsolete", "action": "DELETE", "deleted": True}
    ]
    async with sessionmaker() as session:
        revisions = list(
            await session.scalars(
                select(orm.MemoryRevision)
                .where(orm.MemoryRevision.agent_id == pk(agent_id))
                .order_by(orm.MemoryRevision.id)
            )
        )
    assert [(r.action, r.run_id is not None, r.token_id is not None) for r in revisions] == [
        ("CREATE", False, True),
        ("DELETE", True, False),
    ]
    assert gid("Run", revisions[-1].run_id or 0) == run_id
