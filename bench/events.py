"""Live-event latency: commit -> websocket client receipt, beside raw Redis pub/sub -> websocket.

    .venv/bin/python bench/events.py [--events 200] [--fanout 1000] [--fanout-events 30]
                                     [--server mysql+asyncmy://root@127.0.0.1:3306/test] [--profile FILE]

Two servers run as their own processes on loopback, measured in the same run:

* Enverif: ``enverif serve`` (MariaDB, a fresh schema dropped afterwards; Redis at
  127.0.0.1:6379). Clients subscribe to ``runTree`` over graphql-transport-ws. An event's
  latency runs from its transaction's commit (appended under the root row's lock, like the
  chokepoint) to its receipt by the client, after publish, hub, subscription and GraphQL.
* Baseline: a bare relay (this file with ``--relay``) with one Redis subscriber that
  forwards every message as is to every connected websocket. Latency runs from just
  before ``PUBLISH`` to receipt. No database, no GraphQL: the floor for pub/sub -> websocket.

1. One subscriber: ``--events`` events, one at a time (each awaited before the next).
2. ``--fanout`` subscribers to one tree on one API process: ``--fanout-events`` events,
   0.1 s apart; every subscriber must receive every event.

Targets: one subscriber p99 <= 5 ms; with 1,000 subscribers all receive everything, p99 <= 250 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
ENVERIF = str(Path(sys.executable).parent / "enverif")
SUBSCRIBE = "subscription($root: ID!, $after: Int) { runTree(rootRunId: $root, afterSeq: $after) { seq } }"
CONNECT_BATCH = 50


# -- the baseline relay (a process of its own) -------------------------------------------


def relay_app(redis_url: str, channel: str) -> Any:
    import redis.asyncio as aioredis
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    clients: set[asyncio.Queue[str]] = set()

    async def forward() -> None:
        client = aioredis.Redis.from_url(redis_url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["type"] == "message":
                text = message["data"].decode()
                for queue in clients:
                    queue.put_nowait(text)

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        queue: asyncio.Queue[str] = asyncio.Queue()
        clients.add(queue)
        try:
            await ws.send_text("ready")
            while True:
                await ws.send_text(await queue.get())
        finally:
            clients.discard(queue)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        task = asyncio.create_task(forward())
        yield
        task.cancel()

    return Starlette(routes=[WebSocketRoute("/ws", endpoint)], lifespan=lifespan)


def run_relay(port: int, redis_url: str, channel: str) -> None:
    import uvicorn

    # Configured as `enverif serve` is by default (ENVERIF_WS_PER_MESSAGE_DEFLATE).
    uvicorn.run(
        relay_app(redis_url, channel),
        host="127.0.0.1",
        port=port,
        log_level="info",
        ws_per_message_deflate=False,
    )


# -- clients -------------------------------------------------------------------------------


class Receiver:
    """One websocket client recording when each seq arrived (perf_counter)."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self.ws: Any = None
        self.task: asyncio.Task[None] | None = None
        self.wanted: tuple[int, asyncio.Event] | None = None

    async def _read(self, parse: Callable[[str], int | None]) -> None:
        async for raw in self.ws:
            now = time.perf_counter()
            seq = parse(raw)
            if seq is None:
                continue
            self.arrived[seq] = now
            if self.wanted is not None and seq >= self.wanted[0]:
                self.wanted[1].set()

    async def until(self, seq: int, timeout_s: float = 30) -> None:
        if max(self.arrived, default=0) >= seq:
            return
        event = asyncio.Event()
        self.wanted = (seq, event)
        await asyncio.wait_for(event.wait(), timeout_s)


def enverif_seq(raw: str | bytes) -> int | None:
    message = json.loads(raw)
    if message.get("type") == "next":
        return int(message["payload"]["data"]["runTree"]["seq"])
    if message.get("type") in {"error", "complete"}:
        raise RuntimeError(f"subscription ended: {message}")
    return None


def relay_seq(raw: str | bytes) -> int | None:
    return None if raw == "ready" else int(json.loads(raw)["seq"])


async def enverif_client(url: str, token: str, root_gid: str, after: int) -> Receiver:
    from websockets.asyncio.client import connect

    r = Receiver()
    r.ws = await connect(url, subprotocols=["graphql-transport-ws"], max_queue=None)  # type: ignore[list-item]
    await r.ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}))
    assert json.loads(await r.ws.recv())["type"] == "connection_ack"
    payload = {"query": SUBSCRIBE, "variables": {"root": root_gid, "after": after}}
    await r.ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
    r.task = asyncio.create_task(r._read(enverif_seq))
    return r


async def relay_client(url: str) -> Receiver:
    from websockets.asyncio.client import connect

    r = Receiver()
    r.ws = await connect(url, max_queue=None)
    assert await r.ws.recv() == "ready"
    r.task = asyncio.create_task(r._read(relay_seq))
    return r


