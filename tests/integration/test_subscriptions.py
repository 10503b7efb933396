"""``runTree`` end to end: a real uvicorn server, a real websocket client speaking
graphql-transport-ws, the real database and Redis (docs/graphql/guide.md, docs/architecture.md).

Events are written the way the chokepoint writes them: appended under the root row's lock in
a ``TreeTx`` and published after commit. The helper can also leave an event unpublished, which
is exactly what a lost pub/sub message looks like to a subscriber.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from app.events.publish import publish_events
from app.events.subscriber import subscriber_client_name
from app.services import auth, event_log, runs
from app.services.runtime import Runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.events import append, gid, new_child_run, new_root_run
from tests.support.servers import serve
from tests.support.ws import GraphQLWS

# Generous for a loaded CI box, yet well below IDLE_POLL_S in the tests that must prove an
# event came through live delivery, a gap re-read or a resync rather than the idle poll.
FAST_S = 3.0


@pytest.fixture
async def server(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A real uvicorn serving ``create_app(settings)``; yields the websocket URL."""
    from app.main import create_app

    # The safety-net poll must not mask what a test checks; tests that rely on it lower it.
    monkeypatch.setattr(event_log, "IDLE_POLL_S", 30.0)
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url.replace("http://", "ws://") + "/graphql"


@pytest.fixture
async def connect_ws(server: str) -> AsyncIterator[Any]:
    opened: list[GraphQLWS] = []

    async def _connect() -> GraphQLWS:
        client = await GraphQLWS.connect(server)
        opened.append(client)
        return client

    yield _connect
    for client in opened:
        await client.close()


# -- tests -----------------------------------------------------------------------------


async def test_replays_after_seq_then_streams_live_in_order_without_duplicates(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    await append(runtime, run.id, n=2)  # seq 2, 3: published before anyone listened

    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.viewer}"})  # viewers may watch
    await client.subscribe("1", gid(run), after_seq=1)
    replayed = await client.events("1", 2)
    assert [e["seq"] for e in replayed] == [2, 3]
    assert replayed[0]["runId"] == gid(run) and replayed[0]["rootRunId"] == gid(run)
    assert replayed[0]["type"] == "MEMORY_WRITTEN" and replayed[0]["payload"] == {"i": 0}
    assert replayed[0]["parentRunId"] is None and replayed[0]["run"] == {"id": gid(run), "status": "QUEUED"}

    live = await append(runtime, run.id, n=2)  # seq 4, 5
    assert [e["seq"] for e in await client.events("1", 2, timeout_s=FAST_S)] == [4, 5]

    # Redelivered messages (a publisher retry, a replay overlapping live) are dropped.
    await publish_events(runtime.redis, runtime.settings.redis_prefix, live)
    await append(runtime, run.id)  # seq 6
    assert [e["seq"] for e in await client.events("1", 1, timeout_s=FAST_S)] == [6]
    await client.nothing_more()

    # Without afterSeq: the whole log, from RUN_CREATED on.
    await client.subscribe("2", gid(run))
    everything = await client.events("2", 6)
    assert [e["seq"] for e in everything] == [1, 2, 3, 4, 5, 6]
    assert everything[0]["type"] == "RUN_CREATED" and everything[0]["status"] == "QUEUED"


