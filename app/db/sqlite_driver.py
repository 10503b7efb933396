"""aiosqlite with one trip to the database thread per statement (docs/operating/sqlite.md).

aiosqlite runs every call on its connection's own thread, and SQLAlchemy's adapter makes
several calls per statement: create a cursor, execute, fetch the rows, close the cursor.
Each is a round trip to that thread and back (a queue put, a thread wake-up, a
``call_soon_threadsafe`` back to the loop): up to four per statement, 131 per run of three
durable calls in ``bench/throughput.py`` (49 with this driver; docs/performance.md). Here a statement is one trip: the function queued on the thread makes the cursor,
executes, fetches every row and closes the cursor, and the adapter reads the buffered rows.
SQLAlchemy's adapter buffers every row of a (non-streamed) result anyway, so nothing is
read earlier than before; a streamed result is buffered whole too (Enverif streams none).

Closing the cursor on the thread, whatever the statement did, also means no cursor outlives
its statement: a cancelled statement's cursor cannot keep SQLite from closing the
connection (see ``app.db.session._roll_back_dropped``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiosqlite

# What a statement leaves behind: description, rowcount, lastrowid, rows.
_Outcome = tuple[Any, int, int | None, list[Any]]


def _run(
    connection: sqlite3.Connection, sql: str, parameters: Any, many: bool
) -> _Outcome:  # on the database thread
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


class OneTripCursor:
    """The part of aiosqlite's ``Cursor`` SQLAlchemy's adapter uses, one trip per statement."""

    def __init__(self, connection: OneTripConnection) -> None:
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

    async def _statement(self, sql: str, parameters: Any, many: bool) -> None:
        conn = self._connection
        # aiosqlite's own way onto its thread (what its Cursor uses).
        outcome: _Outcome = await conn._execute(_run, conn._conn, sql, parameters, many)  # type: ignore[no-untyped-call]
        self.description, self.rowcount, self.lastrowid, self._rows = outcome

    async def execute(self, sql: str, parameters: Any = ()) -> OneTripCursor:
        await self._statement(sql, parameters, False)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> OneTripCursor:
        await self._statement(sql, parameters, True)
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


class OneTripConnection(aiosqlite.Connection):
    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        # No trip: the sqlite3 cursor is made on the thread, with each statement.
        return OneTripCursor(self)


def connector(database: str, timeout_s: float) -> Callable[[], Any]:
    """``create_async_engine``'s ``async_creator``: a new connection to ``database`` (the
    arguments SQLAlchemy's aiosqlite dialect would pass)."""

    async def connect() -> OneTripConnection:
        conn = OneTripConnection(
            lambda: sqlite3.connect(database, timeout=timeout_s, check_same_thread=False), iter_chunk_size=64
        )
        conn._thread.daemon = True  # as SQLAlchemy's dialect does: never block interpreter exit
        await conn
        return conn

    return connect
