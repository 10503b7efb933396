"""Cursor connections: keyset pages, newest first, page-size cap, bad cursors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.graphql import create_agent, create_memory, pk
from tests.support.trees import Rows

AGENTS_PAGE = """
query($first: Int, $after: String) {
  agents(first: $first, after: $after) {
    edges { cursor node { id name } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""


async def _walk(
    gql: Any, token: str, query: str, field: str, first: int, **variables: Any
) -> list[list[str]]:
    pages: list[list[str]] = []
    after = None
    while True:
        data = (await gql.ok(query, {"first": first, "after": after, **variables}, token=token))[field]
        pages.append([e["node"]["id"] for e in data["edges"]])
        info = data["pageInfo"]
        assert info["hasPreviousPage"] is (after is not None)
        if data["edges"]:
            assert info["startCursor"] == data["edges"][0]["cursor"]
            assert info["endCursor"] == data["edges"][-1]["cursor"]
        if not info["hasNextPage"]:
            return pages
        after = info["endCursor"]


async def test_agents_pages_cover_everything_once_newest_first(gql: Any, workspace: Any) -> None:
    created = [(await create_agent(gql, workspace.admin))["id"] for _ in range(7)]
    pages = await _walk(gql, workspace.viewer, AGENTS_PAGE, "agents", first=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [i for p in pages for i in p] == list(reversed(created))


async def test_exact_multiple_ends_without_an_empty_page(gql: Any, workspace: Any) -> None:
    for _ in range(4):
        await create_agent(gql, workspace.admin)
    pages = await _walk(gql, workspace.viewer, AGENTS_PAGE, "agents", first=2)
    assert [len(p) for p in pages] == [2, 2]


async def test_rows_added_between_pages_do_not_shift_later_pages(gql: Any, workspace: Any) -> None:
    created = [(await create_agent(gql, workspace.admin))["id"] for _ in range(4)]
    first = (await gql.ok(AGENTS_PAGE, {"first": 2}, token=workspace.viewer))["agents"]
    await create_agent(gql, workspace.admin)  # newer than everything: lands before page one
    after = first["pageInfo"]["endCursor"]
    second = (await gql.ok(AGENTS_PAGE, {"first": 2, "after": after}, token=workspace.viewer))["agents"]
    assert [e["node"]["id"] for e in second["edges"]] == [created[1], created[0]]


async def test_empty_connection(gql: Any, workspace: Any) -> None:
    data = (await gql.ok(AGENTS_PAGE, {}, token=workspace.viewer))["agents"]
    assert data == {
        "edges": [],
        "pageInfo": {"hasNextPage": False, "hasPreviousPage": False, "startCursor": None, "endCursor": None},
    }


async def test_first_zero_says_whether_there_is_anything(gql: Any, workspace: Any) -> None:
    await create_agent(gql, workspace.admin)
    data = (await gql.ok(AGENTS_PAGE, {"first": 0}, token=workspace.viewer))["agents"]
    assert data["edges"] == []
    assert data["pageInfo"]["hasNextPage"] is True


@pytest.mark.parametrize("first", [101, -1, 1_000_000])
async def test_first_outside_the_cap_is_refused(gql: Any, workspace: Any, first: int) -> None:
    error = await gql.error(AGENTS_PAGE, {"first": first}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "first"}
    assert "100" in error["message"]


async def test_first_at_the_cap_is_fine(gql: Any, workspace: Any) -> None:
    await gql.ok(AGENTS_PAGE, {"first": 100}, token=workspace.viewer)


@pytest.mark.parametrize("after", ["garbage", "", "QWdlbnQ6MQ", "Y3Vyc29yOi0x", "Y3Vyc29yOmFiYw", "!!!"])
async def test_bad_cursor_is_a_validation_error(gql: Any, workspace: Any, after: str) -> None:
    # QWdlbnQ6MQ is a global id (Agent:1), not a cursor; the others decode to nonsense.
    error = await gql.error(AGENTS_PAGE, {"first": 2, "after": after}, token=workspace.viewer)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "after"}


async def test_runs_memories_and_approvals_page_too(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    rows = Rows(sessionmaker, workspace.id)
    runs = [await rows.run(pk(agent["id"])) for _ in range(5)]
    for i, run in enumerate(runs):
        await rows.approval(run, await rows.step(run, seq=0, tool=f"tool.{i}"))
    memories = [(await create_memory(gql, workspace.operator, agent["id"]))["id"] for _ in range(5)]

    runs_query = """query($first: Int, $after: String) { runs(first: $first, after: $after) {
        edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""
    pages = await _walk(gql, workspace.viewer, runs_query, "runs", first=2)
    assert [pk(i) for p in pages for i in p] == [r.id for r in reversed(runs)]

    approvals_query = """query($first: Int, $after: String) { approvals(first: $first, after: $after) {
        edges { cursor node { id tool } }
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""
    pages = await _walk(gql, workspace.viewer, approvals_query, "approvals", first=2)
    assert sum(len(p) for p in pages) == 5

    memories_query = """query($agentId: ID!, $first: Int, $after: String) {
        memories(agentId: $agentId, first: $first, after: $after) {
        edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""
    pages = await _walk(gql, workspace.viewer, memories_query, "memories", first=2, agentId=agent["id"])
    assert [i for p in pages for i in p] == list(reversed(memories))
