"""Live-tree tests: GraphQL over real HTTP, ``enverif serve`` processes, a private Redis,
and the demo-like three-level tree (lead -> enricher -> poster, whose webhook call waits for
an approval). The websocket client is ``tests.support.ws.GraphQLWS``."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.settings import Settings
from tests.conftest import GraphQLClient
from tests.support.cli import spawn_enverif
from tests.support.runs import scripted_agent, start_run
from tests.support.workers import worker_env

# The websocket client lived here as TreeSocket before tests/support/ws.py held the one
# client; the old names still import from here.
from tests.support.ws import RUN_TREE, RUN_TREE_LIGHT, GraphQLWS, Stream, ws_url  # noqa: F401

TreeSocket = GraphQLWS


def http_gql(base_url: str) -> GraphQLClient:
    return GraphQLClient(httpx.AsyncClient(base_url=base_url, timeout=30))


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
    await scripted_agent(gql, admin, name=names["poster"], tools=tools, steps=[
        {"call": "webhook.post", "args": {"url": hook_url, "payload": {"x": 1}}},
        {"final": "posted {{ results[0].status }}"},
    ])  # fmt: skip
    await scripted_agent(gql, admin, name=names["enricher"], tools=tools, steps=[
        {"call": "agents.delegate", "args": {"agent": names["poster"], "task": "post"}},
        {"final": "{{ results[0].result }}"},
    ])  # fmt: skip
    lead_id = await scripted_agent(gql, admin, name=names["lead"], tools=tools, steps=[
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
    proc = spawn_enverif(["serve", "--port", "0"], env=env, stdout=log, stderr=log)
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
