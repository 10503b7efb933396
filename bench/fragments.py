"""Fragment bombs: ``/healthz`` and a ``viewer`` query while 20 of them are in flight.

    .venv/bin/python bench/fragments.py [--requests 200] [--levels 24] [--seconds-cap 120]

``enverif serve`` runs in its own process, in production mode, against MariaDB (a fresh
schema, dropped after) and Redis. The bomb is a ~1 KB document whose fragments each spread
the previous one twice (``fragment f24 on Run { ...f23 ...f23 }`` ... ``f0 { id }``, plain
and aliased), sent without a token and with a fresh comment each time so the document cache
cannot answer it (docs/operating/security.md). Before the shape limits it cost 2^24 walks of
strawberry's limiters: seconds during which the process answered nothing.

One measuring client sends ``GET /healthz`` and ``{ viewer { role } }`` (a viewer token),
one request at a time, alternating:

* **idle**: nothing else runs: the baseline, measured in the same run;
* **bombs**: another process keeps 20 bombs in flight: 20 connections, each sending the
  next bomb as soon as the previous one is answered (half plain, half aliased);
* **small**: the same 20 connections sending ``{ __typename }`` instead, for reference: the
  cost of any 20 requests in flight, which no document limit can remove.

Printed per scenario: p50/p95 of each, the ratio of its p50 to idle's, the bombs answered
per second and how many were refused with ``VALIDATION_FAILED`` (all of them must be).
Target: under bombs, both p50s within 2x idle's.

Also printed per scenario: **api_cpu_share**, the API process's CPU time over the scenario's
wall time (of one core): near 1 the API's own event loop is what the others wait behind
(what fair admission shares out); well below 1 the wait is the machine's.

Latencies on a shared machine move with its load (another process's CPU delays every
request alike), so the bench also prints **cpu_ms_per_request**: the API process's own CPU
time (user + system, from /proc) per request, for bombs (plain and aliased), ``{ __typename }``
and ``/healthz``, sent one at a time. A bomb that costs the server less than an ordinary
small request cannot slow the others more than those would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from app.domain.agents import Role
from app.services import auth
from app.services.runtime import open_runtime
from app.settings import Settings
from bench.api import _api_command, _env, _free_port, _start, _wait_ready
from bench.support import bench_settings
from tests.support.graphql import doubling

IN_FLIGHT = 20
VIEWER = "{ viewer { role } }"
SMALL = "{ __typename }"


def _attack(port: int, kind: str, levels: int, stop: Any, counts: Any) -> None:
    """In its own process (so its client's CPU is not the measuring client's): IN_FLIGHT
    connections, each sending the next document as soon as the previous one is answered."""

    async def sender(client: httpx.AsyncClient, n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            if kind == "small":
                query = SMALL
            else:
                query = doubling(levels, aliased=n % 2 == 1) + f"\n# {n}-{i}"
            response = await client.post("/graphql", json={"query": query})
            errors = response.json().get("errors") or []
            with counts.get_lock():
                counts[0] += 1
                if errors and all(e.get("extensions", {}).get("code") == "VALIDATION_FAILED" for e in errors):
                    counts[1] += 1

    async def main() -> None:
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=600
        ) as client:
            await asyncio.gather(*(sender(client, n) for n in range(IN_FLIGHT)))

    asyncio.run(main())


async def _measure(client: httpx.AsyncClient, token: str, n: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"healthz": [], "viewer": []}
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(n):
        t0 = time.perf_counter()
        response = await client.get("/healthz")
        found["healthz"].append((time.perf_counter() - t0) * 1000)
        # 503 "degraded" is the answer without a worker (none runs here): still an answer.
        if response.status_code not in (200, 503) or "database" not in response.json():
            raise RuntimeError(f"/healthz: {response.status_code} {response.text}")
        t0 = time.perf_counter()
        response = await client.post("/graphql", json={"query": VIEWER}, headers=headers)
        found["viewer"].append((time.perf_counter() - t0) * 1000)
        if response.json().get("errors"):
            raise RuntimeError(f"viewer: {response.text}")
    return found


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def _cpu_per_request(client: httpx.AsyncClient, pid: int, n: int, levels: int) -> dict[str, float]:
    """The API process's CPU milliseconds per request of each kind, one request at a time."""
    kinds: dict[str, Any] = {
        "bomb": lambda i: client.post("/graphql", json={"query": doubling(levels, aliased=False) + f"\n# c{i}"}),
        "bomb_aliased": lambda i: client.post("/graphql", json={"query": doubling(levels, aliased=True) + f"\n# c{i}"}),
        "small": lambda i: client.post("/graphql", json={"query": SMALL + f"\n# c{i}"}),
        "healthz": lambda i: client.get("/healthz"),
    }  # fmt: skip
    found: dict[str, float] = {}
    for name, send in kinds.items():
        for i in range(20):  # warm-up
            await send(-i)
        before = _cpu_s(pid)
        for i in range(n):
            await send(i)
        found[name] = round((_cpu_s(pid) - before) / n * 1000, 2)
    return found


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(statistics.quantiles(ms, n=20)[-1], 2)}


