"""A cancellation stays a cancellation: cancelling a task in the middle of a database
statement raises ``CancelledError`` in it, with Enverif's engine exactly as with a plain
SQLAlchemy engine, on MariaDB and on SQLite; and what the run loop does about it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.session import READ_ONLY_OPTION, create_engine, create_sessionmaker
from app.settings import Settings
from tests.conftest import DB_KIND

# A statement that runs for about a second: SLEEP on MariaDB; on SQLite, a recursive count.
SLOW = (
    "SELECT SLEEP(1)"
    if DB_KIND == "mysql"
    else "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000000) SELECT max(n) FROM c"
)


async def _cancelled_mid_statement(
    engine: AsyncEngine, body: Callable[[AsyncEngine], Awaitable[Any]]
) -> BaseException | None:
    task = asyncio.create_task(body(engine))
    await asyncio.sleep(0.2)  # well inside the statement
    assert not task.done()
    task.cancel()
    try:
        await asyncio.wait_for(task, 30)
    except BaseException as exc:
        return exc
    return None


async def _in_session_begin(engine: AsyncEngine) -> None:
    async with create_sessionmaker(engine)() as session, session.begin():
        await session.execute(text(SLOW))


async def _in_engine_begin(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(SLOW))


@pytest.mark.parametrize("body", [_in_session_begin, _in_engine_begin], ids=["session.begin", "engine.begin"])
@pytest.mark.parametrize("kind", ["enverif", "plain"])
async def test_a_cancel_mid_statement_raises_cancelled_error(
    settings: Settings, kind: str, body: Any, tmp_path: Path
) -> None:
    # SQLite: a file of its own, since a cancelled BEGIN IMMEDIATE transaction may hold the
    # write lock for a while after the cancel (the session's database is shared by all tests).
    url = (
        settings.effective_database_url if DB_KIND == "mysql" else f"sqlite+aiosqlite:///{tmp_path}/cancel.db"
    )
    engine = (
        create_engine(url, statement_timeout_ms=30_000) if kind == "enverif" else create_async_engine(url)
    )
    try:
        raised = await _cancelled_mid_statement(engine, body)
        assert isinstance(raised, asyncio.CancelledError), repr(raised)
        # The pool is fine afterwards: the next statement works (a read, for that lock).
        async with engine.execution_options(**{READ_ONLY_OPTION: True}).connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()
