"""Slow and idle clients against a real ``enverif serve`` on loopback, over raw sockets: a
request's headers or body sent a byte at a time are cut off on time, and websockets are
capped per token and, before they sign in, per address (issue 20 item 8; the limits are
in app/http_limits.py and app/graphql/ws_auth.py, documented in docs/operating/security.md).

One API process serves the whole module, with small limits so that each attack is bounded:
a second for headers and bodies, three sockets per token and three unsigned sockets per
address, 40 connections.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed

from app.settings import Settings
from tests.support.live import spawn_api
from tests.support.ws import GraphQLWS, ws_url

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
PER_TOKEN = 3
PENDING_PER_ADDRESS = 3
MAX_CONNECTIONS = 40
# How long past its deadline a cut-off may come, on a loaded two-core machine.
SLACK_S = 3.0


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[str]:
    proc, base_url = spawn_api(
        settings,
        ENVERIF_REQUEST_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        ENVERIF_REQUEST_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        ENVERIF_WS_MAX_SOCKETS_PER_TOKEN=str(PER_TOKEN),
        ENVERIF_WS_MAX_PENDING_SOCKETS_PER_ADDRESS=str(PENDING_PER_ADDRESS),
        ENVERIF_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    )
    try:
        yield base_url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _open(base_url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = urlsplit(base_url)
    assert address.hostname == "127.0.0.1"
    return await asyncio.open_connection(address.hostname, address.port)


async def _drip(writer: asyncio.StreamWriter, data: bytes, every_s: float) -> None:
    """``data`` one byte at a time, until it is all sent or the server closes."""
    for i in range(len(data)):
        if writer.is_closing():
            return
        writer.write(data[i : i + 1])
        try:
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(every_s)


async def _cut_off_after(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, send: Any
) -> tuple[float, bytes]:
    """Runs ``send`` while reading until the server closes; seconds taken and what it said."""
    started = time.monotonic()
    sender = asyncio.create_task(send)
    answer = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65_536), HEADER_TIMEOUT_S + BODY_TIMEOUT_S + 30):
            answer += chunk
    except ConnectionError:
        pass
    finally:
        elapsed = time.monotonic() - started
        sender.cancel()
        writer.close()
    return elapsed, answer


async def test_headers_sent_a_byte_at_a_time_are_cut_off(api: str) -> None:
    """Ten slowloris connections, each sending its headers a byte every 0.2 s (a minute's
    worth): all closed with 408 about a second after they opened."""
    headers = b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 300 + b"\r\n\r\n"

    async def one() -> tuple[float, bytes]:
        reader, writer = await _open(api)
        return await _cut_off_after(reader, writer, _drip(writer, headers, 0.2))

    results = await asyncio.gather(*(one() for _ in range(10)))
    for elapsed, answer in results:
        assert HEADER_TIMEOUT_S - 0.1 <= elapsed < HEADER_TIMEOUT_S + SLACK_S, results
        assert answer.startswith(b"HTTP/1.1 408 "), answer


async def test_a_silent_connection_and_a_slow_second_request_are_cut_off(api: str) -> None:
    # Connected, nothing sent: closed without an answer.
    reader, writer = await _open(api)
    elapsed, answer = await _cut_off_after(reader, writer, asyncio.sleep(60))
    assert answer == b"" and elapsed < HEADER_TIMEOUT_S + SLACK_S

    # A kept-alive connection: the first request is answered, the next one's headers
    # dripping in are cut off like a first request's.
    reader, writer = await _open(api)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert first.split(b" ")[1] in (b"200", b"503"), first  # 503: no worker, still an answer
    length = next(
        int(line.split(b":")[1])
        for line in first.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    elapsed, answer = await _cut_off_after(
        reader, writer, _drip(writer, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 0.2)
    )
    assert answer.startswith(b"HTTP/1.1 408 ") and elapsed < HEADER_TIMEOUT_S + SLACK_S, (elapsed, answer)


async def test_a_body_sent_a_byte_at_a_time_is_cut_off(api: str) -> None:
    """Headers at once, then a 300-byte body a byte every 0.1 s: 408 with a GraphQL-shaped
    error about a second into the body, and the connection closed."""
    body = json.dumps({"query": "{ viewer { role } }", "variables": {"pad": "x" * 250}}).encode()
    reader, writer = await _open(api)
    writer.write(
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    elapsed, answer = await _cut_off_after(reader, writer, _drip(writer, body, 0.1))
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert BODY_TIMEOUT_S - 0.1 <= elapsed < BODY_TIMEOUT_S + SLACK_S, elapsed
    [error] = json.loads(answer.split(b"\r\n\r\n", 1)[1])["errors"]
    assert error["extensions"] == {"code": "VALIDATION_FAILED"}


TYPENAME = json.dumps({"query": "{ __typename }"}).encode()
TYPENAME_REQUEST = (
    b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(TYPENAME)}\r\n\r\n".encode()
    + TYPENAME
)


async def _status_of_typename(base_url: str) -> bytes:
    reader, writer = await _open(base_url)
    try:
        writer.write(TYPENAME_REQUEST)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    return head.split(b" ")[1]


async def test_an_ordinary_request_with_a_body_is_served(api: str) -> None:
    assert await _status_of_typename(api) == b"200"


async def test_connections_over_the_cap_get_503(api: str) -> None:
    """MAX_CONNECTIONS connections held open: the next request is answered 503 at once."""
    held = [await _open(api) for _ in range(MAX_CONNECTIONS)]
    try:
        assert await _status_of_typename(api) == b"503"
    finally:
        for _, w in held:
            w.close()
    deadline = time.monotonic() + 5
    while await _status_of_typename(api) != b"200":  # the server sees them go
        assert time.monotonic() < deadline, "closed connections were not given back"
        await asyncio.sleep(0.1)


async def _closed_with(client: GraphQLWS) -> tuple[int | None, str]:
    with pytest.raises(ConnectionClosed) as closed:
        for _ in range(5):
            await client.receive(timeout_s=10)
    frame = closed.value.rcvd
    return (frame.code, frame.reason) if frame else (None, "")


async def test_one_token_holds_at_most_its_cap_of_sockets(api: str, workspace: Any) -> None:
    url = ws_url(api)
    held = [await GraphQLWS.open(url, workspace.viewer) for _ in range(PER_TOKEN)]
    try:
        one_more = await GraphQLWS.open(url, workspace.viewer)  # acknowledged, then closed
        code, reason = await _closed_with(one_more)
        assert code == 1013 and f"{PER_TOKEN} sockets" in reason, (code, reason)
        # The others still work, and so does another token of the same workspace.
        assert await held[0].execute("1", "{ viewer { role } }") == {"data": {"viewer": {"role": "viewer"}}}
        other = await GraphQLWS.open(url, workspace.operator)
        assert await other.execute("1", "{ viewer { role } }") == {"data": {"viewer": {"role": "operator"}}}
        await other.close()
        # A socket closed gives its place back.
        await held.pop().close()
        deadline = time.monotonic() + 5
        while True:
            again = await GraphQLWS.open(url, workspace.viewer)
            try:
                assert await again.execute("1", "{ viewer { role } }") == {
                    "data": {"viewer": {"role": "viewer"}}
                }
                held.append(again)
                break
            except ConnectionClosed:
                assert time.monotonic() < deadline, "the closed socket's place was not given back"
                await asyncio.sleep(0.1)
    finally:
        for client in held:
            await client.close()


async def test_sockets_not_signed_in_are_capped_per_address(api: str, workspace: Any) -> None:
    url = ws_url(api)
    silent = [await GraphQLWS.connect(url) for _ in range(PENDING_PER_ADDRESS)]
    try:
        one_more = await GraphQLWS.connect(url)  # closed at once, long before the init timeout
        started = time.monotonic()
        code, reason = await _closed_with(one_more)
        assert code == 1013 and "not signed in" in reason, (code, reason)
        assert time.monotonic() - started < 5
        # Signing one of them in frees a place: a new silent socket is let in again.
        await silent[0].init({"Authorization": f"Bearer {workspace.viewer}"})
        newcomer = await GraphQLWS.connect(url)
        silent.append(newcomer)
        await newcomer.init({"Authorization": f"Bearer {workspace.operator}"})
        assert await newcomer.execute("1", "{ viewer { role } }") == {
            "data": {"viewer": {"role": "operator"}}
        }
    finally:
        for client in silent:
            await client.close()
