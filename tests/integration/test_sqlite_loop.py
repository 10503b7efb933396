"""SQLite statements on the event loop's thread (app/db/sqlite_driver.py): nothing another
process does, and no long read, blocks the loop; checkpoints run off it; a killed process
loses nothing it committed. Real database files, real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import sqlite_checkpoint
from app.db.session import create_sessionmaker
from app.services.runtime import open_runtime
from app.settings import Settings
from tests.conftest import DB_KIND
from tests.support.sqlite_files import own_database

pytestmark = pytest.mark.skipif(DB_KIND != "sqlite", reason="Enverif's SQLite driver")

ROOT = Path(__file__).resolve().parents[2]

# A read that runs for about a second; it starts with SELECT, so it begins on the loop.
SLOW_SELECT = (
    "SELECT max(n) FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c"
    " WHERE n < 3000000) SELECT n FROM c)"
)


@pytest.fixture
async def own_file(tmp_path: Path) -> AsyncIterator[tuple[str, AsyncEngine]]:
    async with own_database(tmp_path, "loop.db") as database:
        yield database


class Ticker:
    """The longest the event loop went without running this task's 5 ms sleeps."""

    def __init__(self) -> None:
        self.longest_gap_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.longest_gap_s = max(self.longest_gap_s, now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def _hold_the_lock(path: str, hold_s: float) -> asyncio.subprocess.Process:
    """Another process that takes the database's write lock and keeps it ``hold_s``."""
    script = (
        "import sqlite3, sys, time\n"
        f"raw = sqlite3.connect({path!r}, isolation_level=None)\n"
        "raw.execute('BEGIN IMMEDIATE')\n"
        "raw.execute(\"INSERT INTO t VALUES ('other process')\")\n"
        "print('locked', flush=True)\n"
        f"time.sleep({hold_s})\n"
        "raw.execute('COMMIT')\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"locked"
    return proc


async def test_a_writer_waiting_for_another_process_does_not_block_the_loop(
    own_file: tuple[str, AsyncEngine],
) -> None:
    """Another process (``enverif serve`` beside ``enverif worker``) holds the write lock for
    a second: our writer waits for it, with the busy timeout's patience, and the loop goes
    on serving everyone else meanwhile."""
    path, engine = own_file
    other = await _hold_the_lock(path, 1.0)
    started = time.monotonic()
    with Ticker() as ticker:
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("INSERT INTO t VALUES ('ours')"))
        waited_s = time.monotonic() - started
    assert await asyncio.wait_for(other.wait(), 30) == 0
    assert waited_s > 0.5  # it did wait for the other process
    assert ticker.longest_gap_s < 0.25, ticker.longest_gap_s
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT who FROM t ORDER BY rowid"))).scalars().all()
    assert rows == ["other process", "ours"]


async def test_a_writer_cancelled_while_waiting_for_another_process_holds_nothing(
    own_file: tuple[str, AsyncEngine],
) -> None:
    path, engine = own_file
    other = await _hold_the_lock(path, 1.0)
    task = asyncio.create_task(_insert(engine, "cancelled"))
    await asyncio.sleep(0.3)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert await asyncio.wait_for(other.wait(), 30) == 0
    started = time.monotonic()
    await _insert(engine, "next")
    assert time.monotonic() - started < 2
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT who FROM t ORDER BY rowid"))).scalars().all()
    assert rows == ["other process", "next"]


async def _insert(engine: AsyncEngine, who: str) -> None:
    async with create_sessionmaker(engine)() as session, session.begin():
        await session.execute(text("INSERT INTO t VALUES (:who)"), {"who": who})


async def test_a_long_read_moves_off_the_loop(own_file: tuple[str, AsyncEngine]) -> None:
    """A SELECT that runs past the loop's budget is interrupted and run again on the driver's
    thread, inside the same transaction: its result is whole, the transaction's writes stay,
    and the loop was never blocked for long."""
    _, engine = own_file
    with Ticker() as ticker:
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("INSERT INTO t VALUES ('before the read')"))
            assert (await session.execute(text(SLOW_SELECT))).scalar_one() == 3_000_000
            await session.execute(text("INSERT INTO t VALUES ('after the read')"))
    assert ticker.longest_gap_s < 0.25, ticker.longest_gap_s
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT who FROM t ORDER BY rowid"))).scalars().all()
    assert rows == ["before the read", "after the read"]


