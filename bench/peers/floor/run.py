"""The floor: a raw script doing what a durable 3-call run must do at least, and nothing else.

Per run: 3 GETs of the local page server, each followed by one INSERT of its result and a
COMMIT (the call recorded durably before the next). No framework, no ORM: the database's
plain async driver, one connection per run in flight. SQLite uses Enverif's settings (WAL,
``synchronous=NORMAL``, docs/performance.md says what that does and does not survive).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import CALLS, arguments, measure  # first: it sets the offline environment

# isort: split

import httpx

TABLE = "CREATE TABLE IF NOT EXISTS floor_calls (run_id INTEGER NOT NULL, seq INTEGER NOT NULL, result TEXT NOT NULL, at VARCHAR(40) NOT NULL, PRIMARY KEY (run_id, seq))"


async def connections(db: str, url: str, n: int) -> tuple[list[Any], str]:
    """``n`` open connections with the table created, and the INSERT in the driver's style."""
    if db == "sqlite":
        import aiosqlite

        conns = [await aiosqlite.connect(url) for _ in range(n)]
        for conn in conns:
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000"):
                await conn.execute(f"PRAGMA {pragma}")
        await conns[0].execute(TABLE)
        await conns[0].commit()
        return conns, "INSERT INTO floor_calls VALUES (?, ?, ?, ?)"
    if db == "mariadb":
        from urllib.parse import urlparse

        import asyncmy

        parsed = urlparse(url)
        login = {"host": parsed.hostname, "port": parsed.port or 3306, "user": parsed.username,
                 "password": parsed.password or "", "db": parsed.path[1:], "autocommit": False}  # fmt: skip
        conns = [await asyncmy.connect(**login) for _ in range(n)]
        async with conns[0].cursor() as cur:
            await cur.execute(TABLE)
        await conns[0].commit()
        return conns, "INSERT INTO floor_calls VALUES (%s, %s, %s, %s)"
    import psycopg

    conns = [await psycopg.AsyncConnection.connect(url) for _ in range(n)]
    await conns[0].execute(TABLE)
    await conns[0].commit()
    return conns, "INSERT INTO floor_calls VALUES (%s, %s, %s, %s)"


async def insert(db: str, conn: Any, statement: str, values: tuple[Any, ...]) -> None:
    if db == "mariadb":
        async with conn.cursor() as cur:
            await cur.execute(statement, values)
    else:
        await conn.execute(statement, values)
    await conn.commit()


def floor_run(db: str, pool: asyncio.Queue[Any], statement: str, http: httpx.AsyncClient,
              page: str) -> Callable[[int], Awaitable[None]]:  # fmt: skip
    async def run(number: int) -> None:
        conn = await pool.get()
        try:
            for seq in range(CALLS):
                response = await http.get(page)
                at = datetime.now(UTC).isoformat()
                await insert(db, conn, statement, (number, seq, response.text, at))
        finally:
            pool.put_nowait(conn)

    return run


@contextlib.asynccontextmanager
async def opened(db: str, url: str, n: int) -> AsyncIterator[tuple[asyncio.Queue[Any], str]]:
    conns, statement = await connections(db, url, n)
    pool: asyncio.Queue[Any] = asyncio.Queue()
    for conn in conns:
        pool.put_nowait(conn)
    try:
        yield pool, statement
    finally:
        for conn in conns:
            result = conn.close()
            if asyncio.iscoroutine(result):
                await result


async def main() -> None:
    args = arguments(("sqlite", "mariadb", "postgres"))
    async with (
        opened(args.db, args.url, args.in_flight) as (pool, statement),
        httpx.AsyncClient(timeout=10, trust_env=False) as http,
    ):
        await measure(floor_run(args.db, pool, statement, http, f"{args.server}/page"), args)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
