"""Live-tree tests: a graphql-transport-ws client that reads a ``runTree`` stream to its
``complete``, GraphQL over real HTTP, ``enverif serve`` processes, and the demo-like
three-level tree (lead -> enricher -> poster, whose webhook call waits for an approval)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from app.settings import Settings
from tests.conftest import GraphQLClient
from tests.support.runs import create_agent, start_run
from tests.support.workers import ENVERIF, worker_env

RUN_TREE = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) {
    seq type runId rootRunId parentRunId status stepId stepStatus
    agentName stepTool stepDecision approvalId payload
    run { id status }
  }
}
"""

# Only what the event carries: no field that reads the database per event.
RUN_TREE_LIGHT = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) { seq type runId agentName payload }
}
"""


class TreeSocket:
    """One graphql-transport-ws connection, spoken as a browser library would."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, ws_url: str, token: str) -> TreeSocket:
        ws = await connect(ws_url, subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
        sock = cls(ws)
        await sock.send({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        assert await sock.receive() == {"type": "connection_ack"}
        return sock

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def receive(self, timeout_s: float = 30.0) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), timeout_s))
            if message["type"] == "ping":
                await self.send({"type": "pong"})
                continue
            return message

    async def subscribe(
        self, op_id: str, root: str, after_seq: int | None = None, query: str = RUN_TREE
    ) -> None:
        variables: dict[str, Any] = {"root": root}
        if after_seq is not None:
            variables["after"] = after_seq
        await self.send(
            {"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables}}
        )

    async def events(
        self,
        op_id: str,
        *,
        until: Callable[[dict[str, Any]], bool] | None = None,
        on_event: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        timeout_s: float = 60.0,
    ) -> Stream:
        """Events of ``op_id`` until ``until`` says stop (``complete`` is False) or the
        server sends ``complete`` (``complete`` is True)."""
        stream = Stream()
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no complete after {timeout_s}s; got seqs {stream.seqs}"
            message = await self.receive(remaining)
            assert message.get("id") == op_id, message
            if message["type"] == "complete":
                stream.complete = True
                return stream
            assert message["type"] == "next" and not message["payload"].get("errors"), message
            event = message["payload"]["data"]["runTree"]
            stream.events.append(event)
            if on_event is not None:
                await on_event(event)
            if until is not None and until(event):
                return stream

    async def close(self) -> None:
        await self.ws.close()


@dataclass
class Stream:
    events: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False

    @property
    def seqs(self) -> list[int]:
        return [e["seq"] for e in self.events]


def http_gql(base_url: str) -> GraphQLClient:
    return GraphQLClient(httpx.AsyncClient(base_url=base_url, timeout=30))


def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://") + "/graphql"


# -- the demo-like tree ----------------------------------------------------------------


@dataclass
class DemoTree:
    lead: str
    enricher: str
    poster: str
    lead_agent_id: str


async def demo_tree_agents(gql: GraphQLClient, admin: str, hook_url: str) -> DemoTree:
    """lead delegates to enricher, which delegates to poster; poster's ``webhook.post``
    needs an operator's approval (the tool's default policy)."""
    suffix = uuid.uuid4().hex[:8]
    names = {k: f"{k}-{suffix}" for k in ("lead", "enricher", "poster")}
    tools = ["agents.*", "webhook.post"]
    await create_agent(gql, admin, name=names["poster"], tools=tools, steps=[
        {"call": "webhook.post", "args": {"url": hook_url, "payload": {"x": 1}}},
        {"final": "posted {{ results[0].status }}"},
    ])  # fmt: skip
    await create_agent(gql, admin, name=names["enricher"], tools=tools, steps=[
        {"call": "agents.delegate", "args": {"agent": names["poster"], "task": "post"}},
        {"final": "{{ results[0].result }}"},
    ])  # fmt: skip
    lead_id = await create_agent(gql, admin, name=names["lead"], tools=tools, steps=[
        {"call": "agents.delegate", "args": {"agent": names["enricher"], "task": "enrich"}},
        {"final": "{{ results[0].result }}"},
    ])  # fmt: skip
    return DemoTree(names["lead"], names["enricher"], names["poster"], lead_id)


async def start_demo_tree(gql: GraphQLClient, operator: str, tree: DemoTree) -> str:
    return await start_run(gql, operator, tree.lead_agent_id)


# -- API processes -----------------------------------------------------------------------


def spawn_api(settings: Settings, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``enverif serve`` process on the test's database and Redis; returns it and its
    base URL once it listens."""
    log = tempfile.NamedTemporaryFile(prefix="enverif-api-", suffix=".log", delete=False)
    env = worker_env(settings, **extra)
    proc = subprocess.Popen([ENVERIF, "serve", "--port", "0"], env=env, stdout=log, stderr=log)
    log.close()
    path = Path(log.name)
    deadline = time.monotonic() + 60
    while not (found := re.search(r"Enverif API at (http://\S+)/graphql", path.read_text())):
        assert proc.poll() is None, path.read_text()
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.1)
    return proc, found.group(1)


class PrivateRedis:
    """A ``redis-server`` this test owns, on a free loopback port: stopped and started again
    on the same port to play a Redis restart (the shared server on 6379 is never touched)."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        assert server is not None, "redis-server is needed (apt-get install redis-server)"
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.proc = None