async def test_a_lost_message_is_recovered_from_the_database_on_the_next_seq(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    await append(runtime, run.id, n=2)  # seq 2, 3
    client = await connect_ws()
    await client.init({"authorization": f"Bearer {workspace.viewer}"})  # key is case-insensitive
    await client.subscribe("w", gid(run), after_seq=3)
    await client.nothing_more(0.3)

    await append(runtime, run.id, publish=False)  # seq 4: its message never arrives
    # (No wait for silence here: on a slow machine the subscription's idle poll of the log,
    # every few seconds, may find seq 4 first; either way it comes before seq 5.)
    started = time.monotonic()
    await append(runtime, run.id)  # seq 5 arrives live and reveals the gap
    got = await client.events("w", 2, timeout_s=FAST_S)
    assert [e["seq"] for e in got] == [4, 5]
    assert time.monotonic() - started < FAST_S


async def test_run_field_shows_the_run_as_of_each_event(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    """The websocket context lives for the whole connection; loaders must not."""
    run = await new_root_run(runtime, workspace)
    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.viewer}"})
    await client.subscribe("1", gid(run))
    [created] = await client.events("1", 1)
    assert created["run"]["status"] == "QUEUED"

    # Real transitions through the chokepoint, which publishes after commit. Each is awaited
    # before the next: `run` is the run as it is when its event is delivered.
    claimed = await runs.claim(runtime, run.id, owner="test-worker")
    assert claimed is not None and claimed.attempt == 1
    [running] = await client.events("1", 1, timeout_s=FAST_S)
    assert (running["type"], running["status"]) == ("RUN_STATUS_CHANGED", "RUNNING")
    assert running["run"]["status"] == "RUNNING"

    operator = await auth.sign_in(runtime, token=workspace.operator)
    await runs.cancel_run(runtime, operator, run_id=run.id, reason="enough")
    [cancelled] = await client.events("1", 1, timeout_s=FAST_S)
    assert (cancelled["status"], cancelled["run"]["status"]) == ("CANCELLED", "CANCELLED")
    assert cancelled["payload"]["reason"] == "enough"


async def test_a_child_run_id_streams_its_whole_tree(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    root = await new_root_run(runtime, workspace)
    child = await new_child_run(runtime, root)
    await append(runtime, root.id, child.id)  # seq 2, about the child

    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.viewer}"})
    await client.subscribe("c", gid(child))
    first, second = await client.events("c", 2)
    assert first["runId"] == gid(root) and first["rootRunId"] == gid(root)
    assert second["runId"] == gid(child) and second["parentRunId"] == gid(root)
    assert second["rootRunId"] == gid(root) and second["run"]["id"] == gid(child)


async def test_resync_after_the_servers_redis_subscriber_was_cut(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.viewer}"})
    await client.subscribe("1", gid(run))
    await client.events("1", 1)

    await append(runtime, run.id, publish=False)  # seq 2, lost; nothing later reveals a gap
    await client.nothing_more(0.3)
    # Cut the server's subscriber: on reconnect its hub tells every subscription to re-read.
    killed = 0
    for entry in await runtime.redis.client_list():
        if entry.get("name") == subscriber_client_name(runtime.settings.redis_prefix):
            killed += int(await runtime.redis.client_kill_filter(_id=entry["id"]))
    assert killed == 1
    [recovered] = await client.events("1", 1, timeout_s=FAST_S)
    assert recovered["seq"] == 2

    await append(runtime, run.id)  # and live delivery works again afterwards
    assert [e["seq"] for e in await client.events("1", 1, timeout_s=FAST_S)] == [3]


async def test_a_quiet_subscription_polls_the_log_for_silently_lost_messages(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_log, "IDLE_POLL_S", 0.3)
    run = await new_root_run(runtime, workspace)
    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.viewer}"})
    await client.subscribe("1", gid(run), after_seq=1)
    await append(runtime, run.id, publish=False)  # lost, and nothing else ever happens
    [got] = await client.events("1", 1, timeout_s=FAST_S)
    assert got["seq"] == 2


async def test_another_workspaces_run_is_not_found(
    connect_ws: Any, runtime: Runtime, workspace: WorkspaceFixture, make_workspace: Any
) -> None:
    theirs = await new_root_run(runtime, await make_workspace())
    client = await connect_ws()
    await client.init({"Authorization": f"Bearer {workspace.admin}"})

    for op_id, run_id in (("1", gid(theirs)), ("2", gid(10**15)), ("3", "not-an-id")):
        await client.subscribe(op_id, run_id)
        errors = await client.errors(op_id)
        assert errors[0]["extensions"]["code"] == "NOT_FOUND", errors
        assert "data" not in errors[0] or not errors[0]["data"]

    # Nothing of theirs leaks into an unrelated subscription either.
    mine = await new_root_run(runtime, workspace)
    await client.subscribe("4", gid(mine))
    assert [e["seq"] for e in await client.events("4", 1)] == [1]
    await append(runtime, theirs.id)
    await client.nothing_more()


@pytest.mark.parametrize(
    "payload",
    [{}, {"Authorization": "Bearer evf_not-a-real-token"}, {"Authorization": "Basic abc"}],
    ids=["missing", "unknown", "not-bearer"],
)
async def test_bad_or_missing_token_is_rejected_at_connection_init(
    connect_ws: Any, payload: dict[str, Any]
) -> None:
    client = await connect_ws()
    await client.send({"type": "connection_init", "payload": payload})
    with pytest.raises(ConnectionClosed) as closed:
        await client.receive()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


async def test_subscribing_before_connection_init_is_refused(connect_ws: Any, runtime: Runtime) -> None:
    client = await connect_ws()
    await client.subscribe("1", gid(1))
    with pytest.raises(ConnectionClosed) as closed:
        await client.receive()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
