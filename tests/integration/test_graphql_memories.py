"""Memories through GraphQL: CRUD, revision history, search, and refused writes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.graphql import CREATE_MEMORY, create_agent, create_memory, gid, pk, unique
from tests.support.trees import Rows

UPDATE_MEMORY = """
mutation($id: ID!, $input: MemoryPatch!) {
  updateMemory(id: $id, input: $input) { id key value tags importance updatedAt }
}
"""
DELETE_MEMORY = "mutation($id: ID!) { deleteMemory(id: $id) }"
MEMORY = """
query($id: ID!) {
  node(id: $id) {
    ... on Memory {
      id key value tags importance createdAt updatedAt lastUsedAt agent { id } sourceRun { id }
      revisions { action key oldValue newValue byOperator apiTokenId sourceRun { id } at }
    }
  }
}
"""
SEARCH = """
query($agentId: ID!, $query: String, $tags: [String!]) {
  memories(agentId: $agentId, query: $query, tags: $tags) { edges { node { key } } }
}
"""


async def test_create_update_delete_with_revisions(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = await create_memory(
        gql,
        workspace.operator,
        agent["id"],
        key="favourite",
        value="blue",
        tags=["prefs", "prefs"],
        importance=0.8,
    )
    assert created["tags"] == ["prefs"]
    assert created["importance"] == 0.8
    assert created["sourceRun"] is None

    updated = (
        await gql.ok(
            UPDATE_MEMORY,
            {"id": created["id"], "input": {"value": "green", "tags": []}},
            token=workspace.operator,
        )
    )["updateMemory"]
    assert updated["value"] == "green"
    assert updated["key"] == "favourite"  # omitted: kept
    assert updated["tags"] == []
    assert updated["importance"] == 0.8

    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert memory["agent"]["id"] == agent["id"]
    assert [(r["action"], r["oldValue"], r["newValue"], r["byOperator"]) for r in memory["revisions"]] == [
        ("CREATE", None, "blue", True),
        ("UPDATE", "blue", "green", True),
    ]
    # Which token: the operator's (the id an admin sees in apiTokens).
    operator_token = (
        await gql.ok("{ apiTokens(first: 50) { edges { node { id role } } } }", token=workspace.admin)
    )["apiTokens"]["edges"]
    operator_ids = {e["node"]["id"] for e in operator_token if e["node"]["role"].lower() == "operator"}
    assert {r["apiTokenId"] for r in memory["revisions"]} <= operator_ids
    assert all(r["apiTokenId"] for r in memory["revisions"])

    deleted = await gql.ok(DELETE_MEMORY, {"id": created["id"]}, token=workspace.operator)
    assert deleted["deleteMemory"] == created["id"]
    assert (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"] is None
    error = await gql.error(DELETE_MEMORY, {"id": created["id"]}, token=workspace.operator)
    assert error["extensions"]["code"] == "NOT_FOUND"


async def test_delete_keeps_a_revision(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    from sqlalchemy import select

    from app.db import orm

    agent = await create_agent(gql, workspace.admin)
    created = await create_memory(gql, workspace.operator, agent["id"], value="to be forgotten")
    await gql.ok(DELETE_MEMORY, {"id": created["id"]}, token=workspace.operator)
    async with sessionmaker() as session:
        rows = (
            await session.scalars(
                select(orm.MemoryRevision)
                .where(
                    orm.MemoryRevision.memory_id == pk(created["id"]),
                    orm.MemoryRevision.agent_id == pk(agent["id"]),
                )
                .order_by(orm.MemoryRevision.id)
            )
        ).all()
    assert [(r.action, r.old_value, r.new_value) for r in rows] == [
        ("CREATE", None, "to be forgotten"),
        ("DELETE", "to be forgotten", None),
    ]
    assert all(r.token_id is not None for r in rows)


async def test_a_new_memory_never_shows_a_deleted_ones_history(gql: Any, workspace: Any) -> None:
    # On SQLite the next insert can reuse a deleted newest row's id.
    agent = await create_agent(gql, workspace.admin)
    old = await create_memory(gql, workspace.operator, agent["id"], value="old")
    await gql.ok(DELETE_MEMORY, {"id": old["id"]}, token=workspace.operator)
    new = await create_memory(gql, workspace.operator, agent["id"], value="new")
    memory = (await gql.ok(MEMORY, {"id": new["id"]}, token=workspace.viewer))["node"]
    assert [(r["action"], r["newValue"]) for r in memory["revisions"]] == [("CREATE", "new")]


async def test_source_run_is_shown_and_cleared_by_an_operator_write(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    from app.db import orm

    agent = await create_agent(gql, workspace.admin)
    run = await Rows(sessionmaker, workspace.id).run(pk(agent["id"]))
    created = await create_memory(gql, workspace.operator, agent["id"])
    async with sessionmaker() as session, session.begin():
        row = await session.get_one(orm.Memory, pk(created["id"]))
        row.source_run_id = run.id
    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert memory["sourceRun"] == {"id": gid("Run", run.id)}
    await gql.ok(UPDATE_MEMORY, {"id": created["id"], "input": {"importance": 0.1}}, token=workspace.operator)
    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert memory["sourceRun"] is None


async def test_full_text_search_and_tags(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    other_agent = await create_agent(gql, workspace.admin)
    await create_memory(gql, workspace.operator, agent["id"], key="Home city", value="Berlin", tags=["place"])
    await create_memory(
        gql, workspace.operator, agent["id"], key="pet", value="A cat named BERLINER", tags=["pet"]
    )
    await create_memory(
        gql, workspace.operator, agent["id"], key="100% sure", value="xyz", tags=["place", "pet"]
    )
    await create_memory(gql, workspace.operator, other_agent["id"], key="berlin elsewhere", value="berlin")

    async def keys(**variables: Any) -> list[str]:
        data = await gql.ok(SEARCH, {"agentId": agent["id"], **variables}, token=workspace.viewer)
        return [e["node"]["key"] for e in data["memories"]["edges"]]

    # Words match as prefixes, case-insensitively, in key, value and tags; never another agent's.
    assert sorted(await keys(query="berlin")) == ["Home city", "pet"]
    assert await keys(query="CITY") == ["Home city"]
    assert await keys(query="sure") == ["100% sure"]
    assert sorted(await keys(query="place")) == ["100% sure", "Home city"]  # tags are searched too
    assert await keys(query="%") == []  # punctuation only: no words, no match (and no wildcard)
    assert await keys(query='berlin" OR "x') == await keys(query="berlin x")  # no operator syntax
    assert await keys(query="nothing matches this") == []
    assert await keys(tags=["place"]) == ["100% sure", "Home city"]  # no query: newest first
    assert await keys(tags=["place", "pet"]) == ["100% sure"]
    assert await keys(tags=["nope"]) == []
    assert await keys(query="berlin", tags=["pet"]) == ["pet"]
    # The index follows every change: an edited value, a deleted memory.
    home_id = (
        await gql.ok(
            'query($a: ID!) { memories(agentId: $a, query: "city") { edges { node { id } } } }',
            {"a": agent["id"]},
            token=workspace.viewer,
        )
    )["memories"]["edges"][0]["node"]["id"]
    await gql.ok(UPDATE_MEMORY, {"id": home_id, "input": {"value": "Hamburg"}}, token=workspace.operator)
    assert sorted(await keys(query="berlin")) == ["pet"]
    assert await keys(query="hamburg") == ["Home city"]
    await gql.ok(DELETE_MEMORY, {"id": home_id}, token=workspace.operator)
    assert await keys(query="hamburg") == []
    # The same search through Agent.memories.
    data = await gql.ok(
        'query($id: ID!) { agent(id: $id) { memories(query: "cat") { edges { node { key } } } } }',
        {"id": agent["id"]},
        token=workspace.viewer,
    )
    assert [e["node"]["key"] for e in data["agent"]["memories"]["edges"]] == ["pet"]


async def test_search_ranks_by_relevance_then_importance_and_pages(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    # Equal text, different importance: the important one first.
    await create_memory(
        gql, workspace.operator, agent["id"], key="k-low", value="quarterly churn report", importance=0.1
    )
    await create_memory(
        gql, workspace.operator, agent["id"], key="k-high", value="quarterly churn report", importance=0.9
    )
    await create_memory(
        gql, workspace.operator, agent["id"], key="k-mid", value="quarterly churn report", importance=0.5
    )
    # A far better text match beats importance.
    await create_memory(
        gql,
        workspace.operator,
        agent["id"],
        key="churn",
        value="churn churn churn: churn by cohort",
        importance=0.0,
    )
    query = """
    query($agentId: ID!, $q: String, $after: String) {
      memories(agentId: $agentId, query: $q, first: 2, after: $after) {
        edges { node { key lastUsedAt } cursor } pageInfo { hasNextPage endCursor }
      }
    }
    """
    first = (await gql.ok(query, {"agentId": agent["id"], "q": "quarterly"}, token=workspace.viewer))[
        "memories"
    ]
    assert [e["node"]["key"] for e in first["edges"]] == ["k-high", "k-mid"]
    assert first["pageInfo"]["hasNextPage"] is True
    rest = (
        await gql.ok(
            query,
            {"agentId": agent["id"], "q": "quarterly", "after": first["pageInfo"]["endCursor"]},
            token=workspace.viewer,
        )
    )["memories"]
    assert [e["node"]["key"] for e in rest["edges"]] == ["k-low"]
    assert rest["pageInfo"]["hasNextPage"] is False
    churn = (await gql.ok(query, {"agentId": agent["id"], "q": "churn"}, token=workspace.viewer))["memories"]
    assert churn["edges"][0]["node"]["key"] == "churn"
    # Reviewing is not using: operators' searches leave lastUsedAt alone.
    assert all(e["node"]["lastUsedAt"] is None for e in first["edges"] + churn["edges"])


async def test_keys_are_exact_and_up_to_255_characters(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    upper = await create_memory(gql, workspace.operator, agent["id"], key="Plan", value="upper")
    lower = await create_memory(gql, workspace.operator, agent["id"], key="plan", value="lower")
    assert upper["id"] != lower["id"]
    long_key = "k" * 255
    created = await create_memory(gql, workspace.operator, agent["id"], key=long_key, value="long")
    assert created["key"] == long_key
    memory = (await gql.ok(MEMORY, {"id": upper["id"]}, token=workspace.viewer))["node"]
    assert (memory["key"], memory["value"]) == ("Plan", "upper")


@pytest.mark.parametrize(
    ("memory_input", "field", "secret"),
    [
        ({"key": "note", "value": "deploy with token=" + "abc123"}, "value", "abc123"),
        ({"key": "password", "value": "hunter2"}, "value", "hunter2"),
        ({"key": "note", "value": "ok", "tags": ["Cookie: sid=" + "x9f3"]}, "tags", "x9f3"),
        ({"key": "gh" + "p_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "value": "x"}, "key", "a1B2c3D4"),
    ],
)
async def test_credentials_are_rejected(
    gql: Any, workspace: Any, memory_input: dict[str, Any], field: str, secret: str
) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE_MEMORY, {"agentId": agent["id"], "input": memory_input}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "CREDENTIAL_REJECTED", "field": field}
    assert "rule:" in error["message"]
    assert secret not in error["message"]
    data = await gql.ok(SEARCH, {"agentId": agent["id"]}, token=workspace.viewer)
    assert data["memories"]["edges"] == []


async def test_update_is_screened_as_the_memory_would_be_stored(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = await create_memory(gql, workspace.operator, agent["id"], key="note", value="tulip42")
    # Renaming the key to a credential name makes the stored one-word value a password.
    error = await gql.error(
        UPDATE_MEMORY, {"id": created["id"], "input": {"key": "password"}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "CREDENTIAL_REJECTED", "field": "value"}
    error = await gql.error(
        UPDATE_MEMORY,
        {"id": created["id"], "input": {"value": "Authorization: Bearer " + "q" * 30}},
        token=workspace.operator,
    )
    assert error["extensions"]["code"] == "CREDENTIAL_REJECTED"
    assert "q" * 30 not in error["message"]
    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert (memory["key"], memory["value"]) == ("note", "tulip42")
    assert [r["action"] for r in memory["revisions"]] == ["CREATE"]


async def test_duplicate_key_is_a_conflict(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    first = await create_memory(gql, workspace.operator, agent["id"], key="k1")
    second = await create_memory(gql, workspace.operator, agent["id"], key="k2")
    error = await gql.error(
        CREATE_MEMORY,
        {"agentId": agent["id"], "input": {"key": "k1", "value": "v"}},
        token=workspace.operator,
    )
    assert error["extensions"] == {"code": "CONFLICT", "field": "key"}
    error = await gql.error(
        UPDATE_MEMORY, {"id": second["id"], "input": {"key": "k1"}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "CONFLICT", "field": "key"}
    # The same key for another agent is fine.
    other = await create_agent(gql, workspace.admin)
    await create_memory(gql, workspace.operator, other["id"], key="k1")
    memory = (await gql.ok(MEMORY, {"id": first["id"]}, token=workspace.viewer))["node"]
    assert [r["action"] for r in memory["revisions"]] == ["CREATE"]


@pytest.mark.parametrize(
    ("memory_input", "field"),
    [
        ({"key": "", "value": "v"}, "key"),
        ({"key": "k" * 256, "value": "v"}, "key"),
        ({"key": "k", "value": ""}, "value"),
        ({"key": "k", "value": "v" * 16_385}, "value"),  # ENVERIF_MAX_MEMORY_CHARS
        ({"key": "k", "value": "v", "importance": 1.5}, "importance"),
        ({"key": "k", "value": "v", "importance": -0.1}, "importance"),
        ({"key": "k", "value": "v", "tags": ["t"] * 0 + [f"t{i}" for i in range(33)]}, "tags"),
        ({"key": "k", "value": "v", "tags": ["x" * 65]}, "tags"),
        ({"key": "k", "value": "v", "tags": [" "]}, "tags"),
        # Control characters and edge whitespace in keys and tags (NUL once stored; MariaDB
        # took "dup" and "dup " for one key, SQLite for two).
        ({"key": "dup\u0000", "value": "v"}, "key"),
        ({"key": "a\nb", "value": "v"}, "key"),
        ({"key": "dup ", "value": "v"}, "key"),
        ({"key": " dup", "value": "v"}, "key"),
        ({"key": "k", "value": "v", "tags": ["t\u0000"]}, "tags"),
        ({"key": "k", "value": "v", "tags": ["t "]}, "tags"),
    ],
)
async def test_create_validation(gql: Any, workspace: Any, memory_input: dict[str, Any], field: str) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE_MEMORY, {"agentId": agent["id"], "input": memory_input}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
    data = await gql.ok(SEARCH, {"agentId": agent["id"]}, token=workspace.viewer)
    assert data["memories"]["edges"] == []


async def test_a_key_with_a_trailing_space_is_refused_on_every_database(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    memory = await create_memory(gql, workspace.operator, agent["id"], key="dup", value="one")
    for key in ("dup ", "dup\t", "dup\u0000"):
        error = await gql.error(
            UPDATE_MEMORY, {"id": memory["id"], "input": {"key": key}}, token=workspace.operator
        )
        assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "key"}, key
    data = await gql.ok(SEARCH, {"agentId": agent["id"]}, token=workspace.viewer)
    assert [e["node"]["key"] for e in data["memories"]["edges"]] == ["dup"]


async def test_failed_update_changes_nothing_and_writes_no_revision(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    created = await create_memory(gql, workspace.operator, agent["id"], value="original", importance=0.3)
    error = await gql.error(
        UPDATE_MEMORY,
        {"id": created["id"], "input": {"value": "changed", "importance": 1.5}},
        token=workspace.operator,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "importance"}
    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert memory["value"] == "original"
    assert memory["importance"] == 0.3
    assert [r["action"] for r in memory["revisions"]] == ["CREATE"]


async def test_viewer_cannot_write_memories(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    error = await gql.error(
        CREATE_MEMORY,
        {"agentId": agent["id"], "input": {"key": unique(), "value": "v"}},
        token=workspace.viewer,
    )
    assert error["extensions"]["code"] == "FORBIDDEN"
    created = await create_memory(gql, workspace.operator, agent["id"])
    for mutation, variables in [
        (UPDATE_MEMORY, {"id": created["id"], "input": {"value": "x"}}),
        (DELETE_MEMORY, {"id": created["id"]}),
    ]:
        error = await gql.error(mutation, variables, token=workspace.viewer)
        assert error["extensions"]["code"] == "FORBIDDEN"
    memory = (await gql.ok(MEMORY, {"id": created["id"]}, token=workspace.viewer))["node"]
    assert memory["value"] == "some value"


async def test_memories_of_an_unknown_agent_is_not_found(gql: Any, workspace: Any) -> None:
    error = await gql.error(SEARCH, {"agentId": gid("Agent", 987654321)}, token=workspace.viewer)
    assert error["extensions"]["code"] == "NOT_FOUND"


async def test_a_deleted_memory_id_is_never_given_to_another_memory(gql: Any, workspace: Any) -> None:
    """Global ids (and the revision history keyed by them) must not come to mean another row,
    on SQLite too (AUTOINCREMENT)."""
    from tests.support.graphql import create_agent, create_memory

    agent = await create_agent(gql, workspace.admin)
    first = await create_memory(gql, workspace.operator, agent["id"], key="k1", value="v1")
    await gql.ok(DELETE_MEMORY, {"id": first["id"]}, token=workspace.operator)
    second = await create_memory(gql, workspace.operator, agent["id"], key="k1", value="v2")
    assert second["id"] != first["id"]


async def test_revisions_record_key_tag_and_importance_changes(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    memory = await create_memory(
        gql, workspace.operator, agent["id"], key="old", value="v", tags=["a"], importance=0.5
    )
    patch = {"key": "new", "tags": ["b", "c"], "importance": 0.9}
    await gql.ok(UPDATE_MEMORY, {"id": memory["id"], "input": patch}, token=workspace.operator)
    history = """query($id: ID!) { node(id: $id) { ... on Memory { revisions {
        action key oldKey oldTags newTags oldImportance newImportance } } } }"""
    revisions = (await gql.ok(history, {"id": memory["id"]}, token=workspace.viewer))["node"]["revisions"]
    assert revisions == [
        {"action": "CREATE", "key": "old", "oldKey": None, "oldTags": None, "newTags": ["a"],
         "oldImportance": None, "newImportance": 0.5},
        {"action": "UPDATE", "key": "new", "oldKey": "old", "oldTags": ["a"], "newTags": ["b", "c"],
         "oldImportance": 0.5, "newImportance": 0.9},
    ]  # fmt: skip
