"""The raw floor: what a durable 3-call run costs with nothing but the database's driver.

Each run makes 3 calls, each a GET to the page server and then an INSERT and a COMMIT of a
row recording it, with ``width`` runs in flight (the worker's ``worker_max_jobs``). No ORM,
no state machine, no queue, no events. ``enverif worker`` divided by this (measured in the
same sitting) is its share of the floor (issue 28's table measures every engine against the
same floor; ``bench/peers/floor`` is the same script for ``make bench-peers``).

- SQLite (``sqlite_floor``): one aiosqlite connection to the database file the benchmark's
  runs use, in WAL mode with ``synchronous=NORMAL`` as Enverif opens it.
- MariaDB (``mariadb_floor``): one asyncmy connection per run in flight, in a table of its
  own in the benchmark's database; it also reports mariadbd's CPU per run, the baseline of
  the worker's (``bench/cpu.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiosqlite
import asyncmy
import httpx

from bench.cpu import CpuMeter, pids_named
from bench.support import asyncmy_login

CALLS_PER_RUN = 3
TABLE = "bench_floor_calls"

# Records one call durably: (run, call, body), INSERT and COMMIT.
Record = Callable[[int, int, str], Awaitable[None]]


async def _timed(page_url: str, n: int, width: int, lanes: list[Record]) -> tuple[float, float]:
    """``n`` runs, ``width`` in flight, lane ``i`` recording with ``lanes[i % len(lanes)]``.
    Returns (runs/s, CPU ms per run of this process)."""
    pending = list(range(n))
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:

        async def runner(record: Record) -> None:
            while pending:
                run = pending.pop()
                for call in range(CALLS_PER_RUN):
                    await record(run, call, (await http.get(page_url)).text)

        started = time.perf_counter()
        cpu = time.process_time()
        await asyncio.gather(*(runner(lanes[i % len(lanes)]) for i in range(width)))
        elapsed = time.perf_counter() - started
        used = time.process_time() - cpu
    return n / elapsed, used * 1000 / n


async def sqlite_floor(database: str, page_url: str, n: int, width: int) -> tuple[float, float]:
    """``n`` raw runs, ``width`` in flight. Returns (runs/s, CPU ms per run of this process)."""
    db = await aiosqlite.connect(database)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (run INTEGER, call INTEGER, body TEXT)")
    await db.commit()
    # One connection serves every run: a transaction at a time on it, as SQLite allows one writer.
    writer = asyncio.Lock()

    async def record(run: int, call: int, body: str) -> None:
        async with writer:
            await db.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?)", (run, call, body))
            await db.commit()

    try:
        return await _timed(page_url, n, width, [record])
    finally:
        await db.execute(f"DROP TABLE {TABLE}")
        await db.commit()
        await db.close()


async def mariadb_floor(
    database_url: str, page_url: str, n: int, width: int
) -> tuple[float, float, float | None]:
    """``n`` raw runs, ``width`` in flight (a connection each), on the MariaDB database of
    ``database_url``. Returns (runs/s, CPU ms per run of this process, mariadbd's CPU ms per
    run or None)."""
    conns = [await asyncmy.connect(**asyncmy_login(database_url)) for _ in range(width)]

    def recorder(conn: asyncmy.Connection) -> Record:
        async def record(run: int, call: int, body: str) -> None:
            async with conn.cursor() as cur:
                await cur.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s)", (run, call, body))
            await conn.commit()

        return record

    try:
        async with conns[0].cursor() as cur:
            await cur.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (run INTEGER, `call` INTEGER, body TEXT)")
        await conns[0].commit()
        meter = CpuMeter({"mariadbd": pids_named("mariadbd")})
        meter.start()
        rate, cpu_ms = await _timed(page_url, n, width, [recorder(conn) for conn in conns])
        mariadbd_ms = meter.stop(n).cpu_ms_per_run["mariadbd"]
        async with conns[0].cursor() as cur:
            await cur.execute(f"DROP TABLE {TABLE}")
        await conns[0].commit()
    finally:
        for conn in conns:
            conn.close()
    return rate, cpu_ms, mariadbd_ms
