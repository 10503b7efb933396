"""Live events shared between subscriptions (``app.graphql.shared_execution``), over a real
uvicorn and real websockets: subscriptions of one process that share an event's execution
still each get exactly what their own document, variables and stream ask for."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import connect

from app.main import create_app
from app.services import event_log
from app.services.runtime import Runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.events import append, gid, new_root_run
from tests.support.live import RUN_TREE_LIGHT, TreeSocket, spawn_api, ws_url
from tests.support.servers import serve

WITH_RUN = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) { seq type run { id status } }
}
"""
MAYBE_PAYLOAD = """
subscription Watch($root: ID!, $after: Int, $full: Boolean!) {
  runTree(rootRunId: $root, afterSeq: $after) { seq payload @include(if: $full) }
}
"""


@pytest.fixture
async def api(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(event_log, "IDLE_POLL_S", 30.0)
    async with serve(create_app(settings), lifespan="on") as base_url:
        yield base_url


async def subscribe(sock: TreeSocket, query: str, variables: dict[str, Any]) -> None:
    await sock.send({"id": "w", "type": "subscribe", "payload": {"query": query, "variables": variables}})


async def events(sock: TreeSocket, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while len(got) < count:
        message = await sock.receive(15)
        assert message["type"] == "next" and message["id"] == "w", message
        assert "errors" not in message["payload"], message
        got.append(message["payload"]["data"]["runTree"])
    return got


async def test_subscriptions_sharing_events_each_get_their_own_shape(
    api: str, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    root = await new_root_run(runtime, workspace)
    url = ws_url(api)
    socks = [await TreeSocket.open(url, workspace.token(role)) for role in ("viewer", "viewer", "operator")]
    socks += [await TreeSocket.open(url, workspace.viewer) for _ in range(3)]
    light_a, light_b, light_operator, with_run, full, bare = socks
    try:
        # afterSeq differs (0 and 1) but only chooses the stream: both share the live events.
        await subscribe(light_a, RUN_TREE_LIGHT, {"root": gid(root), "after": 0})
        await subscribe(light_b, RUN_TREE_LIGHT, {"root": gid(root), "after": 1})
        await subscribe(light_operator, RUN_TREE_LIGHT, {"root": gid(root), "after": 1})
        await subscribe(with_run, WITH_RUN, {"root": gid(root), "after": 1})
        await subscribe(full, MAYBE_PAYLOAD, {"root": gid(root), "after": 1, "full": True})
        await subscribe(bare, MAYBE_PAYLOAD, {"root": gid(root), "after": 1, "full": False})
        assert [e["seq"] for e in await events(light_a, 1)] == [1]
        await asyncio.sleep(0.3)  # every subscription is live now

        await append(runtime, root.id, n=3)
        a, b, operator = [await events(s, 3) for s in (light_a, light_b, light_operator)]
        assert [e["seq"] for e in a] == [2, 3, 4]
        assert a == b == operator
        assert [e["payload"] for e in a] == [{"i": 0}, {"i": 1}, {"i": 2}]

        runs = await events(with_run, 3)
        assert [e["seq"] for e in runs] == [2, 3, 4]
        assert all(e["run"] == {"id": gid(root), "status": "QUEUED"} for e in runs)
        assert "payload" not in runs[0]

        # A variable the selection reads splits the sharing: each gets its own shape.
        assert await events(full, 3) == [{"seq": s, "payload": {"i": i}} for i, s in enumerate((2, 3, 4))]
        assert await events(bare, 3) == [{"seq": s} for s in (2, 3, 4)]
    finally:
        for sock in socks:
            await sock.close()


async def test_serve_does_not_compress_websocket_messages_unless_told_to(
    settings: Settings, workspace: WorkspaceFixture
) -> None:
    for setting, expected in ((None, None), ("true", "permessage-deflate")):
        extra = {} if setting is None else {"ENVERIF_WS_PER_MESSAGE_DEFLATE": setting}
        proc, base = spawn_api(settings, **extra)
        try:
            # The client offers permessage-deflate (websockets does by default).
            async with connect(ws_url(base), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                agreed = ws.response.headers.get("Sec-WebSocket-Extensions")
                await ws.send(
                    json.dumps(
                        {
                            "type": "connection_init",
                            "payload": {"Authorization": f"Bearer {workspace.viewer}"},
                        }
                    )
                )
                assert json.loads(await ws.recv()) == {"type": "connection_ack"}
        finally:
            proc.terminate()
            proc.wait(15)
        if expected is None:
            assert agreed is None
        else:
            assert agreed is not None and agreed.startswith(expected)
