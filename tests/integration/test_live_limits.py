"""Live-event limits over a real uvicorn and real websockets (DESIGN §6, §8): a subscriber
too slow to keep up is closed with a reason while the others keep receiving everything, and
one connection runs at most ``ENVERIF_MAX_SUBSCRIPTIONS_PER_CONNECTION`` operations."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.main import create_app
from app.services.runtime import Runtime, open_runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.events import append, gid, new_root_run
from tests.support.live import TreeSocket, ws_url
from tests.support.servers import serve

QUEUE_MAX = 200
CAP = 3
# Small socket buffers (the server's send buffer, the slow client's receive buffer), so once
# a client stops reading the server's sends block after a few events, not megabytes.
BUFFER_BYTES = 4_096


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    rt = await open_runtime(settings)
    yield rt
    await rt.close()


@pytest.fixture
async def app(settings: Settings) -> Any:
    limited = settings.model_copy(
        update={"subscription_queue_max": QUEUE_MAX, "max_subscriptions_per_connection": CAP}
    )
    return create_app(limited)


@pytest.fixture
async def api(app: Any) -> AsyncIterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
    sock.bind(("127.0.0.1", 0))
    try:
        async with serve(app, lifespan="on", sock=sock) as base_url:
            yield base_url
    finally:
        sock.close()


async def test_one_connection_runs_at_most_the_configured_number_of_operations(
    api: str, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    sock = await TreeSocket.open(ws_url(api), workspace.viewer)
    for i in range(CAP):
        await sock.subscribe(str(i), gid(run))
        assert (await sock.events(str(i), until=lambda e: e["seq"] == 1)).seqs == [1]

    await sock.subscribe("over", gid(run))
    refused = await sock.receive()
    assert refused["id"] == "over" and refused["type"] == "error", refused
    assert refused["payload"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert str(CAP) in refused["payload"][0]["message"]

    # The socket stays open and the running ones keep streaming.
    await append(runtime, run.id)
    got = sorted([(await sock.receive())["id"] for _ in range(CAP)])
    assert got == [str(i) for i in range(CAP)]

    # Completing one frees its place.
    await sock.send({"id": "0", "type": "complete"})
    await asyncio.sleep(0.2)
    await sock.subscribe("next", gid(run))
    assert (await sock.events("next", until=lambda e: e["seq"] == 2)).seqs == [1, 2]