async def connect_many(n: int, make: Callable[[], Awaitable[Receiver]]) -> list[Receiver]:
    clients: list[Receiver] = []
    for start in range(0, n, CONNECT_BATCH):
        clients += await asyncio.gather(*(make() for _ in range(min(CONNECT_BATCH, n - start))))
    return clients


async def close_all(clients: list[Receiver]) -> None:
    for r in clients:
        if r.task is not None:
            r.task.cancel()
    await asyncio.gather(*(r.ws.close() for r in clients), return_exceptions=True)


# -- measuring -----------------------------------------------------------------------------


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2),
            "samples": len(ordered)}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    clients: list[Receiver],
    emit: Callable[[], Awaitable[tuple[int, float]]],
    count: int,
    gap_s: float,
    server_pid: int,
) -> dict[str, Any]:
    """Emit ``count`` events; with ``gap_s`` 0 each is awaited by every client first. Also
    the server process's CPU per delivered event (one event to one subscriber)."""
    cpu_before = cpu_seconds(server_pid)
    sent: dict[int, float] = {}
    for _ in range(count):
        seq, at = await emit()
        sent[seq] = at
        if gap_s:
            await asyncio.sleep(gap_s)
        else:
            await asyncio.gather(*(r.until(seq) for r in clients))
    last = max(sent)
    await asyncio.gather(*(r.until(last, timeout_s=60) for r in clients), return_exceptions=True)
    cpu_s = cpu_seconds(server_pid) - cpu_before
    samples = [r.arrived[s] - t for r in clients for s, t in sent.items() if s in r.arrived]
    complete = sum(all(s in r.arrived for s in sent) for r in clients)
    return {**percentiles(samples), "subscribers": len(clients), "events": count,
            "subscribers_with_every_event": complete,
            "server_cpu_us_per_delivery": round(cpu_s * 1e6 / max(len(samples), 1), 1)}  # fmt: skip


