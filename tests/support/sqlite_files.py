"""A SQLite database file of a test's own, and what another process sees of its lock."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.session import create_engine


@asynccontextmanager
async def own_database(directory: Path, name: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    """A database file of the test's own (a lock left behind must not hurt other tests), with
    one table, ``t (who TEXT)``, and Enverif's engine on it."""
    path = str(directory / name)
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (who TEXT)"))
    try:
        yield path, engine
    finally:
        await engine.dispose()


def lock_is_free(path: str) -> bool:
    """What another process sees: can it take the write lock right now (no busy wait)?"""
    raw = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        raw.close()
