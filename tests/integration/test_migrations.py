"""Migrations on an empty database of the leg's kind: up to head, down to base, up again.

MySQL and SQLite DDL is not transactional, so a migration whose downgrade forgets a table or
an index only shows when it is actually run both ways on a fresh database.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import migrate
from app.db.orm import Base
from app.db.session import create_engine, create_read_sessionmaker
from app.domain.memory import NO_VALUE_RANK, injection_rank, memory_terms, write_rank
from app.services.memory_search import search
from tests.conftest import DB_KIND, MYSQL_SERVER_URL

APP_TABLES = set(Base.metadata.tables)


@pytest.fixture
async def empty_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A brand-new, empty database of this leg's kind, dropped afterwards."""
    if DB_KIND == "mysql":
        name = f"enverif_m_{uuid.uuid4().hex[:12]}"
        server = create_engine(MYSQL_SERVER_URL)
        async with server.begin() as conn:
            await conn.execute(
                text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
            )
        url = make_url(MYSQL_SERVER_URL).set(database=name).render_as_string(hide_password=False)
        engine = create_engine(url)
        try:
            yield engine
        finally:
            await engine.dispose()
            async with server.begin() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
            await server.dispose()
    else:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'migrations.db'}")
        try:
            yield engine
        finally:
            await engine.dispose()


async def _tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def _revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())


def _schema_drift(sync: Connection) -> list[object]:
    """What autogenerate would add to make the database match the ORM (types aside: MariaDB
    reports JSON as LONGTEXT and SQLite has no real types, so those diffs are noise)."""
    context = MigrationContext.configure(sync, opts={"compare_type": False})
    return list(compare_metadata(context, Base.metadata))


async def test_upgrade_downgrade_upgrade_on_an_empty_database(empty_engine: AsyncEngine) -> None:
    head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert await _tables(empty_engine) == set()

    await migrate.upgrade(empty_engine)
    assert await _tables(empty_engine) == APP_TABLES | {"alembic_version"}
    assert await _revision(empty_engine) == head
    async with empty_engine.connect() as conn:
        assert await conn.run_sync(_schema_drift) == []

    await migrate.downgrade(empty_engine, "base")
    # alembic keeps its own bookkeeping table, emptied; every table of ours is gone.
    assert await _tables(empty_engine) - {"alembic_version"} == set()
    assert await _revision(empty_engine) is None

    await migrate.upgrade(empty_engine)
    assert await _tables(empty_engine) == APP_TABLES | {"alembic_version"}
    assert await _revision(empty_engine) == head


async def test_upgrade_is_idempotent_at_head(empty_engine: AsyncEngine) -> None:
    await migrate.upgrade(empty_engine)
    await migrate.upgrade(empty_engine)
    assert await _tables(empty_engine) == APP_TABLES | {"alembic_version"}


async def test_token_names_become_unique_and_expiry_is_added(empty_engine: AsyncEngine) -> None:
    """Tokens from before names were required keep working under a unique name each."""
    await migrate.upgrade(empty_engine, "8bbd93a7046c")
    rows = [
        # (workspace, name): the first holder of a name keeps it, case aside.
        (1, None),
        (1, "ci"),
        (1, "CI"),
        (1, "token-1"),  # the name the first token would get; generated names avoid it
        (1, "ci"),
        (2, "ci"),  # another workspace's "ci" is no collision
        (2, None),
    ]
    async with empty_engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO workspaces (id, name, created_at) VALUES (1, 'a', :t), (2, 'b', :t)"),
            {"t": "2026-01-01 00:00:00"},
        )
        for i, (ws, name) in enumerate(rows, start=1):
            await conn.execute(
                text(
                    "INSERT INTO api_tokens (id, workspace_id, role, token_hash, prefix, name, created_at)"
                    " VALUES (:id, :ws, 'viewer', :hash, 'evf_', :name, :t)"
                ),
                {"id": i, "ws": ws, "hash": f"{i:064d}", "name": name, "t": "2026-01-01 00:00:00"},
            )

    await migrate.upgrade(empty_engine)
    async with empty_engine.connect() as conn:
        names = dict((await conn.execute(text("SELECT id, name FROM api_tokens ORDER BY id"))).all())
        expiries = (await conn.execute(text("SELECT expires_at FROM api_tokens"))).scalars().all()
    assert names == {1: "token-1-2", 2: "ci", 3: "CI-3", 4: "token-1", 5: "ci-5", 6: "ci", 7: "token-7"}
    assert expiries == [None] * len(rows)

    await migrate.downgrade(empty_engine, "8bbd93a7046c")
    await migrate.upgrade(empty_engine)