# -- the run -------------------------------------------------------------------------------


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def start_server(
    cmd: list[str], env: dict[str, str] | None, log: Path, pattern: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server process logging to ``log``; returns it and the first match of
    ``pattern`` in its log (its address)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while not (found := re.search(pattern, log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return proc, found.group(1) if found.groups() else found.group(0)


def _api_command(profile: str | None) -> list[str]:
    serve = ["serve", "--port", "0"]
    if profile:
        return [sys.executable, "-m", "cProfile", "-o", profile, "-m", "app.cli", *serve]
    return [ENVERIF, *serve]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--fanout-events", type=int, default=30)
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--profile", help="write a cProfile of the API process to this file")
    args = parser.parse_args()

    from sqlalchemy import select

    from app.clock import utcnow
    from app.db import orm
    from app.domain.actors import SYSTEM
    from app.domain.run_events import EventType
    from app.domain.runs import RunTrigger
    from app.events.publish import publish_events
    from app.graphql.ids import to_global_id
    from app.keys import events_channel
    from app.services import auth
    from app.services.agents import version_row
    from app.services.runtime import open_runtime
    from app.services.transitions import NewRun, NewTree, TreeTx
    from app.settings import Settings
    from bench.support import create_database

    url, drop_database = await create_database(args.server)
    prefix = f"enverif-bench-{uuid.uuid4().hex[:6]}"
    settings = Settings(database_url=url, redis_url=args.redis_url, redis_prefix=prefix)
    rt = await open_runtime(settings)
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[Receiver] = []
    try:
        async with rt.sessionmaker() as session:
            workspace, token = await auth.create_workspace(session, name="bench")
        now = utcnow()
        async with rt.sessionmaker() as session, session.begin():
            agent = orm.Agent(workspace_id=workspace.id, name="bench", status="ACTIVE", instructions="bench",
                              model={"provider": "scripted", "steps": []}, tools=[], policy={},
                              memory_max_items=5, memory_max_chars=1000, created_at=now, updated_at=now)  # fmt: skip
            session.add(agent)
            await session.flush()
            session.add(version_row(agent, SYSTEM, agent.created_at))
            tree = NewTree(session)  # the path every run takes, minus its job after commit
            root = await tree.create_run(NewRun(agent=agent, trigger=RunTrigger.API))
            await tree.finish()
        await publish_events(rt.redis, prefix, tree.events)
        seq = 1
        latest = 1

        async def commit_event() -> tuple[int, float]:
            nonlocal latest
            async with rt.sessionmaker() as session:
                async with session.begin():
                    locked = await session.scalar(
                        select(orm.Run).where(orm.Run.id == root.id).with_for_update()
                    )
                    assert locked is not None
                    tx = TreeTx(session, locked, utcnow())
                    tx.emit(locked, EventType.MEMORY_WRITTEN, payload={"bench": True})
                    await tx.write_events()
                committed = time.perf_counter()
            await publish_events(rt.redis, prefix, tx.events)
            latest = tx.events[-1].seq
            return latest, committed

        relay_seq_n = 0

        async def publish_raw() -> tuple[int, float]:
            nonlocal relay_seq_n
            relay_seq_n += 1
            at = time.perf_counter()
            await rt.redis.publish(
                f"{prefix}:bench-relay", json.dumps({"seq": relay_seq_n, "pad": "x" * 200})
            )
            return relay_seq_n, at

        env = {**os.environ, "ENVERIF_DATABASE_URL": url, "ENVERIF_REDIS_URL": args.redis_url,
               "ENVERIF_REDIS_PREFIX": prefix, "ENVERIF_LOG_LEVEL": "warning",
               # One token's --fanout subscribers from one address: over the default socket caps.
               "ENVERIF_WS_MAX_SOCKETS_PER_TOKEN": str(args.fanout + 10),
               "ENVERIF_WS_MAX_PENDING_SOCKETS_PER_ADDRESS": str(args.fanout + 10)}  # fmt: skip
        api, base = await asyncio.to_thread(
            start_server, _api_command(args.profile), env, Path(f"/tmp/{prefix}-api.log"),
            r"Enverif API at (http://\S+)/graphql",
        )  # fmt: skip
        procs.append(api)
        ws_url = base.replace("http://", "ws://") + "/graphql"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            relay_port = probe.getsockname()[1]
        relay_cmd = [
            sys.executable,
            __file__,
            "--relay",
            str(relay_port),
            args.redis_url,
            f"{prefix}:bench-relay",
        ]
        relay, _ = await asyncio.to_thread(
            start_server, relay_cmd, None, Path(f"/tmp/{prefix}-relay.log"), r"Application startup complete"
        )
        procs.append(relay)
        relay_url = f"ws://127.0.0.1:{relay_port}/ws"

        root_gid = to_global_id("Run", root.id)
        report: dict[str, Any] = {"database": "mariadb", "channel": events_channel(prefix)}

        # 1. one subscriber
        clients = [await enverif_client(ws_url, token, root_gid, 0)]
        await clients[0].until(seq)
        for _ in range(20):  # warm up
            await clients[0].until((await commit_event())[0])
        report["one_subscriber"] = await measure(clients, commit_event, args.events, 0, api.pid)
        print(json.dumps({"one_subscriber": report["one_subscriber"]}), file=sys.stderr, flush=True)
        await close_all(clients)
        clients = [await relay_client(relay_url)]
        for _ in range(20):
            await clients[0].until((await publish_raw())[0])
        report["one_subscriber_baseline_raw_pubsub"] = await measure(
            clients, publish_raw, args.events, 0, relay.pid
        )
        print(
            json.dumps({"one_subscriber_baseline_raw_pubsub": report["one_subscriber_baseline_raw_pubsub"]}),
            file=sys.stderr,
            flush=True,
        )
        await close_all(clients)

        # 2. fan-out to one tree on one API process
        current = latest
        clients = await connect_many(args.fanout, lambda: enverif_client(ws_url, token, root_gid, current))
        warm = (await commit_event())[0]
        await asyncio.gather(*(r.until(warm, timeout_s=120) for r in clients))
        report["fanout"] = await measure(clients, commit_event, args.fanout_events, 0.1, api.pid)
        print(json.dumps({"fanout": report["fanout"]}), file=sys.stderr, flush=True)
        await close_all(clients)
        clients = await connect_many(args.fanout, lambda: relay_client(relay_url))
        report["fanout_baseline_raw_pubsub"] = await measure(
            clients, publish_raw, args.fanout_events, 0.1, relay.pid
        )
        print(
            json.dumps({"fanout_baseline_raw_pubsub": report["fanout_baseline_raw_pubsub"]}),
            file=sys.stderr,
            flush=True,
        )
        await close_all(clients)
        clients = []

        one, fan = report["one_subscriber"], report["fanout"]
        report["one_subscriber_p99_vs_baseline"] = round(
            one["p99_ms"] / max(report["one_subscriber_baseline_raw_pubsub"]["p99_ms"], 0.01), 2
        )
        report["fanout_p99_vs_baseline"] = round(
            fan["p99_ms"] / max(report["fanout_baseline_raw_pubsub"]["p99_ms"], 0.01), 2
        )
        report["targets"] = {
            "one_subscriber_p99_ms_le_5": one["p99_ms"] <= 5,
            "fanout_every_subscriber_every_event": fan["subscribers_with_every_event"] == args.fanout,
            "fanout_p99_ms_le_250": fan["p99_ms"] <= 250,
        }
        print(json.dumps(report, indent=2))
    finally:
        await close_all(clients)
        for proc in procs:
            proc.terminate()
        await asyncio.to_thread(stop_all, procs)
        await rt.close()
        await drop_database()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--relay":
        run_relay(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        asyncio.run(main())
