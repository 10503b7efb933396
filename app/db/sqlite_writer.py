"""SQLite's one writer, queued in the process (docs/operating/sqlite.md).

SQLite has a single write lock per database file. Without help, every write transaction in
the process sends ``BEGIN IMMEDIATE`` on its own connection and the losers spin in SQLite's
busy handler (sleeps of 1 ms growing to 100 ms, on the driver's thread) until the winner
commits: sixteen runs in flight turned into p95 latencies of 0.3-1.4 s, and the order in
which waiters got through was luck. So a write transaction first takes an asyncio lock, one
per database file per event loop, and only then sends ``BEGIN IMMEDIATE``; it gives the lock
back when its connection returns to the pool (after the COMMIT or ROLLBACK). Waiters queue
in order on the lock and cost nothing while they wait. Other processes (the API and
``enverif worker`` are separate processes in production mode, and the CLI) are still waited
for, up to the busy timeout: by the driver, off the event loop (``app.db.sqlite_driver``).

The lock is per event loop because an asyncio lock belongs to one loop; a process runs one
loop (tests run several in turn). It is keyed by the file's real path, so every engine of
the process on that file shares it.

A write transaction that opens a second one inside itself (in the same task) would wait for
itself: the wait is bounded by the busy timeout and fails with SQLite's own "database is
locked", as it did before the queue.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import weakref
from typing import Any

from sqlalchemy.exc import OperationalError
from sqlalchemy.util import await_

_HELD = "enverif_sqlite_writer"  # in the pool record's info: the lock this connection holds

_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


_real_paths: dict[str, str] = {}  # realpath() makes a system call per path component


def writer_lock(database: str) -> asyncio.Lock:
    """The process's write queue for the database file ``database`` (on the running loop)."""
    real = _real_paths.get(database)
    if real is None:
        real = _real_paths[database] = os.path.realpath(database)
    per_loop = _locks.setdefault(asyncio.get_running_loop(), {})
    lock = per_loop.get(real)
    if lock is None:
        lock = per_loop[real] = asyncio.Lock()
    return lock


def acquire(connection: Any, database: str, timeout_s: float) -> None:
    """Wait (in order) for the database's write lock; called by the ``begin`` listener, in
    SQLAlchemy's greenlet, just before ``BEGIN IMMEDIATE``. A connection that already holds it
    (a second transaction on one connection) keeps it."""
    info = connection.connection.info
    if _HELD in info:
        return
    lock = writer_lock(database)
    try:
        await_(_acquire(lock, timeout_s))
    except TimeoutError as exc:
        raise OperationalError(
            "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
        ) from exc
    info[_HELD] = (lock, asyncio.get_running_loop())


async def _acquire(lock: asyncio.Lock, timeout_s: float) -> None:
    # asyncio.timeout, not wait_for: 3.11's wait_for can lose a lock acquired as it times out.
    async with asyncio.timeout(timeout_s):
        await lock.acquire()


def release(record: Any) -> None:
    """Give the lock back: the connection is back in the pool (its transaction is over) or was
    dropped. A dropped connection can be collected on another thread: its lock is then
    released on its own loop."""
    held = record.info.pop(_HELD, None) if record is not None else None
    if held is None:
        return
    lock, loop = held
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        lock.release()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(lock.release)