async def seed_memories(engine: AsyncEngine, *, value: str, tags: str, search_text: str) -> None:
    """Workspace 1, its agent 7, and that agent's memories 1 (importance 0.5) and 2 (0.0),
    keys ``k_1``/``k_2``, written at 2026-01-01 as raw rows (the schema of an older revision)."""
    t = "2026-01-01 00:00:00"
    quote = '"' if engine.dialect.name == "sqlite" else "`"
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO workspaces (id, name, created_at) VALUES (1, 'a', :t)"), {"t": t}
        )
        await conn.execute(
            text(
                "INSERT INTO agents (id, workspace_id, name, instructions, status, model, tools, policy,"
                " memory_max_items, memory_max_chars, created_at, updated_at)"
                " VALUES (7, 1, 'a', '', 'ACTIVE', '{}', '[]', '{}', 20, 4000, :t, :t)"
            ),
            {"t": t},
        )
        for id, importance in ((1, 0.5), (2, 0.0)):
            await conn.execute(
                text(
                    "INSERT INTO memories (id, workspace_id, agent_id, `key`, value, tags, importance,"
                    " created_at, updated_at, search_text)"
                    " VALUES (:id, 1, 7, :key, :value, :tags, :imp, :t, :t, :search_text)".replace("`", quote)
                ),
                {
                    "id": id,
                    "key": f"k_{id}",
                    "value": value,
                    "tags": tags,
                    "imp": importance,
                    "t": t,
                    "search_text": search_text,
                },
            )


def agent_scoped_document(id: int) -> str:
    """Revision e5b8c2d47a19's search text of seeded memory ``id`` (value ``Café in Berlin``,
    tag ``icp``): agent 7's token per word, then one per tag (sha256 of ``icp``)."""
    return f"a7xk a7x{id} a7xcafe a7xin a7xberlin a7xicp a7y386abdf67acdc7922941"


async def test_memories_get_agent_scoped_search_tokens_and_an_injection_rank(
    empty_engine: AsyncEngine,
) -> None:
    """Revision e5b8c2d47a19 rewrites existing memories' search text and ranks them; its
    downgrade restores the plain search text."""
    await migrate.upgrade(empty_engine, "7a4e1c9b3f21")
    await seed_memories(empty_engine, value="Café in Berlin", tags='["icp"]', search_text="stale")

    await migrate.upgrade(empty_engine, "e5b8c2d47a19")
    async with empty_engine.connect() as conn:
        rows = (
            await conn.execute(text("SELECT id, search_text, injection_rank FROM memories ORDER BY id"))
        ).all()
    updated = datetime(2026, 1, 1, tzinfo=UTC)
    assert [(r[0], r[1]) for r in rows] == [(i, agent_scoped_document(i)) for i in (1, 2)]
    assert rows[0][2] == pytest.approx(injection_rank(0.5, updated, None))
    assert rows[1][2] == NO_VALUE_RANK

    await migrate.downgrade(empty_engine, "7a4e1c9b3f21")
    async with empty_engine.connect() as conn:
        texts = (await conn.execute(text("SELECT search_text FROM memories ORDER BY id"))).scalars().all()
    assert texts == ["k_1 Café in Berlin icp", "k_2 Café in Berlin icp"]
    await migrate.upgrade(empty_engine)


async def test_memories_get_their_rows_in_the_term_index(empty_engine: AsyncEngine) -> None:
    """Revision f3a9d6c1b8e2 indexes existing memories' terms (with their write rank); its
    downgrade drops the index, and upgrading again rebuilds it."""
    await migrate.upgrade(empty_engine, "e5b8c2d41f07")
    await seed_memories(empty_engine, value="Café in Berlin, Berlin", tags='["Q3 list"]', search_text="")

    await migrate.upgrade(empty_engine)
    query = text("SELECT memory_id, term, agent_id, write_rank, frequency FROM memory_terms")
    async with empty_engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    updated = datetime(2026, 1, 1, tzinfo=UTC)
    expected = {
        (id, term, 7, round(write_rank(importance, updated), 6), n)
        for id, importance in ((1, 0.5), (2, 0.0))
        for term, n in memory_terms(f"k_{id}", "Café in Berlin, Berlin", ["Q3 list"]).items()
    }
    assert {(r[0], r[1], r[2], round(r[3], 6), r[4]) for r in rows} == expected
    assert (1, "berlin", 7, round(write_rank(0.5, updated), 6), 2) in expected

    await migrate.downgrade(empty_engine, "e5b8c2d41f07")
    async with empty_engine.connect() as conn:
        assert "memory_terms" not in await conn.run_sync(lambda c: inspect(c).get_table_names())
    await migrate.upgrade(empty_engine)
    async with empty_engine.connect() as conn:
        assert len((await conn.execute(query)).all()) == len(expected)


