"""Fair admission through a real ``enverif serve`` (app/graphql/admission.py): one client's
GraphQL requests in progress are bounded, per verified token and per client address; the
next one waits, or is refused with 429 ``RATE_LIMITED`` when its client already has one
waiting; ``/healthz`` and other clients are never held behind it (issue 20 item 1).

A request is held in progress by sending its headers with ``Expect: 100-continue`` and
waiting for the server's ``100 Continue``: admission happens before the body is read, and the
server asks for the body only once the request is admitted, so the answer proves the request
holds its client's place (a refused one gets its 429 instead). It holds it until the body
comes. Every wait here ends on an event, not a timer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from app.settings import Settings
from tests.support.live import spawn_api

QUERY = json.dumps({"query": "{ viewer { role } }"}).encode()
ANONYMOUS = json.dumps({"query": "{ __typename }"}).encode()


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[str]:
    proc, base_url = spawn_api(
        settings,
        ENVERIF_GRAPHQL_MAX_IN_FLIGHT_PER_ADDRESS="1",
        ENVERIF_GRAPHQL_MAX_IN_FLIGHT_PER_TOKEN="1",
        ENVERIF_GRAPHQL_MAX_QUEUED_PER_CLIENT="1",
        # Longer than any test: a request that waits is let in by the one before it ending.
        ENVERIF_GRAPHQL_ADMISSION_WAIT_S="120",
        ENVERIF_REQUEST_BODY_TIMEOUT_S="120",
    )
    try:
        yield base_url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def held(base_url: str, body: bytes, token: str | None = None) -> AsyncIterator[None]:
    """A ``/graphql`` request in progress until the block ends, when its body goes and its
    answer is read. Enters once the server has admitted it (see the module docstring)."""
    address = urlsplit(base_url)
    assert address.hostname == "127.0.0.1"
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(
        (
            f"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head == b"HTTP/1.1 100 Continue\r\n\r\n", f"the held request was not admitted: {head!r}"
        yield
        writer.write(body)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200 "), head
    finally:
        writer.close()


async def _post(client: httpx.AsyncClient, body: bytes, token: str | None = None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return await client.post("/graphql", content=body, headers=headers)


def _refused(response: httpx.Response) -> str:
    assert response.status_code == 429, response.text
    assert response.headers["retry-after"] == "1"
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED", error
    message: str = error["message"]
    return message


async def _one_waits(
    client: httpx.AsyncClient, body: bytes, token: str | None = None
) -> asyncio.Task[httpx.Response]:
    """With the client's one place held, sends two more of its requests: whichever arrives
    first waits, and the other finds it waiting and is refused. Returns the waiting one (await
    it after the held request ends)."""
    sent = {asyncio.create_task(_post(client, body, token)) for _ in range(2)}
    done, pending = await asyncio.wait(sent, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1 and len(pending) == 1, "both requests were answered while one should wait"
    assert "already waiting" in _refused(done.pop().result())
    return pending.pop()


async def test_a_flooding_address_waits_its_turn_and_holds_back_no_one(api: str, workspace: Any) -> None:
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:
        # The viewer token is verified once, so its requests count against the token.
        assert (await _post(client, QUERY, workspace.viewer)).status_code == 200
        async with held(api, ANONYMOUS):
            # One more anonymous request waits (it is not refused); a third finds it waiting.
            waiting = await _one_waits(client, ANONYMOUS)
            # Nobody else waits behind this address: /healthz, and a verified token.
            assert (await client.get("/healthz")).status_code in (200, 503)
            answer = await _post(client, QUERY, workspace.viewer)
            assert answer.json() == {"data": {"viewer": {"role": "viewer"}}}
        # The held request ended: the waiting one went in.
        assert (await waiting).json() == {"data": {"__typename": "Query"}}
        assert (await _post(client, ANONYMOUS)).status_code == 200


async def test_a_token_over_its_share_waits_and_other_tokens_do_not(api: str, workspace: Any) -> None:
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:
        for token in (workspace.viewer, workspace.operator):
            assert (await _post(client, QUERY, token)).status_code == 200  # verified
        async with held(api, QUERY, workspace.viewer):
            waiting = await _one_waits(client, QUERY, workspace.viewer)
            # Another token, and a request without one, are let in at once.
            assert (await _post(client, QUERY, workspace.operator)).json() == {
                "data": {"viewer": {"role": "operator"}}
            }
            assert (await _post(client, ANONYMOUS)).status_code == 200
        assert (await waiting).json() == {"data": {"viewer": {"role": "viewer"}}}


async def test_a_made_up_token_counts_against_its_address(api: str) -> None:
    # A fresh made-up token per request would otherwise be a fresh share per request.
    async with httpx.AsyncClient(base_url=api, timeout=60) as client:
        async with held(api, ANONYMOUS, token="made-up-0"):
            waiting = await _one_waits(client, ANONYMOUS, "made-up-1")
            assert "already waiting" in _refused(await _post(client, ANONYMOUS))
        assert (await waiting).status_code != 429
