"""Memory search on the leg's database: what matches (the same on MariaDB and SQLite), tag
filters inside the match, the query-less order, common words, and the derived columns and
the term index kept in step by every write path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db import orm
from app.domain.memory import injection_rank, memory_terms, tag_term, value_score, write_rank
from app.services import memories, memory_injection, memory_search
from tests.support.graphql import create_memory, pk
from tests.support.runs import scripted_agent

UPDATE_MEMORY = """
mutation($id: ID!, $input: MemoryPatch!) {
  updateMemory(id: $id, input: $input) { id }
}
"""
DELETE_MEMORY = "mutation($id: ID!) { deleteMemory(id: $id) }"


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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
    other_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
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


async def _terms(sessionmaker: Any, agent_id: int) -> dict[str, dict[str, int]]:
    """The agent's rows of the term index, by memory key, and what its memories say they
    should be (with the memory's write rank on every row)."""
    async with sessionmaker() as session:
        rows = (
            await session.execute(
                select(
                    orm.Memory.key,
                    orm.MemoryTerm.term,
                    orm.MemoryTerm.frequency,
                    orm.MemoryTerm.write_rank,
                    orm.MemoryTerm.value_rank,
                )
                .join(orm.Memory, orm.Memory.id == orm.MemoryTerm.memory_id)
                .where(orm.MemoryTerm.agent_id == agent_id)
            )
        ).all()
        found: dict[str, dict[str, int]] = {}
        ranks: dict[str, set[tuple[float, float]]] = {}
        for key, term, frequency, rank, value_rank in rows:
            found.setdefault(key, {})[term] = frequency
            ranks.setdefault(key, set()).add((rank, value_rank))
        all_terms = await session.scalar(select(func.count()).select_from(orm.MemoryTerm))
        memories_ = (await session.scalars(select(orm.Memory).where(orm.Memory.agent_id == agent_id))).all()
        expected = {m.key: memory_terms(m.key, m.value, m.tags) for m in memories_}
        for m in memories_:
            # Every row carries the memory's write rank and (a copy of) its injection rank.
            assert all(
                r == pytest.approx(write_rank(m.importance, m.updated_at)) and v == m.injection_rank
                for r, v in ranks.get(m.key, ())
            )
        orphans = await session.scalar(
            select(func.count())
            .select_from(orm.MemoryTerm)
            .outerjoin(orm.Memory, orm.Memory.id == orm.MemoryTerm.memory_id)
            .where(orm.Memory.id.is_(None))
        )
    assert orphans == 0 and all_terms is not None
    assert found == {k: v for k, v in expected.items() if v}
    return found


async def test_every_write_path_keeps_the_term_index(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    """Operator writes (GraphQL) and agent writes (the tools' functions) rewrite a memory's
    terms with it; a delete drops them, and so does deleting the agent's workspace rows."""
    agent = await scripted_agent(gql, workspace.admin, tools=[])
    agent_pk = pk(agent)
    created = await create_memory(
        gql, workspace.operator, agent, key="venue", value="Café Müller", tags=["vip"], importance=0.4
    )
    assert (await _terms(sessionmaker, agent_pk))["venue"][tag_term("vip")] == 1
    await gql.ok(
        UPDATE_MEMORY,
        {"id": created["id"], "input": {"value": "Berlin Berlin", "tags": ["Q3 list"], "importance": 0.9}},
        token=workspace.operator,
    )
    terms = await _terms(sessionmaker, agent_pk)
    assert (
        terms["venue"]["berlin"] == 2
        and "cafe" not in terms["venue"]
        and tag_term("vip") not in terms["venue"]
    )
    assert await _search(sessionmaker, workspace.id, agent_pk, "berl", tags=["Q3 list"]) == ["venue"]

    now = datetime.now(UTC)
    async with sessionmaker() as session, session.begin():
        for value in ("expand to Spain", "expand to Portugal"):
            await memories.remember(
                session, workspace_id=workspace.id, agent_id=agent_pk, key="plan", value=value,
                tags=None, importance=0.5, now=now, max_value_chars=100, source_run_id=None,
            )  # fmt: skip
    assert "spain" not in (await _terms(sessionmaker, agent_pk))["plan"]
    # Marking used (a bulk update) leaves the terms as written.
    assert await _search(sessionmaker, workspace.id, agent_pk, "portugal", mark_used=True) == ["plan"]
    await _terms(sessionmaker, agent_pk)

    async with sessionmaker() as session, session.begin():
        assert await memories.forget(session, agent_id=agent_pk, key="plan", now=now)
    await gql.ok(DELETE_MEMORY, {"id": created["id"]}, token=workspace.operator)
    assert await _terms(sessionmaker, agent_pk) == {}
    assert await _search(sessionmaker, workspace.id, agent_pk, "berlin") == []


@pytest.mark.parametrize("df_cap", [1000, 30])
async def test_a_common_word_costs_its_best_postings(
    gql: Any, workspace: Any, sessionmaker: Any, monkeypatch: pytest.MonkeyPatch, df_cap: int
) -> None:
    """A word held by more memories than MAX_CANDIDATES: its candidates are its most valuable
    postings, from each of its forms (a prefix match), and a rarer word or tag in the query
    drives the match instead. With a count cap below its postings, its forms past the
    counted ones are found by index seeks."""
    monkeypatch.setattr(memory_search, "MAX_CANDIDATES", 20)
    monkeypatch.setattr(memory_search, "DF_CAP", df_cap)
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
    old = datetime.now(UTC) - timedelta(days=200)
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        *({"key": f"old-{i}", "value": "lead note", "importance": 0.1, "at": old} for i in range(40)),
        {"key": "later", "value": "leadz", "importance": 0.9},  # the last form: after 30 postings
        *({"key": f"mid-{i}", "value": "leads note", "importance": 0.5} for i in range(5)),
        {"key": "board", "value": "leaderboard", "importance": 1.0},
        {"key": "rare", "value": "lead zebra", "importance": 0.05, "at": old},
        {"key": "tagged", "value": "lead", "importance": 0.05, "at": old, "tags": ["vip"]},
    )
    found = await _search(sessionmaker, workspace.id, agent_pk, "lead", limit=7)
    assert found[:2] == ["board", "later"] and sorted(found[2:]) == [f"mid-{i}" for i in range(5)]
    assert await _search(sessionmaker, workspace.id, agent_pk, "note lead zebra", limit=1) == ["rare"]
    assert await _search(sessionmaker, workspace.id, agent_pk, "lead", tags=["vip"]) == ["tagged"]
    assert await _search(sessionmaker, workspace.id, agent_pk, None, tags=["vip"]) == ["tagged"]
    # Both common: every word (held by all but three) still finds its best.
    assert sorted(await _search(sessionmaker, workspace.id, agent_pk, "lead note", limit=5)) == [
        f"mid-{i}" for i in range(5)
    ]
