"""API request latency and throughput, beside a plain uvicorn endpoint measured in the same run.

    .venv/bin/python bench/api.py [--requests 400] [--concurrent-requests 800] [--baseline DIR]
                                  [--profile FILE]

``enverif serve`` runs in its own process against MariaDB (a fresh schema, dropped after) and
Redis; one keep-alive client (httpx) sends, one request at a time:

* ``{ __typename }`` (no database), ``{ viewer { role } }`` (the token), ``agents(first:10)``
  (a page of ten agents) and the ``startRun`` mutation: p50/p95 in ms;
* ``startRun`` with 8 requests in flight: requests/s.

The floor is a plain uvicorn + Starlette endpoint answering the same JSON in another process:
every figure is also printed as a ratio to it. ``--baseline DIR`` serves another checkout's
code too (for instance main's, in a second worktree: ``git worktree add --detach DIR main``),
taking turns request by request with this checkout's server, and prints this/baseline.
``--profile FILE`` writes a cProfile of the API process (open it with ``python -m pstats``).
No worker runs: started runs stay queued, and the Redis keys are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from redis.asyncio import Redis

from app.clock import utcnow
from app.db.orm import Agent
from app.domain.actors import SYSTEM
from app.graphql.ids import to_global_id
from app.services import auth
from app.services.agents import version_row
from app.services.runtime import open_runtime
from app.settings import Settings
from bench.cpu import process_cpu_s
from bench.support import create_database

PLAIN_SERVER = """
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def graphql(request):
    await request.body()
    return JSONResponse({{"data": {{"__typename": "Query"}}}})
uvicorn.run(Starlette(routes=[Route("/graphql", graphql, methods=["POST"])]),
            host="127.0.0.1", port={port}, log_level="error")