def _old_search_index(sync: Connection) -> dict[str, Any]:
    """What revisions 5d7c0e2a91b4 and e5b8c2d47a19 built for full-text search: the column, the
    FULLTEXT index (MariaDB), the FTS5 table and its triggers (SQLite). Column order and
    SQLite's column default aside (see revision 7a1b53d7de74)."""
    columns = {c["name"]: (str(c["type"]), c["nullable"]) for c in inspect(sync).get_columns("memories")}
    indexes = inspect(sync).get_indexes("memories")
    found: dict[str, Any] = {
        "search_text": columns.get("search_text"),
        "indexes": {i["name"]: tuple(i["column_names"]) for i in indexes},
    }
    if sync.dialect.name == "sqlite":
        found["schema"] = sync.execute(
            text("SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'memories_fts%' ORDER BY name")
        ).all()
    return found


async def _old_index_finds(engine: AsyncEngine, token: str) -> list[int]:
    """The memories the old full-text index finds for one token."""
    if engine.dialect.name == "sqlite":
        query = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH :token"
    else:
        query = "SELECT id FROM memories WHERE MATCH (search_text) AGAINST (:token IN BOOLEAN MODE)"
    async with engine.connect() as conn:
        return sorted((await conn.execute(text(query), {"token": token})).scalars())


async def test_the_unread_search_index_is_dropped_and_restored(empty_engine: AsyncEngine) -> None:
    """Revision 7a1b53d7de74 drops ``search_text`` and its index while search keeps finding
    memories (through ``memory_terms``); its downgrade restores the column with each memory's
    agent-scoped document and an index that finds them, kept in step with later writes."""
    await migrate.upgrade(empty_engine, "e5b8c2d41f07")
    await seed_memories(empty_engine, value="Café in Berlin", tags='["icp"]', search_text="stale")
    await migrate.upgrade(empty_engine, "f3a9d6c1b8e2")
    async with empty_engine.connect() as conn:
        before = await conn.run_sync(_old_search_index)
    assert before["search_text"] is not None and before["search_text"][1] is False
    assert await _old_index_finds(empty_engine, "stale") == [1, 2]  # as seeded: the index is live

    await migrate.upgrade(empty_engine)
    async with empty_engine.connect() as conn:
        after = await conn.run_sync(_old_search_index)
    assert after["search_text"] is None
    assert "ix_memories_search_text" not in after["indexes"]
    assert after.get("schema", []) == []
    async with create_read_sessionmaker(empty_engine)() as session:
        for query, tags in (("berlin cafe", None), (None, ["icp"])):
            found = await search(session, workspace_id=1, agent_id=7, query=query, tags=tags, limit=10,
                                 now=datetime(2026, 1, 2, tzinfo=UTC), mark_used=False)  # fmt: skip
            assert sorted(m.id for m in found) == [1, 2]

    await migrate.downgrade(empty_engine, "f3a9d6c1b8e2")
    async with empty_engine.connect() as conn:
        assert await conn.run_sync(_old_search_index) == before
        documents = (await conn.execute(text("SELECT id, search_text FROM memories ORDER BY id"))).all()
    assert [tuple(r) for r in documents] == [(i, agent_scoped_document(i)) for i in (1, 2)]
    assert await _old_index_finds(empty_engine, "stale") == []
    assert await _old_index_finds(empty_engine, "a7xberlin") == [1, 2]
    tag_token = agent_scoped_document(1).split()[-1]
    assert await _old_index_finds(empty_engine, tag_token) == [1, 2]
    # The index follows writes again (SQLite: the triggers).
    async with empty_engine.begin() as conn:
        await conn.execute(text("UPDATE memories SET search_text = 'a7xparis' WHERE id = 2"))
        await conn.execute(text("DELETE FROM memories WHERE id = 1"))
    assert await _old_index_finds(empty_engine, "a7xberlin") == []
    assert await _old_index_finds(empty_engine, "a7xparis") == [2]

    await migrate.upgrade(empty_engine)
    async with empty_engine.connect() as conn:
        assert await conn.run_sync(_old_search_index) == after
