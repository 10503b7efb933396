"""The HTTP clients' network backend (app/engine/asyncio_backend.py) over real loopback sockets:
reads and keep-alive, timeouts against cancellation, a connection the server closed while it
idled, both directions' flow control, and TLS verified against a certificate authority made
here."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpcore
import httpx
import pytest
import trustme

from app.engine.asyncio_backend import READ_BUFFER_LIMIT, READ_RESUME_AT, AsyncioBackend
from app.engine.net import guarded_client
from app.settings import Settings

pytestmark = pytest.mark.asyncio

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@asynccontextmanager
async def serving(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[tuple[int, list[int]]]:
    """A loopback server; yields its port and a list that counts the connections it took."""
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what some of these tests do on purpose
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=ssl_context)
    try:
        yield server.sockets[0].getsockname()[1], connections
    finally:
        server.close()


async def answer_each_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK)
        await writer.drain()


def client(**settings: Any) -> httpx.AsyncClient:
    return guarded_client(
        Settings(http_allow_private_networks=True, **settings), timeout_s=5.0, user_agent="enverif-test"
    )


async def test_requests_share_one_kept_alive_connection() -> None:
    async with serving(answer_each_request) as (port, connections), client() as http:
        assert isinstance(http._transport._pool._network_backend, AsyncioBackend)  # type: ignore[attr-defined]
        for _ in range(5):
            response = await http.get(f"http://127.0.0.1:{port}/")
            assert (response.status_code, response.text) == (200, "ok")
    assert len(connections) == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK)
        await writer.drain()  # then close: the client holds an idle connection the server ended

    async with serving(answer_once) as (port, connections), client() as http:
        for _ in range(3):
            assert (await http.get(f"http://127.0.0.1:{port}/")).text == "ok"
            await asyncio.sleep(0.05)  # the server's FIN arrives while the connection idles
    assert len(connections) == 3


async def test_a_silent_server_times_the_read_out_and_a_cancellation_stays_a_cancellation() -> None:
    async def never_answer(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async with serving(never_answer) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        await stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=2.0)
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(65536, timeout=0.1)

        reading = asyncio.create_task(stream.read(65536, timeout=0.2))
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await asyncio.sleep(0.3)  # the cancelled read's timer must not fire into a later read
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(65536, timeout=0.05)
        await stream.aclose()


async def test_a_reset_connection_is_a_read_error_and_an_orderly_close_an_empty_read() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"last words")
        await writer.drain()

    async with serving(close_at_once) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        assert await stream.read(65536, timeout=2.0) == b"last words"
        assert await stream.read(65536, timeout=2.0) == b""
        await stream.aclose()

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        linger_zero = struct.pack("ii", 1, 0)  # close with a reset, not an orderly FIN
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_zero)
        writer.transport.abort()

    async with serving(reset) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        await stream.write(b"x" * 1024, timeout=1.0)
        with pytest.raises(httpcore.ReadError):
            await stream.read(65536, timeout=2.0)
        await stream.aclose()


async def test_a_server_that_sends_faster_than_the_client_reads_is_held_back() -> None:
    sent = 16 * 1024 * 1024

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunk = b"x" * 65536
        for _ in range(sent // len(chunk)):
            writer.write(chunk)
            await writer.drain()

    async with serving(flood) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        await asyncio.sleep(0.5)  # the client reads nothing meanwhile
        buffered = len(stream._protocol.buffer)  # type: ignore[attr-defined]
        assert 0 < buffered <= READ_BUFFER_LIMIT + 1024 * 1024  # the limit and one socket read
        # Reading starts again only once the reader has drained the buffer to half the limit.
        protocol = stream._protocol  # type: ignore[attr-defined]
        resumed_at: list[int] = []

        class Watched:
            def __init__(self, transport: Any) -> None:
                self.transport = transport

            def resume_reading(self) -> None:
                resumed_at.append(len(protocol.buffer))
                self.transport.resume_reading()

            def __getattr__(self, name: str) -> Any:
                return getattr(self.transport, name)

        stream._transport = Watched(stream._transport)  # type: ignore[attr-defined]
        received = 0
        while data := await stream.read(65536, timeout=5.0):
            received += len(data)
            assert len(protocol.buffer) <= READ_BUFFER_LIMIT + 1024 * 1024
        assert received == sent
        assert resumed_at, "the flood never paused the transport"
        assert max(resumed_at) <= READ_RESUME_AT, resumed_at
        await stream.aclose()


async def test_a_peer_that_reads_nothing_times_the_write_out() -> None:
    async def read_nothing(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10)

    async with serving(read_nothing) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        with pytest.raises(httpcore.WriteTimeout):
            for _ in range(64):  # far more than the kernel's buffers on loopback
                await stream.write(b"x" * (1024 * 1024), timeout=0.2)
        await stream.aclose()


async def test_nothing_listening_is_a_connect_error() -> None:
    async with serving(answer_each_request) as (port, _):
        pass  # the port is free again
    with pytest.raises(httpcore.ConnectError):
        await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


def server_context(authority: trustme.CA, host: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(host).configure_cert(context)
    return context


async def test_tls_verifies_the_server_and_its_name(authority: trustme.CA, monkeypatch: Any) -> None:
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    monkeypatch.setattr("app.engine.net._ssl_context", lambda _http: trusting)

    async with serving(answer_each_request, server_context(authority, "127.0.0.1")) as (port, _):
        async with client() as http:
            for _ in range(2):
                response = await http.get(f"https://127.0.0.1:{port}/")
                assert (response.status_code, response.text) == (200, "ok")
            assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None

    # A certificate for another (loopback) address, from the trusted authority: refused.
    async with serving(answer_each_request, server_context(authority, "127.0.0.2")) as (port, _):
        async with client() as http:
            with pytest.raises(httpx.ConnectError, match=r"(?i)certificate|hostname|match"):
                await http.get(f"https://127.0.0.1:{port}/")

    # A certificate from an authority the client does not trust: refused.
    async with serving(answer_each_request, server_context(trustme.CA(), "127.0.0.1")) as (port, _):
        async with client() as http:
            with pytest.raises(httpx.ConnectError, match=r"(?i)certificate"):
                await http.get(f"https://127.0.0.1:{port}/")


async def test_a_handshake_the_server_never_answers_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async with serving(silent) as (port, _):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2.0)
        with pytest.raises(httpcore.ConnectTimeout):
            await stream.start_tls(ssl.create_default_context(), server_hostname="127.0.0.1", timeout=0.2)
