"""Live events shared between subscriptions (``app.graphql.shared_execution``), over a real
uvicorn and real websockets: subscriptions of one process that share an event's execution
still each get exactly what their own document, variables and stream ask for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.main import create_app
from app.services import event_log
from app.services.runtime import Runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.events import append, gid, new_root_run
from tests.support.live import spawn_api
from tests.support.servers import serve
from tests.support.ws import RUN_TREE_LIGHT, GraphQLWS, ws_url

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


async def test_subscriptions_sharing_events_each_get_their_own_shape(
    api: str, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    root = await new_root_run(runtime, workspace)
    url = ws_url(api)
    socks = [await GraphQLWS.open(url, workspace.token(role)) for role in ("viewer", "viewer", "operator")]
    socks += [await GraphQLWS.open(url, workspace.viewer) for _ in range(3)]
    light_a, light_b, light_operator, with_run, full, bare = socks
    try:
        # afterSeq differs (0 and 1) but only chooses the stream: both share the live events.
        await light_a.subscribe("w", gid(root), 0, RUN_TREE_LIGHT)
        await light_b.subscribe("w", gid(root), 1, RUN_TREE_LIGHT)
        await light_operator.subscribe("w", gid(root), 1, RUN_TREE_LIGHT)
        await with_run.subscribe("w", gid(root), 1, WITH_RUN)
        await full.subscribe("w", gid(root), 1, MAYBE_PAYLOAD, full=True)
        await bare.subscribe("w", gid(root), 1, MAYBE_PAYLOAD, full=False)
        assert [e["seq"] for e in await light_a.events("w", 1)] == [1]
        await asyncio.sleep(0.3)  # every subscription is live now

        await append(runtime, root.id, n=3)
        a, b, operator = [await s.events("w", 3) for s in (light_a, light_b, light_operator)]
        assert [e["seq"] for e in a] == [2, 3, 4]
        assert a == b == operator
        assert [e["payload"] for e in a] == [{"i": 0}, {"i": 1}, {"i": 2}]

        runs = await with_run.events("w", 3)
        assert [e["seq"] for e in runs] == [2, 3, 4]
        assert all(e["run"] == {"id": gid(root), "status": "QUEUED"} for e in runs)
        assert "payload" not in runs[0]

        # A variable the selection reads splits the sharing: each gets its own shape.
        assert await full.events("w", 3) == [{"seq": s, "payload": {"i": i}} for i, s in enumerate((2, 3, 4))]
        assert await bare.events("w", 3) == [{"seq": s} for s in (2, 3, 4)]
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
            client = await GraphQLWS.open(ws_url(base), workspace.viewer)
            agreed = client.ws.response.headers.get("Sec-WebSocket-Extensions")
            await client.close()
        finally:
            proc.terminate()
            proc.wait(15)
        if expected is None:
            assert agreed is None
        else:
            assert agreed is not None and agreed.startswith(expected)
