"""The live execution tree end to end (DESIGN §6): a real uvicorn, a real websocket client
(graphql-transport-ws), real ``enverif worker`` processes, the real database and Redis, and
the demo-like three-level tree lead -> enricher -> poster whose webhook waits for approval.

Every stream is checked against the log in the database: the full, ordered, gap-free
sequence, then ``complete``.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.graphql.ids import from_global_id
from app.main import create_app
from app.services import events as event_log
from app.settings import Settings
from tests.conftest import GraphQLClient, WorkspaceFixture
from tests.support.live import TreeSocket, demo_tree_agents, http_gql, start_demo_tree, ws_url
from tests.support.runs import DECIDE
from tests.support.servers import serve, sink_server
from tests.support.workers import spawn_worker


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[str]:
    """A real uvicorn serving the app (lifespan on: its event hub); yields the base URL."""
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url


@pytest.fixture
async def hook() -> AsyncIterator[str]:
    async with sink_server() as (_sink, url):
        yield url + "/hook"


async def logged(
    sessionmaker: async_sessionmaker[AsyncSession], workspace: WorkspaceFixture, root: str
) -> list[Any]:
    async with sessionmaker() as session:
        return await event_log.events_after(
            session,
            workspace_id=workspace.id,
            root_run_id=from_global_id(root, "Run"),
            after_seq=0,
            limit=10_000,
        )


def approver(gql: GraphQLClient, operator: str) -> Any:
    async def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "APPROVAL_REQUESTED":
            await gql.ok(DECIDE, {"id": event["approvalId"], "approve": True}, token=operator)

    return on_event


async def test_a_three_level_tree_streams_every_event_in_order_then_completes(
    api: str, hook: str, settings: Settings, workspace: WorkspaceFixture, sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]],
) -> None:  # fmt: skip
    processes.append(spawn_worker(settings))
    gql = http_gql(api)
    tree = await demo_tree_agents(gql, workspace.admin, hook)
    root = await start_demo_tree(gql, workspace.operator, tree)

    sock = await TreeSocket.open(ws_url(api), workspace.viewer)
    await sock.subscribe("t", root)
    # The approval is decided from what the event itself carries: no query needed.
    stream = await sock.events("t", on_event=approver(gql, workspace.operator))

    assert stream.complete
    log = await logged(sessionmaker, workspace, root)
    assert stream.seqs == [e.seq for e in log] == list(range(1, len(log) + 1))
    assert [e["type"] for e in stream.events] == [e.type for e in log]

    runs = {e["runId"]: e["agentName"] for e in stream.events if e["type"] == "RUN_CREATED"}
    assert sorted(runs.values()) == sorted([tree.lead, tree.enricher, tree.poster])
    for event in stream.events:  # every event names its run's agent; children their parent
        assert event["agentName"] == runs[event["runId"]], event
        assert event["rootRunId"] == root
        assert (event["parentRunId"] is None) == (event["runId"] == root), event
        if event["stepId"] is not None and not event["payload"].get("final"):
            assert event["stepTool"] in {"agents.delegate", "webhook.post"}, event
    [asked] = [e for e in stream.events if e["type"] == "APPROVAL_REQUESTED"]
    assert (asked["agentName"], asked["stepTool"], asked["stepDecision"]) == (
        tree.poster,
        "webhook.post",
        "REQUIRE_APPROVAL",
    )
    assert asked["approvalId"] is not None
    decided = [e for e in stream.events if e["type"] == "APPROVAL_DECIDED"]
    assert [e["approvalId"] for e in decided] == [asked["approvalId"]]
    ends = [e for e in stream.events if e["type"] == "RUN_STATUS_CHANGED" and e["runId"] == root]
    assert ends[-1]["status"] == "SUCCEEDED" and ends[-1]["run"]["status"] == "SUCCEEDED"

    # A finished tree: the whole log again, then complete at once.
    await sock.subscribe("again", root)
    replay = await sock.events("again", timeout_s=15)
    assert replay.complete and replay.events == [
        {**e, "run": replay.events[i]["run"]} for i, e in enumerate(stream.events)
    ]
    await sock.subscribe("tail", root, after_seq=len(log))
    assert (await sock.events("tail", timeout_s=15)).seqs == []
    await sock.close()