async def run(args: argparse.Namespace, settings: Settings, token: str) -> dict[str, Any]:
    port = _free_port()
    env = _env(settings, None) | {"ENVERIF_ENV": "production"}
    server = _start(_api_command(port, None), env)
    report: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=args.seconds_cap) as client:
            await _wait_ready(client, "/graphql")
            await _measure(client, token, 20)  # warm-up
            report["cpu_ms_per_request"] = await _cpu_per_request(
                client, server.pid, args.requests, args.levels
            )
            print(f"cpu_ms_per_request: {report['cpu_ms_per_request']}", flush=True)
            idle = await _measure(client, token, args.requests)
            report["idle"] = {name: _summary(ms) for name, ms in idle.items()}
            print(f"idle: {report['idle']}", flush=True)
            for kind in ("bombs", "small"):
                stop = multiprocessing.Event()
                counts = multiprocessing.Array("q", 2)
                attacker = multiprocessing.Process(
                    target=_attack, args=(port, kind, args.levels, stop, counts)
                )
                attacker.start()
                try:
                    await asyncio.sleep(1.0)  # the 20 connections open and fill
                    started, before, cpu_before = time.perf_counter(), counts[0], _cpu_s(server.pid)
                    loaded = await _measure(client, token, args.requests)
                    elapsed = time.perf_counter() - started
                    rate = (counts[0] - before) / elapsed
                    cpu_share = (_cpu_s(server.pid) - cpu_before) / elapsed
                finally:
                    stop.set()
                    attacker.join(timeout=args.seconds_cap)
                    if attacker.is_alive():
                        attacker.kill()
                figures: dict[str, Any] = {}
                for name, ms in loaded.items():
                    figures[name] = _summary(ms)
                    figures[name]["p50_over_idle"] = round(
                        figures[name]["p50_ms"] / report["idle"][name]["p50_ms"], 2
                    )
                figures["answered_per_s"] = round(rate, 1)
                # Of one core: near 1 the API itself is the bottleneck (what admission shares
                # out); well below it, the wait is the machine's (other processes' CPU).
                figures["api_cpu_share"] = round(cpu_share, 2)
                figures["answered"], figures["refused_validation_failed"] = counts[0], counts[1]
                report[kind] = figures
                print(f"{kind}: {figures}", flush=True)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    bombs = report["bombs"]
    report["target_met"] = (
        bombs["healthz"]["p50_over_idle"] <= 2
        and bombs["viewer"]["p50_over_idle"] <= 2
        and bombs["answered"] == bombs["refused_validation_failed"]
    )
    return report


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind per scenario")
    parser.add_argument("--levels", type=int, default=24, help="fragment levels of the bomb")
    parser.add_argument("--seconds-cap", type=float, default=120, help="timeout of one request")
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    async with bench_settings(args.server, args.redis_url) as settings:
        rt = await open_runtime(settings)
        try:
            async with rt.sessionmaker() as session:
                await auth.create_workspace(session, name="bench")
            async with rt.sessionmaker() as session:
                token = await auth.create_token(session, workspace_name="bench", role=Role.VIEWER)
        finally:
            await rt.close()
        report = await run(args, settings, token)
        report = {"database": "mariadb", "levels": args.levels, "in_flight": IN_FLIGHT, **report}
        report["targets"] = {"bombs.healthz.p50_over_idle": "<= 2", "bombs.viewer.p50_over_idle": "<= 2"}
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
