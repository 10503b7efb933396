"""Migrations on an empty database of the leg's kind: up to head, down to base, up again.

MySQL and SQLite DDL is not transactional, so a migration whose downgrade forgets a table or
an index only shows when it is actually run both ways on a fresh database.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import migrate
from app.db.orm import SEARCH_INDEX_OBJECTS, Base
from app.db.session import create_engine
from app.domain.memory import NO_VALUE_RANK, injection_rank, memory_terms, search_document, write_rank
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


def _is_search_object(name: str | None) -> bool:
    """The full-text objects the migration adds outside the ORM's metadata (FTS5's table and
    its shadow tables on SQLite, the FULLTEXT index on MariaDB)."""
    return name is not None and any(name.startswith(prefix) for prefix in SEARCH_INDEX_OBJECTS)


async def _tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    return {name for name in names if not _is_search_object(name)}


async def _revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())


def _schema_drift(sync: Connection) -> list[object]:
    """What autogenerate would add to make the database match the ORM (types aside: MariaDB
    reports JSON as LONGTEXT and SQLite has no real types, so those diffs are noise)."""
    context = MigrationContext.configure(
        sync,
        opts={
            "compare_type": False,
            "include_object": lambda obj, name, *_: not _is_search_object(name),
        },
    )
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


async def test_memories_get_agent_scoped_search_tokens_and_an_injection_rank(
    empty_engine: AsyncEngine,
) -> None:
    """Revision e5b8c2d47a19 rewrites existing memories' search text and ranks them; its
    downgrade restores the plain search text."""
    await migrate.upgrade(empty_engine, "7a4e1c9b3f21")
    await seed_memories(empty_engine, value="Café in Berlin", tags='["icp"]', search_text="stale")

    await migrate.upgrade(empty_engine)
    async with empty_engine.connect() as conn:
        rows = (
            await conn.execute(text("SELECT id, search_text, injection_rank FROM memories ORDER BY id"))
        ).all()
    updated = datetime(2026, 1, 1, tzinfo=UTC)
    assert [(r[0], r[1]) for r in rows] == [
        (i, search_document(7, f"k_{i}", "Café in Berlin", ["icp"])) for i in (1, 2)
    ]
    assert rows[0][1].startswith("a7xk a7x1 a7xcafe a7xin a7xberlin a7xicp a7y")
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
