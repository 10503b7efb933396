"""The raw floor on SQLite: what a durable 3-call run costs with nothing but the driver.

Each run makes 3 calls, each a GET to the page server and then an INSERT and a COMMIT of a
row recording it, with ``width`` runs in flight (the worker's ``worker_max_jobs``), on one
aiosqlite connection to the same database file the benchmark's runs use, in WAL mode with
``synchronous=NORMAL`` as Enverif opens it. No ORM, no state machine, no queue, no events.
``enverif worker`` divided by this (measured in the same sitting) is its share of the floor
(issue 28's table measures every engine against the same floor).
"""

from __future__ import annotations

import asyncio
import time

import aiosqlite
import httpx

CALLS_PER_RUN = 3


async def sqlite_floor(database: str, page_url: str, n: int, width: int) -> tuple[float, float]:
    """``n`` raw runs, ``width`` in flight. Returns (runs/s, CPU ms per run of this process)."""
    db = await aiosqlite.connect(database)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.execute("CREATE TABLE IF NOT EXISTS bench_floor_calls (run INTEGER, call INTEGER, body TEXT)")
    await db.commit()
    # One connection serves every run: a transaction at a time on it, as SQLite allows one writer.
    writer = asyncio.Lock()
    pending = list(range(n))
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:

        async def runner() -> None:
            while pending:
                run = pending.pop()
                for call in range(CALLS_PER_RUN):
                    body = (await http.get(page_url)).text
                    async with writer:
                        await db.execute("INSERT INTO bench_floor_calls VALUES (?, ?, ?)", (run, call, body))
                        await db.commit()

        started = time.perf_counter()
        cpu = time.process_time()
        await asyncio.gather(*(runner() for _ in range(width)))
        elapsed = time.perf_counter() - started
        used = time.process_time() - cpu
    await db.execute("DROP TABLE bench_floor_calls")
    await db.commit()
    await db.close()
    return n / elapsed, used * 1000 / n
