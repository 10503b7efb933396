"""``runTree`` through the reference JavaScript client: npm ``graphql-ws`` driven by node
(tests/js/watch_tree.mjs) against a real uvicorn, on the demo-like three-level tree with an
approval. The same full, ordered, gap-free sequence as in the database, then ``complete``:
the protocol is right for browser apps too."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.integration.test_live_tree import logged
from tests.support.js import ensure_js_packages
from tests.support.live import demo_tree_agents, http_gql, start_demo_tree
from tests.support.runs import DECIDE
from tests.support.servers import serve, sink_server
from tests.support.workers import spawn_worker
from tests.support.ws import ws_url

NODE_TIMEOUT_S = 120


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[str]:
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url


async def test_graphql_ws_in_node_receives_the_whole_tree_then_complete(
    api: str, settings: Settings, workspace: WorkspaceFixture, sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]],
) -> None:  # fmt: skip
    js = ensure_js_packages()
    processes.append(spawn_worker(settings))
    gql = http_gql(api)
    async with sink_server() as (_sink, url):
        tree = await demo_tree_agents(gql, workspace.admin, url + "/hook")
        root = await start_demo_tree(gql, workspace.operator, tree)
        # Not subprocess.run: the server runs in this very event loop.
        node = await asyncio.create_subprocess_exec(
            "node", str(js / "watch_tree.mjs"), ws_url(api), root,
            env={**os.environ, "ENVERIF_TOKEN": workspace.operator},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert node.stdout is not None
        lines: list[dict[str, Any]] = []
        async with asyncio.timeout(NODE_TIMEOUT_S):
            while raw := await node.stdout.readline():
                line = json.loads(raw)
                lines.append(line)
                event = line.get("event")
                if event is not None and event["type"] == "APPROVAL_REQUESTED":
                    await gql.ok(
                        DECIDE, {"id": event["approvalId"], "approve": True}, token=workspace.operator
                    )
            _, stderr = await node.communicate()
    assert node.returncode == 0, (lines[-3:], stderr.decode())

    assert lines[-1] == {"complete": True}, lines[-3:]
    events = [line["event"] for line in lines[:-1]]
    log = await logged(sessionmaker, workspace, root)
    assert [e["seq"] for e in events] == [e.seq for e in log] == list(range(1, len(log) + 1))
    assert [e["type"] for e in events] == [e.type for e in log]
    names = {e["agentName"] for e in events}
    assert names == {tree.lead, tree.enricher, tree.poster}
    assert events[-1]["type"] in {"RUN_STATUS_CHANGED", "STEP_FINISHED"}
    ends = [e for e in events if e["type"] == "RUN_STATUS_CHANGED" and e["runId"] == root]
    assert ends[-1]["status"] == "SUCCEEDED"