"""

QUERIES: dict[str, str] = {
    "typename": "{ __typename }",
    "viewer": "{ viewer { role } }",
    "agents_first_10": "{ agents(first: 10) { edges { node { id name status } } } }",
}
START_RUN = "mutation($a: ID!) { startRun(agentId: $a) { id status } }"
IN_FLIGHT = 8


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _api_command(port: int, profile: str | None) -> list[str]:
    serve = ["serve", "--port", str(port)]
    if profile:
        return [sys.executable, "-m", "cProfile", "-o", profile, "-m", "app.cli", *serve]
    return [sys.executable, "-m", "app.cli", *serve]


def _env(settings: Settings, source: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "ENVERIF_DATABASE_URL": settings.effective_database_url,
        "ENVERIF_REDIS_URL": settings.effective_redis_url,
        "ENVERIF_REDIS_PREFIX": settings.redis_prefix,
        "ENVERIF_LOG_LEVEL": "warning",
    }
    if source:
        env["PYTHONPATH"] = source
    return env


async def _wait_ready(client: httpx.AsyncClient, path: str) -> None:
    for _ in range(1200):  # two minutes: a loaded machine starts processes slowly
        try:
            response = await client.post(path, json={"query": "{ __typename }"})
            if response.status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{client.base_url} did not come up")


async def latencies(
    servers: list[tuple[httpx.AsyncClient, int]], body: dict[str, Any], n: int
) -> list[tuple[list[float], float]]:
    """Per server: milliseconds per request and the server's CPU ms per request. One request
    at a time on one kept-alive connection per server; the servers take turns, so load from
    elsewhere on the machine hits them alike (the CPU figure is the steadier one under load)."""
    for client, _ in servers:  # warm-up: connections, caches
        for _ in range(max(20, n // 10)):
            _check(await client.post("/graphql", json=body))
    found: list[list[float]] = [[] for _ in servers]
    cpu = [process_cpu_s(pid) for _, pid in servers]
    for _ in range(n):
        for (client, _), times in zip(servers, found, strict=True):
            t0 = time.perf_counter()
            response = await client.post("/graphql", json=body)
            times.append((time.perf_counter() - t0) * 1000)
            _check(response)
    cpu_ms = [(process_cpu_s(pid) - before) * 1000 / n for (_, pid), before in zip(servers, cpu, strict=True)]
    return list(zip(found, cpu_ms, strict=True))


async def rates(servers: list[tuple[httpx.AsyncClient, int]], body: dict[str, Any], n: int) -> list[float]:
    """Requests/s with IN_FLIGHT requests in flight, per server: in rounds, taking turns."""
    rounds = 4
    elapsed = [0.0 for _ in servers]
    for _ in range(rounds):
        for i, (client, _) in enumerate(servers):
            elapsed[i] += await _burst(client, body, n // rounds)
    return [(n // rounds) * rounds / e for e in elapsed]


async def _burst(client: httpx.AsyncClient, body: dict[str, Any], n: int) -> float:
    remaining = n

    async def sender() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            _check(await client.post("/graphql", json=body))

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
    return time.perf_counter() - started


def _check(response: httpx.Response) -> None:
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"request failed: {response.status_code} {body}")


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(statistics.quantiles(ms, n=20)[-1], 2)}


async def measure(args: argparse.Namespace, settings: Settings, token: str, agent: str) -> dict[str, Any]:
    """Every figure for the plain endpoint, this checkout and (``--baseline``) another one."""
    names = ["plain", "this"] + (["baseline"] if args.baseline else [])
    ports = {name: _free_port() for name in names}
    procs = {
        "plain": _start([sys.executable, "-c", PLAIN_SERVER.format(port=ports["plain"])], None),
        "this": _start(_api_command(ports["this"], args.profile), _env(settings, None)),
    }
    if args.baseline:
        procs["baseline"] = _start(
            _api_command(ports["baseline"], None), _env(settings, args.baseline), cwd=args.baseline
        )
    limits = httpx.Limits(max_keepalive_connections=IN_FLIGHT, max_connections=IN_FLIGHT)
    headers = {"Authorization": f"Bearer {token}"}
    report: dict[str, Any] = {name: {} for name in names}
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = {
                name: await stack.enter_async_context(
                    httpx.AsyncClient(
                        base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=60
                    )
                )
                for name, port in ports.items()
            }
            for client in clients.values():
                await _wait_ready(client, "/graphql")
            servers = {name: (clients[name], procs[name].pid) for name in names}
            apis = [servers[name] for name in names[1:]]
            ((plain, plain_cpu),) = await latencies([servers["plain"]], QUERIES, args.requests)
            (plain_rate,) = await rates([servers["plain"]], QUERIES, args.concurrent_requests)
            report["plain"] = {**_summary(plain), "cpu_ms_per_request": round(plain_cpu, 3),
                               "requests_per_s_8_in_flight": round(plain_rate, 1)}  # fmt: skip
            print(f"plain uvicorn: {report['plain']}", flush=True)
            start_run = {"query": START_RUN, "variables": {"a": agent}}
            bodies = {name: {"query": query} for name, query in QUERIES.items()} | {"startRun": start_run}
            for scenario, body in bodies.items():
                found = await latencies(apis, body, args.requests)
                for name, (ms, cpu_ms) in zip(names[1:], found, strict=True):
                    figures = {**_summary(ms), "cpu_ms_per_request": round(cpu_ms, 3)}
                    figures["p50_ratio_to_plain"] = round(figures["p50_ms"] / report["plain"]["p50_ms"], 2)
                    report[name][scenario] = figures
                    print(f"{name}: {scenario}: {figures}", flush=True)
            per_server = await rates(apis, start_run, args.concurrent_requests)
            for name, per_s in zip(names[1:], per_server, strict=True):
                report[name]["startRun_8_in_flight"] = {
                    "requests_per_s": round(per_s, 1), "ratio_to_plain": round(per_s / plain_rate, 4)
                }  # fmt: skip
                print(f"{name}: startRun with {IN_FLIGHT} in flight: {per_s:.1f} req/s", flush=True)
            for name in names[1:]:
                figures = report[name]
                figures["viewer_p50_over_typename_p50"] = round(
                    figures["viewer"]["p50_ms"] / figures["typename"]["p50_ms"], 2
                )
            if args.baseline:
                report["this_over_baseline"] = {
                    **{f"{s}_p50": round(report["this"][s]["p50_ms"] / report["baseline"][s]["p50_ms"], 2)
                       for s in bodies},
                    **{f"{s}_cpu": round(report["this"][s]["cpu_ms_per_request"]
                                         / report["baseline"][s]["cpu_ms_per_request"], 2)
                       for s in bodies},
                    "startRun_8_in_flight_throughput": round(
                        report["this"]["startRun_8_in_flight"]["requests_per_s"]
                        / report["baseline"]["startRun_8_in_flight"]["requests_per_s"], 2),
                }  # fmt: skip
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            proc.wait(timeout=30)
    return report


def _start(command: list[str], env: dict[str, str] | None, cwd: str | None = None) -> subprocess.Popen[bytes]:
    # ``python -m`` puts the working directory first on sys.path: run a checkout's code from it.
    return subprocess.Popen(command, env=env, cwd=cwd)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400, help="requests per latency figure")
    parser.add_argument("--concurrent-requests", type=int, default=800)
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--baseline", metavar="DIR", help="also serve this checkout's code (e.g. main's)")
    parser.add_argument("--profile", help="write a cProfile of the API process to this file")
    args = parser.parse_args()

    url, drop_database = await create_database(args.server)
    settings = Settings(database_url=url, redis_url=args.redis_url,
                        redis_prefix=f"enverif-bench-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        rt = await open_runtime(settings)
        try:
            async with rt.sessionmaker() as session:
                workspace, token = await auth.create_workspace(session, name="bench")
            async with rt.sessionmaker() as session, session.begin():
                agents = [_agent(workspace.id, f"agent-{i}") for i in range(12)]
                session.add_all(agents)
                await session.flush()
                session.add_all([version_row(a, SYSTEM, a.created_at) for a in agents])
                agent = to_global_id("Agent", agents[0].id)
        finally:
            await rt.close()
        report = await measure(args, settings, token, agent)
        report = {"database": "mariadb", "baseline": args.baseline, **report}
        report["targets"] = {
            "viewer_p50_over_typename_p50": "<= 2",
            "startRun_p50_ms": "<= 6",
            "startRun_8_in_flight": ">= 2x main's requests/s (--baseline DIR, a checkout of main)",
        }
        print(json.dumps(report, indent=2))
    finally:
        redis = Redis.from_url(args.redis_url)
        async for key in redis.scan_iter(match=f"*{settings.redis_prefix}*"):
            await redis.delete(key)
        await redis.aclose()
        await drop_database()


def _agent(workspace_id: int, name: str) -> Agent:
    now = utcnow()
    return Agent(
        workspace_id=workspace_id,
        name=name,
        description=None,
        instructions="benchmark",
        status="ACTIVE",
        model={"provider": "scripted", "steps": [{"final": "done"}]},
        tools=[],
        policy={},
        memory_max_items=5,
        memory_max_chars=1000,
        created_at=now,
        updated_at=now,
    )


if __name__ == "__main__":
    asyncio.run(main())
