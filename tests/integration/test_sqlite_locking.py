"""SQLite (the embedded default): reads never wait for the writer; the writers of a process
take turns in order; a cancelled writer lets go of the lock at once."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import session as session_module
from app.db.orm import Workspace
from app.db.session import create_engine, create_sessionmaker
from tests.conftest import DB_KIND
from tests.support.sqlite_files import lock_is_free, own_database

pytestmark = pytest.mark.skipif(DB_KIND != "sqlite", reason="SQLite's whole-database write lock")


async def test_queries_answer_while_a_writer_holds_the_lock(gql, workspace, sessionmaker) -> None:
    async with sessionmaker() as session, session.begin():
        # BEGIN IMMEDIATE: this transaction now holds SQLite's write lock until it ends.
        await session.execute(
            update(Workspace).where(Workspace.id == workspace.id).values(name=workspace.name)
        )
        data = await asyncio.wait_for(
            gql.ok("{ viewer { role workspace { name } } agents(first: 5) { edges { node { id } } } }",
                   token=workspace.viewer),
            timeout=5,
        )  # fmt: skip
    assert data["viewer"]["workspace"]["name"] == workspace.name


# -- one writer per process (app/db/sqlite_writer.py) ------------------------------------------

# A statement that runs for about a second on SQLite.
SLOW = (
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000000) SELECT max(n) FROM c"
)


@pytest.fixture
async def own_file(tmp_path: Path) -> AsyncIterator[tuple[str, AsyncEngine]]:
    async with own_database(tmp_path, "writer.db") as database:
        yield database


# The same, starting with SELECT: it begins on the event loop's thread and, past the loop's
# budget, moves to the driver's, where the cancellation interrupts it (app/db/sqlite_driver.py).
SLOW_SELECT = f"SELECT max(n) FROM ({SLOW.replace('SELECT max(n) FROM c', 'SELECT n FROM c')})"


@pytest.mark.parametrize("where", ["mid-statement", "mid-read moved off the loop", "between statements"])
async def test_a_writer_cancelled_mid_transaction_releases_the_lock_at_once(
    own_file: tuple[str, AsyncEngine], where: str
) -> None:
    """A run cancelled inside its BEGIN IMMEDIATE transaction used to leave the database
    write-locked for the whole busy timeout (30 s): the next writer, in this process or
    another, must get through at once."""
    path, engine = own_file
    inside = asyncio.Event()

    async def writer() -> None:
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("INSERT INTO t VALUES ('cancelled')"))
            inside.set()
            if where == "mid-statement":
                await session.execute(text(SLOW))
            elif where == "mid-read moved off the loop":
                await session.execute(text(SLOW_SELECT))
            else:
                await asyncio.sleep(60)

    task = asyncio.create_task(writer())
    await asyncio.wait_for(inside.wait(), 10)
    await asyncio.sleep(0.2)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert lock_is_free(path)  # another process could write now
    started = time.monotonic()
    async with create_sessionmaker(engine)() as session, session.begin():
        await session.execute(text("INSERT INTO t VALUES ('next')"))
    assert time.monotonic() - started < 2
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT who FROM t"))).scalars().all() == ["next"]


async def test_writers_of_one_process_take_turns_in_the_order_they_asked(
    own_file: tuple[str, AsyncEngine],
) -> None:
    """Writers queue in the process (across engines on the same file) instead of racing in
    SQLite's busy handler, where the order was luck: each gets the lock in its turn."""
    path, engine = own_file
    other = create_engine(f"sqlite+aiosqlite:///{path}")  # e.g. the API and a worker in `enverif dev`
    began: list[int] = []

    async def writer(i: int) -> None:
        async with create_sessionmaker(engine if i % 2 else other)() as session, session.begin():
            await session.execute(text("INSERT INTO t VALUES (:who)"), {"who": str(i)})
            began.append(i)
            await asyncio.sleep(0.03)  # hold the lock a while: the others must be waiting

    try:
        for warm in (engine, other):  # pooled connections: no connect (a varying delay) on the way
            conns = [await warm.connect() for _ in range(4)]
            for conn in conns:
                await conn.close()
        tasks = []
        for i in range(8):
            tasks.append(asyncio.create_task(writer(i)))
            await asyncio.sleep(0.005)  # each asks after the previous one
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await other.dispose()
    assert began == list(range(8))
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT who FROM t ORDER BY rowid"))).scalars().all()
    assert rows == [str(i) for i in range(8)]


async def test_a_writer_waiting_on_itself_fails_after_the_busy_timeout(
    own_file: tuple[str, AsyncEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write transaction opened inside another one would wait for itself: it fails with
    SQLite's "database is locked" after the busy timeout, as before the queue, instead of
    hanging."""
    monkeypatch.setattr(session_module, "SQLITE_BUSY_TIMEOUT_MS", 300)
    _, engine = own_file
    sessions = create_sessionmaker(engine)
    async with sessions() as outer, outer.begin():
        await outer.execute(text("INSERT INTO t VALUES ('outer')"))
        started = time.monotonic()
        with pytest.raises(OperationalError, match="database is locked"):
            async with sessions() as inner, inner.begin():
                await inner.execute(text("INSERT INTO t VALUES ('inner')"))
        assert time.monotonic() - started < 5
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT who FROM t"))).scalars().all() == ["outer"]


# Another process: takes the write lock, says so, holds it HOLD_S, commits, and prints when
# it let go (the wall clock, which both processes share).
_HOLDER = """
import sqlite3, sys, time
raw = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
raw.execute("BEGIN IMMEDIATE")
raw.execute("INSERT INTO t VALUES ('other process')")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
raw.execute("COMMIT")
print(time.time(), flush=True)
"""


async def test_a_writer_gets_the_lock_soon_after_another_process_lets_go(
    own_file: tuple[str, AsyncEngine],
) -> None:
    """The write lock of another process (``enverif serve`` beside ``enverif worker``) is
    asked for again every 2 ms, not with the pauses of SQLite's own busy handler, which grow
    to 100 ms: after 0.24 s of waiting those had the writer ask again only some 90 ms after
    the lock was free."""
    path, engine = own_file
    async with engine.connect() as conn:  # a pooled connection: no connect on the way
        await conn.execute(text("SELECT 1"))
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, path, "0.24", stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    try:
        assert (await asyncio.wait_for(holder.stdout.readline(), 30)).strip() == b"locked"
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("INSERT INTO t VALUES ('this process')"))
            got_it = time.time()
        released = float((await asyncio.wait_for(holder.stdout.readline(), 30)).strip())
    finally:
        await holder.wait()
    assert got_it - released < 0.05, (
        f"asked again {1000 * (got_it - released):.0f} ms after the lock was free"
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT who FROM t ORDER BY rowid"))).scalars().all()
    assert rows == ["other process", "this process"]
