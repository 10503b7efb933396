"""Live-event limits over a real uvicorn and real websockets (docs/graphql/guide.md): a subscriber
too slow to keep up is closed with a reason while the others keep receiving everything, and
one connection runs at most ``ENVERIF_MAX_SUBSCRIPTIONS_PER_CONNECTION`` operations."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from app.main import create_app
from app.services.runtime import Runtime
from app.settings import Settings
from tests.conftest import WorkspaceFixture
from tests.support.events import append, gid, new_root_run
from tests.support.servers import serve
from tests.support.workers import wait_for
from tests.support.ws import RUN_TREE_LIGHT, GraphQLWS, ws_url

QUEUE_MAX = 200
CAP = 3
# Small socket buffers (the server's send buffer, the slow client's receive buffer), so once
# a client stops reading the server's sends block after a few events, not megabytes.
BUFFER_BYTES = 4_096


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


class StalledClient:
    """A graphql-transport-ws client that can stop reading altogether: websockets' sans-I/O
    protocol over a raw socket with a tiny receive buffer, so the server's sends to it block
    once a few kilobytes are in flight (a client library would keep reading into memory)."""

    def __init__(self, sock: socket.socket, protocol: ClientProtocol) -> None:
        self.sock = sock
        self.protocol = protocol
        self.texts: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, url: str, token: str) -> StalledClient:
        loop = asyncio.get_running_loop()
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER_BYTES)
        raw.setblocking(False)
        uri = parse_uri(url)
        await loop.sock_connect(raw, (uri.host, uri.port))
        protocol = ClientProtocol(uri, subprotocols=[Subprotocol("graphql-transport-ws")])
        protocol.send_request(protocol.connect())
        client = cls(raw, protocol)
        await client._flush()
        while protocol.state is State.CONNECTING:
            assert await client._read(), "the server closed the connection during the handshake"
        assert protocol.state is State.OPEN, protocol.handshake_exc
        await client.send({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
        assert await client.next_text() == {"type": "connection_ack"}
        return client

    async def _flush(self) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, b"".join(self.protocol.data_to_send()))

    async def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        await self._flush()

    async def _read(self) -> bool:
        """Read once; False at the end of the stream."""
        data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.sock, 65_536), 30)
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        for event in self.protocol.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                self.texts.append(json.loads(event.data))
        await self._flush()  # answers pings and the close handshake
        return bool(data)

    async def next_text(self) -> dict[str, Any]:
        while not self.texts:
            assert await self._read(), "the server closed the connection"
        return self.texts.pop(0)

    async def read_to_the_end(self) -> list[dict[str, Any]]:
        while await self._read():
            pass
        texts, self.texts = self.texts, []
        return texts

    def close(self) -> None:
        self.sock.close()


async def test_a_subscriber_that_stops_reading_is_closed_and_the_others_get_everything(
    api: str, app: Any, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    hub = app.state.event_hub
    keeping_up = await GraphQLWS.open(ws_url(api), workspace.viewer)
    await keeping_up.subscribe("ok", gid(run), query=RUN_TREE_LIGHT)
    assert (await keeping_up.events("ok", until=lambda e: e["seq"] == 1)).seqs == [1]

    slow = await StalledClient.open(ws_url(api), workspace.viewer)
    variables = {"root": gid(run)}
    await slow.send(
        {"id": "slow", "type": "subscribe", "payload": {"query": RUN_TREE_LIGHT, "variables": variables}}
    )
    first = await slow.next_text()
    assert first["type"] == "next" and first["payload"]["data"]["runTree"]["seq"] == 1, first
    assert hub.subscription_count == 2

    # The slow client reads nothing more while events pour in, each a few kilobytes; the
    # other one reads all along.
    total = 1 + 60 * 10
    kept_task = asyncio.create_task(keeping_up.events("ok", until=lambda e: e["seq"] == total))
    for _ in range(60):
        await append(runtime, run.id, n=10, payload_chars=2_000)
        # A breath between bursts, so "keeping up" does not depend on how fast this box is.
        await asyncio.sleep(0.05)
    await wait_for(lambda: hub.subscription_count <= 1, 30, "the slow subscriber to be closed")
    assert hub.subscription_count == 1  # the other one is still subscribed

    # The one that kept up missed nothing, and the process holds no queue for the other.
    kept = await asyncio.wait_for(kept_task, 60)
    assert kept.seqs == list(range(2, total + 1))

    # The slow one reads again: a gap-free prefix of the events, then a close with a reason.
    rest = await slow.read_to_the_end()
    received = [1] + [m["payload"]["data"]["runTree"]["seq"] for m in rest if m["type"] == "next"]
    assert received == list(range(1, len(received) + 1)) and len(received) < total
    close = slow.protocol.close_rcvd
    assert close is not None and close.code == 1013, close
    assert "too slow" in close.reason
    slow.close()

    # It resumes where it stopped: exactly the rest.
    again = await GraphQLWS.open(ws_url(api), workspace.viewer)
    await again.subscribe("resume", gid(run), after_seq=received[-1], query=RUN_TREE_LIGHT)
    resumed = await again.events("resume", until=lambda e: e["seq"] == total)
    assert resumed.seqs == list(range(received[-1] + 1, total + 1))


async def test_one_connection_runs_at_most_the_configured_number_of_operations(
    api: str, runtime: Runtime, workspace: WorkspaceFixture
) -> None:
    run = await new_root_run(runtime, workspace)
    sock = await GraphQLWS.open(ws_url(api), workspace.viewer)
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
