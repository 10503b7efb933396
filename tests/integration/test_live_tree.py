"""The live execution tree end to end (docs/graphql/guide.md): a real uvicorn, a real websocket client
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
from app.services import event_log
from app.settings import Settings
from tests.conftest import GraphQLClient, WorkspaceFixture
from tests.support.live import PrivateRedis, demo_tree_agents, http_gql, spawn_api, start_demo_tree
from tests.support.runs import DECIDE, wait_run
from tests.support.servers import serve, sink_server
from tests.support.workers import spawn_worker
from tests.support.ws import GraphQLWS, ws_url


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[str]:
    """A real uvicorn serving the app (lifespan on: its event hub); yields the base URL."""
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url


@pytest.fixture
def private_redis(tmp_path: Any) -> Any:
    """A redis-server of this test's own on a free loopback port (never the shared one)."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    yield redis
    redis.stop()


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

    sock = await GraphQLWS.open(ws_url(api), workspace.viewer)
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


def until_type(kind: str) -> Any:
    return lambda event: event["type"] == kind


async def test_reconnecting_with_after_seq_mid_run_gets_exactly_the_missing_events(
    api: str, hook: str, settings: Settings, workspace: WorkspaceFixture, sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]],
) -> None:  # fmt: skip
    processes.append(spawn_worker(settings))
    gql = http_gql(api)
    root = await start_demo_tree(gql, workspace.operator, await demo_tree_agents(gql, workspace.admin, hook))
    first = await GraphQLWS.open(ws_url(api), workspace.viewer)
    await first.subscribe("t", root)
    before = await first.events("t", until=until_type("APPROVAL_REQUESTED"))
    await first.close()  # the client goes away mid-run ...

    # ... and the tree moves on without it: approved, run to the end.
    await gql.ok(DECIDE, {"id": before.events[-1]["approvalId"], "approve": True}, token=workspace.operator)
    await wait_run(gql, workspace.viewer, root, timeout_s=60)

    second = await GraphQLWS.open(ws_url(api), workspace.viewer)
    await second.subscribe("t", root, after_seq=before.seqs[-1])
    after = await second.events("t")
    assert after.complete
    log = await logged(sessionmaker, workspace, root)
    assert before.seqs + after.seqs == [e.seq for e in log] == list(range(1, len(log) + 1))
    assert after.seqs[0] == before.seqs[-1] + 1


async def test_restarting_redis_mid_run_loses_no_event(
    hook: str, settings: Settings, workspace: WorkspaceFixture, sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]], private_redis: PrivateRedis,
) -> None:  # fmt: skip
    own = settings.model_copy(update={"redis_url": private_redis.url})
    processes.append(spawn_worker(own))
    async with serve(create_app(own), lifespan="on") as api:
        gql = http_gql(api)
        root = await start_demo_tree(
            gql, workspace.operator, await demo_tree_agents(gql, workspace.admin, hook)
        )
        sock = await GraphQLWS.open(ws_url(api), workspace.viewer)
        await sock.subscribe("t", root)
        before = await sock.events("t", until=until_type("APPROVAL_REQUESTED"))

        private_redis.stop()
        # Decided while Redis is down: committed, but its events cannot be published.
        await gql.ok(
            DECIDE, {"id": before.events[-1]["approvalId"], "approve": True}, token=workspace.operator
        )
        private_redis.start()
        processes.append(spawn_worker(own))  # whether or not the first survived the outage

        after = await sock.events("t", timeout_s=90)
    assert after.complete
    log = await logged(sessionmaker, workspace, root)
    assert before.seqs + after.seqs == [e.seq for e in log] == list(range(1, len(log) + 1))
    assert log[-1].type in {"RUN_STATUS_CHANGED", "STEP_FINISHED", "APPROVAL_DECIDED"}


async def test_two_api_processes_a_subscriber_on_one_sees_what_the_other_and_a_worker_wrote(
    hook: str, settings: Settings, workspace: WorkspaceFixture, make_workspace: Any, sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]],
) -> None:  # fmt: skip
    proc_a, api_a = spawn_api(settings)
    processes.append(proc_a)
    proc_b, api_b = spawn_api(settings)
    processes.append(proc_b)
    processes.append(spawn_worker(settings))
    via_b = http_gql(api_b)
    root = await start_demo_tree(
        via_b, workspace.operator, await demo_tree_agents(via_b, workspace.admin, hook)
    )

    on_a = await GraphQLWS.open(ws_url(api_a), workspace.viewer)
    await on_a.subscribe("t", root)
    stream = await on_a.events("t", on_event=approver(via_b, workspace.operator))  # decided through B
    assert stream.complete
    log = await logged(sessionmaker, workspace, root)
    assert stream.seqs == [e.seq for e in log] == list(range(1, len(log) + 1))

    # Another workspace's token: NOT_FOUND, and nothing else on that operation.
    other = await make_workspace()
    stranger = await GraphQLWS.open(ws_url(api_a), other.admin)
    await stranger.subscribe("x", root)
    refused = await stranger.receive()
    assert refused["id"] == "x", refused
    errors = refused["payload"] if refused["type"] == "error" else refused["payload"]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["NOT_FOUND"], refused
    assert refused["type"] == "error" or refused["payload"].get("data") is None
    if refused["type"] == "next":
        assert (await stranger.receive())["type"] == "complete"
    with pytest.raises(TimeoutError):
        await stranger.receive(0.5)
