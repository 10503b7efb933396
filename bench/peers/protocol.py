"""What every peer's runner shares (standard library only: it is imported from each peer's venv).

A runner is started by ``bench/peers/compare.py`` as ``python run.py --db DB --url URL
--server URL --runs N --in-flight K``. It sets its engine up, makes one warm-up batch of runs (so
that imports, schema creation and the connection pool are behind it), prints ``ready`` and
waits for ``go`` on its standard input; then it makes the N timed runs, K in flight, prints
one JSON line ``{"runs": N, "elapsed_s": ...}`` and exits. The comparison measures the CPU
of the runner's process and of the database between ``go`` and that line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable

# Set before any peer is imported: no telemetry, no tracing, no update check. Every address a
# runner is given is on loopback; none of these lets a library reach anything else.
OFFLINE_ENV = {
    "DO_NOT_TRACK": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_OTEL_ENABLED": "false",
    "OTEL_SDK_DISABLED": "true",
    "NO_PROXY": "*",
    "no_proxy": "*",
}
os.environ.update(OFFLINE_ENV)

CALLS = 3  # tool calls per run, each recorded durably before the next


def arguments(databases: tuple[str, ...]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=databases, required=True)
    parser.add_argument("--url", required=True, help="the database (a file path for sqlite)")
    parser.add_argument("--server", required=True, help="the local page server (http://127.0.0.1:PORT)")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--in-flight", type=int, default=16)
    return parser.parse_args()


async def in_flight(run: Callable[[int], Awaitable[None]], first: int, count: int, width: int) -> None:
    """Runs ``first`` .. ``first + count - 1``, ``width`` at a time (a new one as each ends)."""
    numbers = iter(range(first, first + count))

    async def lane() -> None:
        for number in numbers:
            await run(number)

    await asyncio.gather(*(lane() for _ in range(width)))


async def measure(run: Callable[[int], Awaitable[None]], args: argparse.Namespace) -> None:
    """The warm-up batch, the handshake, the timed runs and the report line."""
    await in_flight(run, 0, args.in_flight, args.in_flight)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started = time.perf_counter()
    await in_flight(run, args.in_flight, args.runs, args.in_flight)
    elapsed = time.perf_counter() - started
    print(json.dumps({"runs": args.runs, "elapsed_s": elapsed}), flush=True)