async def test_checkpoints_run_off_the_loop(own_file: tuple[str, AsyncEngine]) -> None:
    """The driver's connections never checkpoint in a commit; every so many commits a thread
    copies the WAL into the database file, while the engine stays open."""
    path, engine = own_file
    async with engine.connect() as conn:
        assert (await conn.execute(text("PRAGMA wal_autocheckpoint"))).scalar_one() == 0
    size_before = _size(path)  # every commit so far is in the WAL
    for i in range(sqlite_checkpoint.CHECKPOINT_EVERY_COMMITS * 2):
        await _insert(engine, "x" * 2000 + str(i))
    for _ in range(200):  # the checkpoint's thread copies the pages into the file
        if _size(path) > size_before:
            break
        await asyncio.sleep(0.05)
    assert _size(path) > size_before


def _size(path: str) -> int:
    return Path(path).stat().st_size


async def test_a_killed_process_loses_nothing_it_committed(tmp_path: Path) -> None:
    """SIGKILL in the middle of a transaction, after many commits (checkpoints among them):
    every commit the process saw return is in the database, the open transaction is not."""
    path = str(tmp_path / "killed.db")
    script = (
        "import asyncio, sys, time\n"
        "from sqlalchemy import text\n"
        "from app.db.session import create_engine, create_sessionmaker\n"
        "async def main():\n"
        f"    engine = create_engine('sqlite+aiosqlite:///{path}')\n"
        "    async with engine.begin() as conn:\n"
        "        await conn.execute(text('CREATE TABLE t (n INTEGER)'))\n"
        "    sessions = create_sessionmaker(engine)\n"
        "    for n in range(10**9):\n"
        "        async with sessions() as session, session.begin():\n"
        "            await session.execute(text('INSERT INTO t VALUES (:n)'), {'n': n})\n"
        "            if n == 350:\n"
        "                print('open', flush=True)\n"
        "                time.sleep(60)\n"
        "        print(n, flush=True)\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None
    committed: list[int] = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).strip()
        assert line, "the process ended early"
        if line == b"open":
            break
        committed.append(int(line))
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert committed == list(range(350))
    raw = sqlite3.connect(path)
    try:
        rows = [n for (n,) in raw.execute("SELECT n FROM t ORDER BY n")]
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        raw.close()
    assert rows == committed


async def test_a_worker_keeps_a_connection_for_each_of_its_jobs(settings: Settings, tmp_path: Path) -> None:
    """A worker of 16 jobs has them all in a transaction at once, again and again: it opens a
    connection (a driver thread, its PRAGMAs) for each once, not anew for every busy moment.
    SQLAlchemy's default pool for a file keeps 5, closes the rest when they come back, and
    opens no more than 15: the 16th job waited for one of the others to end."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}"
    rt = await open_runtime(
        settings.model_copy(update={"database_url": url, "worker_max_jobs": 16}), worker=True
    )
    opened = 0

    def count(*_: object) -> None:
        nonlocal opened
        opened += 1

    async def read(everyone_in: asyncio.Barrier) -> None:
        async with rt.read_sessionmaker() as session:
            await session.execute(text("SELECT 1"))
            await everyone_in.wait()  # all 16 hold their connection at once

    event.listen(rt.engine.sync_engine, "connect", count)
    try:
        for _ in range(3):
            everyone_in = asyncio.Barrier(16)
            async with asyncio.timeout(10):  # else a job waits for another's connection
                await asyncio.gather(*(read(everyone_in) for _ in range(16)))
        assert opened == 16
    finally:
        await rt.close()
