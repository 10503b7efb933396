"""aiosqlite, with a transaction's statements run on the event loop's own thread
(docs/operating/sqlite.md).

aiosqlite runs every call on its connection's own thread: a round trip from the event loop
to that thread and back (a queue put, a thread wake-up, a ``call_soon_threadsafe`` back to
the loop) for every statement, ``BEGIN IMMEDIATE`` and ``COMMIT`` included, ~49 per run of
three durable calls in ``bench/throughput.py``. Yet the statements of a transaction on a
warm page cache take microseconds, and a commit in WAL mode with ``synchronous=NORMAL`` is
a ``write`` to the page cache, not an ``fsync``. So this driver runs them where they are
asked for, on the loop's thread, and keeps aiosqlite's thread for what could block it:

- **waiting for the write lock.** The connection's busy timeout is 0: when another process
  holds the lock, ``BEGIN IMMEDIATE`` fails at once with ``SQLITE_BUSY`` and is asked again
  after an ``asyncio.sleep`` of 1, then 2 ms at a time, up to the busy timeout. The loop
  serves everyone else meanwhile, and a cancelled waiter holds nothing. SQLite's own busy
  handler grows its pauses to 100 ms, for many waiters; here only the head of the process's
  write queue (``app.db.sqlite_writer``) asks, so short pauses cost little (a failed
  ``BEGIN IMMEDIATE`` is microseconds), and a process that lost the lock to another one's
  stream of transactions gets it within 2 ms of a gap instead of up to 100 ms after it.
- **a long read.** A ``SELECT`` that runs longer than ``LOOP_BUDGET_S`` is interrupted by
  the progress handler and run again on aiosqlite's thread. Interrupting a read-only
  statement leaves its transaction as it was (SQLite rolls back a transaction only for an
  interrupted write).
- **checkpoints.** The connections never checkpoint on their own (``wal_autocheckpoint=0``):
  ``app.db.sqlite_checkpoint`` does it on a thread of its own.
- **anything else**: ``DELETE`` (a cascade or a retention sweep can touch many rows),
  ``PRAGMA``, schema statements, ``WITH``, and every call while an earlier one is still on
  the thread (a statement cancelled there is interrupted, and what follows, the rollback,
  must run after it).

``INSERT`` and ``UPDATE`` run on the loop unbounded: interrupting a write would roll back
its whole transaction. Enverif's are keyed (a run, a step, a row it has just read).

A statement's cursor is made, executed, read and closed in one call, wherever it runs;
SQLAlchemy's adapter buffers every row of a (non-streamed) result anyway, and a streamed
result is buffered whole too (Enverif streams none). No cursor outlives its statement: a
cancelled statement's cursor cannot keep SQLite from closing the connection (see
``app.db.session._roll_back_dropped``).
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiosqlite

from app.db import sqlite_checkpoint

# What a statement leaves behind: description, rowcount, lastrowid, rows.
_Outcome = tuple[Any, int, int | None, list[Any]]

LOOP_BUDGET_S = 0.005  # the longest a read runs on the loop's thread before it moves off it
_PROGRESS_STEPS = 1_000  # VM instructions between two calls of the progress handler
# Another process's write lock is asked for again after these pauses, then 2 ms at a time
# (see the module docstring; SQLite's own handler goes up to 100 ms).
_BUSY_PAUSES_S = (0.001,)
_BUSY_PAUSE_MAX_S = 0.002
_BUSY = frozenset({sqlite3.SQLITE_BUSY, 261})  # 261: SQLITE_BUSY_RECOVERY
_ON_LOOP = ("SELECT", "INSERT", "UPDATE", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
_RETRY_IN_TRANSACTION = ("SELECT", "COMMIT")  # safe to ask again after SQLITE_BUSY mid-transaction


def _run(connection: sqlite3.Connection, sql: str, parameters: Any, many: bool) -> _Outcome:
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
        rows = cursor.fetchall() if cursor.description else []
        return cursor.description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


def _verb(sql: str) -> str:
    return sql.lstrip()[:9].upper().split(None, 1)[0] if sql.strip() else ""


class _OverBudget(Exception):
    """A read ran past ``LOOP_BUDGET_S`` on the loop's thread: run it on the driver's."""


class OneTripCursor:
    """The part of aiosqlite's ``Cursor`` SQLAlchemy's adapter uses, one call per statement."""

    def __init__(self, connection: LoopConnection) -> None:
        self._connection = connection
        self.arraysize = 1
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self._rows: list[Any] = []

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def execute(self, sql: str, parameters: Any = ()) -> OneTripCursor:
        outcome = await self._connection.statement(sql, parameters, False)
        self.description, self.rowcount, self.lastrowid, self._rows = outcome
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> OneTripCursor:
        outcome = await self._connection.statement(sql, parameters, True)
        self.description, self.rowcount, self.lastrowid, self._rows = outcome
        return self

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> Sequence[Any]:
        count = size or self.arraysize
        taken, self._rows = self._rows[:count], self._rows[count:]
        return taken

    async def fetchall(self) -> Sequence[Any]:
        taken, self._rows = self._rows, []
        return taken

    async def close(self) -> None:
        self._rows = []


class LoopConnection(aiosqlite.Connection):
    def __init__(
        self, connector: Callable[[], sqlite3.Connection], database: str, busy_timeout_s: float
    ) -> None:
        super().__init__(connector, iter_chunk_size=64)
        self._database = database
        self._busy_timeout_s = busy_timeout_s
        # Calls sent to the thread and calls it has finished: the loop counts the first, the
        # thread the second (each counter has one writer). While they differ, every call
        # goes to the thread too, behind the ones before it.
        self._sent = 0
        self._finished = itertools.count(1)
        self._finished_n = 0
        self._user_progress: Callable[[], int | None] | None = None
        self._loop_deadline: float | None = None  # set while a read runs on the loop's thread
        self._over_budget = False

    # -- where a call runs ---------------------------------------------------------------

    async def _on_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        def call() -> Any:
            try:
                return fn(*args)
            finally:
                self._finished_n = next(self._finished)

        self._sent += 1
        try:
            return await self._execute(call)  # type: ignore[no-untyped-call]
        except ValueError:
            self._sent -= 1  # never queued: the connection is closed
            raise

    def _thread_busy(self) -> bool:
        return self._sent != self._finished_n

    def _raw(self) -> sqlite3.Connection:
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")  # what aiosqlite says (SQLAlchemy maps it)
        return self._connection

    def _progress(self) -> int:
        # On whichever thread runs the statement (SQLite calls it every _PROGRESS_STEPS).
        deadline = self._loop_deadline
        if deadline is not None and time.perf_counter() > deadline:
            self._over_budget = True
            return 1
        user = self._user_progress
        return (user() or 0) if user is not None else 0

    def _on_loop_read(self, sql: str, parameters: Any, many: bool) -> _Outcome:
        raw = self._raw()
        self._over_budget = False
        self._loop_deadline = time.perf_counter() + LOOP_BUDGET_S
        try:
            return _run(raw, sql, parameters, many)
        except sqlite3.OperationalError as exc:
            if self._over_budget:
                raise _OverBudget from exc
            raise
        finally:
            self._loop_deadline = None

    async def statement(self, sql: str, parameters: Any, many: bool) -> _Outcome:
        verb = _verb(sql)
        started = time.monotonic()
        for attempt in itertools.count():
            try:
                if verb not in _ON_LOOP or self._thread_busy():
                    outcome: _Outcome = await self._on_thread(_run, self._raw(), sql, parameters, many)
                elif verb == "SELECT":
                    try:
                        outcome = self._on_loop_read(sql, parameters, many)
                    except _OverBudget:
                        outcome = await self._on_thread(_run, self._raw(), sql, parameters, many)
                else:
                    outcome = _run(self._raw(), sql, parameters, many)
            except sqlite3.OperationalError as exc:
                await self._wait_if_busy(exc, verb, started, attempt)
                continue
            if verb == "COMMIT":
                sqlite_checkpoint.committed(self._database)
            return outcome
        raise AssertionError("unreachable")

    async def _wait_if_busy(
        self, exc: sqlite3.OperationalError, verb: str, started: float, attempt: int
    ) -> None:
        """Re-raise ``exc`` unless it is another process's write lock (SQLITE_BUSY) and the
        statement may be asked again; then pause (``_BUSY_PAUSES_S``)."""
        if getattr(exc, "sqlite_errorcode", None) not in _BUSY:
            raise exc
        # A statement that failed with SQLITE_BUSY did nothing. It may be asked again outside a
        # transaction (BEGIN IMMEDIATE itself), for a COMMIT, or for a read; a write inside a
        # transaction may not (SQLite's advice: roll back). Ours hold the lock from BEGIN
        # IMMEDIATE, so their writes are never busy.
        raw = self._connection
        if raw is not None and raw.in_transaction and verb not in _RETRY_IN_TRANSACTION:
            raise exc
        pause = _BUSY_PAUSES_S[attempt] if attempt < len(_BUSY_PAUSES_S) else _BUSY_PAUSE_MAX_S
        left = started + self._busy_timeout_s - time.monotonic()
        if left <= 0:
            raise exc
        await asyncio.sleep(min(pause, left))

    def begin_now(self, sql: str) -> bool:
        """Send ``BEGIN``/``BEGIN IMMEDIATE`` here and now, from synchronous code (SQLAlchemy's
        ``begin`` event), if it needs no wait: True if it was sent, False if it must go
        through ``statement`` (another process holds the lock, or a call is on the thread)."""
        if self._thread_busy():
            return False
        try:
            self._raw().execute(sql)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) in _BUSY:
                return False
            raise
        return True

    # -- what SQLAlchemy's adapter calls -------------------------------------------------

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        # No call: the sqlite3 cursor is made with each statement.
        return OneTripCursor(self)

    async def commit(self) -> None:
        if self._raw().in_transaction:  # as sqlite3's commit(): nothing to end, nothing sent
            await self.statement("COMMIT", (), False)

    async def rollback(self) -> None:
        if self._thread_busy():
            await self._on_thread(self._raw().rollback)
        else:
            self._raw().rollback()

    async def set_progress_handler(self, handler: Callable[[], int | None], n: int) -> None:
        # One progress handler per SQLite connection: ours, which also asks this one.
        self._user_progress = handler


def connector(database: str, busy_timeout_s: float) -> Callable[[], Any]:
    """``create_async_engine``'s ``async_creator``: a new connection to ``database``."""

    async def connect() -> LoopConnection:
        def open_() -> sqlite3.Connection:
            # Busy timeout 0: a wait for another process's lock is the loop's (statement()).
            raw = sqlite3.connect(database, timeout=0, check_same_thread=False)
            raw.execute("PRAGMA wal_autocheckpoint=0")  # app.db.sqlite_checkpoint does it
            return raw

        conn = LoopConnection(open_, database, busy_timeout_s)
        conn._thread.daemon = True  # as SQLAlchemy's dialect does: never block interpreter exit
        await conn
        raw = conn._connection
        assert raw is not None
        raw.set_progress_handler(conn._progress, _PROGRESS_STEPS)
        return conn

    return connect
