"""Memory search on the leg's database: what matches (the same on MariaDB and SQLite), tag
filters inside the full-text match, the query-less order, and the derived columns kept in
step by every write path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.db import orm
from app.domain.memory import injection_rank, value_score
from app.services import memories, memory_injection, memory_search
from tests.integration.graphql_support import pk
from tests.support.runs import create_agent


async def _insert(sessionmaker: Any, workspace_id: int, agent_id: int, *rows: dict[str, Any]) -> None:
    now = datetime.now(UTC)
    async with sessionmaker() as session, session.begin():
        for fields in rows:
            at = fields.pop("at", now)
            session.add(
                orm.Memory(
                    workspace_id=workspace_id,
                    agent_id=agent_id,
                    tags=fields.pop("tags", []),
                    importance=fields.pop("importance", 0.5),
                    created_at=at,
                    updated_at=at,
                    last_used_at=None,
                    **fields,
                )
            )


async def _search(
    sessionmaker: Any, workspace_id: int, agent_id: int, query: str | None, **kw: Any
) -> list[str]:
    async with sessionmaker() as session, session.begin():
        found = await memory_search.search(
            session,
            workspace_id=workspace_id,
            agent_id=agent_id,
            query=query,
            tags=kw.get("tags"),
            limit=kw.get("limit", 10),
            now=datetime.now(UTC),
            mark_used=kw.get("mark_used", False),
        )
    return [m.key for m in found]


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        ("cafe", ["venue"]),  # diacritics ignored
        ("MÜLLER", ["venue"]),  # and case
        ("berl", ["venue"]),  # a word matches as a prefix
        ("eu", ["region"]),  # no minimum length (MariaDB's own index skips words under 3)
        ("the", ["region"]),  # no stopwords (MariaDB's own list has "the")
        ("decision", ["icp_decision"]),  # "_" splits words, in keys too
        ("icp", ["icp_decision"]),
        ("orbit", []),  # another agent's words are not this agent's
        ("berlin pricing", ["venue", "region"]),  # any word may match; then importance
    ],
)
async def test_what_a_search_matches(
    gql: Any, workspace: Any, sessionmaker: Any, query: str, keys: list[str]
) -> None:
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    other_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        {"key": "venue", "value": "Café Müller in Berlin", "importance": 0.9},
        {"key": "region", "value": "the EU pricing page", "importance": 0.5},
        {"key": "icp_decision", "value": "mid-market only"},
    )
    await _insert(sessionmaker, workspace.id, other_pk, {"key": "orbit", "value": "Orbit Labs, Berlin cafe"})
    assert await _search(sessionmaker, workspace.id, agent_pk, query) == keys


async def test_a_tag_filter_is_part_of_the_match(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    """More better-matching memories than the engine hands over (MAX_CANDIDATES) do not hide
    the one carrying the tag: the tag is a required term of the full-text match."""
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    crowd = memory_search.MAX_CANDIDATES + 20
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        *({"key": f"lead-{i}", "value": "lead lead lead"} for i in range(crowd)),
        {"key": "vip", "value": "lead among many other words here", "tags": ["vip", "Q3 list"]},
        {"key": "almost", "value": "lead", "tags": ["vip"]},  # not every tag
    )
    assert await _search(sessionmaker, workspace.id, agent_pk, "lead", tags=["vip", "Q3 list"]) == ["vip"]
    assert await _search(sessionmaker, workspace.id, agent_pk, "lead", tags=["Q3"]) == []  # tags are exact
    # A tag's words are searchable words too.
    assert await _search(sessionmaker, workspace.id, agent_pk, "q3") == ["vip"]


async def test_without_words_the_best_by_importance_and_recency(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    now = datetime.now(UTC)
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        {
            "key": "old-important",
            "value": "x",
            "importance": 0.9,
            "at": now - timedelta(days=90),
            "tags": ["t"],
        },
        {"key": "fresh-minor", "value": "x", "importance": 0.2, "tags": ["t"]},
        {"key": "fresh-major", "value": "x", "importance": 0.8, "tags": ["t"]},
        {"key": "untagged", "value": "x", "importance": 1.0},
    )
    # 0.9 / 8 (three half-lives) < 0.2: recency counts.
    assert await _search(sessionmaker, workspace.id, agent_pk, None, tags=["t"]) == [
        "fresh-major",
        "fresh-minor",
        "old-important",
    ]
    assert await _search(sessionmaker, workspace.id, agent_pk, None, limit=2) == ["untagged", "fresh-major"]


async def test_every_write_keeps_the_derived_columns(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    """The search text follows an update, and the injection rank follows importance and use
    (the ORM's hook, and the bulk update of a search that marks its results used)."""
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    old = datetime.now(UTC) - timedelta(days=60)
    await _insert(
        sessionmaker, workspace.id, agent_pk, {"key": "plan", "value": "expand to Spain", "at": old}
    )
    async with sessionmaker() as session, session.begin():
        await memories.remember(
            session,
            workspace_id=workspace.id,
            agent_id=agent_pk,
            key="plan",
            value="expand to Portugal",
            tags=None,
            importance=0.25,
            now=old,
            max_value_chars=100,
            source_run_id=None,
        )
    assert await _search(sessionmaker, workspace.id, agent_pk, "spain") == []
    assert await _search(sessionmaker, workspace.id, agent_pk, "portugal") == ["plan"]
    async with sessionmaker() as session:
        row = await session.scalar(select(orm.Memory).where(orm.Memory.agent_id == agent_pk))
    assert row is not None
    assert row.injection_rank == pytest.approx(injection_rank(0.25, row.updated_at, None))

    assert await _search(sessionmaker, workspace.id, agent_pk, "portugal", mark_used=True) == ["plan"]
    async with sessionmaker() as session:
        row = await session.scalar(select(orm.Memory).where(orm.Memory.agent_id == agent_pk))
    assert row is not None and row.last_used_at is not None
    assert row.injection_rank == pytest.approx(injection_rank(0.25, row.updated_at, row.last_used_at))
    # Injection reads the same order: used just now, it outranks an untouched 0.9 of 60 days.
    stale = {"key": "stale", "value": "x", "importance": 0.9, "at": old}
    await _insert(sessionmaker, workspace.id, agent_pk, stale)
    async with sessionmaker() as session:
        found = await memory_injection._bounded_candidates(
            session, agent_id=agent_pk, max_items=5, max_chars=100
        )
    now = datetime.now(UTC)
    assert [c.key for c in found] == ["plan", "stale"]
    assert value_score(found[0], now) > value_score(found[1], now)


async def test_every_word_first_then_any_word(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    """With at least ``limit`` memories holding every word, only those are returned, even if
    one holding a single word many times would rank higher; fewer, and any word competes."""
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        {"key": "both-1", "value": "alpha beta"},
        {"key": "both-2", "value": "beta and alpha, gamma"},
        {"key": "one-word", "value": "alpha alpha alpha alpha", "importance": 1.0},
        {"key": "none", "value": "delta"},
    )
    assert sorted(await _search(sessionmaker, workspace.id, agent_pk, "alpha beta", limit=2)) == [
        "both-1",
        "both-2",
    ]
    found = await _search(sessionmaker, workspace.id, agent_pk, "alpha beta", limit=3)
    assert sorted(found) == ["both-1", "both-2", "one-word"]
    assert await _search(sessionmaker, workspace.id, agent_pk, "beta gamma", limit=1) == ["both-2"]
    assert sorted(await _search(sessionmaker, workspace.id, agent_pk, "gamma delta", limit=5)) == [
        "both-2",
        "none",
    ]


async def test_use_of_a_memory_rewritten_since_it_was_read_keeps_the_writers_rank(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    """Injection reads its candidates before the claim; an operator lowering a memory's
    importance in between must not be undone by a rank computed from the old importance."""
    agent_pk = pk(await create_agent(gql, workspace.admin, tools=[]))
    old = datetime.now(UTC) - timedelta(days=10)
    await _insert(
        sessionmaker, workspace.id, agent_pk, {"key": "plan", "value": "x", "importance": 0.9, "at": old}
    )
    async with sessionmaker() as session:
        (read,) = await memory_injection._bounded_candidates(
            session, agent_id=agent_pk, max_items=5, max_chars=100
        )
    edited = datetime.now(UTC) - timedelta(days=1)
    async with sessionmaker() as session, session.begin():
        await memories.remember(
            session,
            workspace_id=workspace.id,
            agent_id=agent_pk,
            key="plan",
            value="x",
            tags=None,
            importance=0.1,
            now=edited,
            max_value_chars=100,
        )
    async with sessionmaker() as session, session.begin():
        await memory_search.record_use(session, [read], now=datetime.now(UTC))
    async with sessionmaker() as session:
        row = await session.scalar(select(orm.Memory).where(orm.Memory.agent_id == agent_pk))
    assert row is not None and row.importance == pytest.approx(0.1) and row.last_used_at is not None
    assert row.injection_rank == pytest.approx(injection_rank(0.1, edited, None))
