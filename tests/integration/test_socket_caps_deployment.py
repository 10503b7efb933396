"""``ENVERIF_WS_MAX_SOCKETS_PER_TOKEN`` holds for the deployment, not per API process
(app/services/socket_slots.py; issue 20 item 8): two real ``enverif serve`` processes on one
Redis share the count, a closed socket gives its place back to the other process, and the
sockets of a process that was killed stop counting once their slots lapse; with Redis away
the cap falls back to each process's own count.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from websockets.exceptions import ConnectionClosed

from app import keys
from app.services.socket_slots import SocketSlots
from app.settings import Settings
from tests.support.live import spawn_api
from tests.support.ws import GraphQLWS, ws_url

PER_TOKEN = 2
SLOT_TTL_S = 1.5
VIEWER = {"data": {"viewer": {"role": "viewer"}}}


def _serve(settings: Settings) -> Any:
    return spawn_api(
        settings,
        ENVERIF_WS_MAX_SOCKETS_PER_TOKEN=str(PER_TOKEN),
        ENVERIF_WS_SOCKET_SLOT_TTL_S=str(SLOT_TTL_S),
    )


@pytest.fixture
def two_apis(settings: Settings) -> Iterator[tuple[Any, str, Any, str]]:
    first, first_url = _serve(settings)
    second, second_url = _serve(settings)
    try:
        yield first, first_url, second, second_url
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


async def _over_cap(url: str, token: str) -> bool:
    """Opens a socket: True when it was closed for the token's cap, False when it works
    (then it is closed again)."""
    client = await GraphQLWS.open(url, token)
    try:
        answer = await client.execute("1", "{ viewer { role } }")
    except ConnectionClosed as closed:
        frame = closed.rcvd
        assert frame is not None and frame.code == 1013 and f"{PER_TOKEN} sockets" in frame.reason, frame
        return True
    assert not answer.get("errors"), answer
    await client.close()
    return False


async def _until_let_in(url: str, token: str, what: str) -> None:
    deadline = time.monotonic() + 30
    while await _over_cap(url, token):
        assert time.monotonic() < deadline, what


async def test_the_cap_per_token_counts_every_api_process(two_apis: Any, workspace: Any) -> None:
    _, first_url, _, second_url = two_apis
    held = [await GraphQLWS.open(ws_url(first_url), workspace.viewer) for _ in range(PER_TOKEN)]
    try:
        for client in held:
            assert await client.execute("1", "{ viewer { role } }") == VIEWER
        # The token's cap is used up on the first process: the second refuses one more, and
        # keeps refusing while the sockets live (well past a slot's TTL: they are renewed).
        for _ in range(4):
            assert await _over_cap(ws_url(second_url), workspace.viewer)
        await asyncio.sleep(SLOT_TTL_S)
        assert await _over_cap(ws_url(second_url), workspace.viewer)
        # Another token is not affected.
        assert not await _over_cap(ws_url(second_url), workspace.operator)
        # A socket closed on the first process gives its place to the second.
        await held.pop().close()
        await _until_let_in(ws_url(second_url), workspace.viewer, "the closed socket's place never came back")
    finally:
        for client in held:
            await client.close()


async def test_a_killed_process_s_sockets_stop_counting(two_apis: Any, workspace: Any) -> None:
    first, first_url, _, second_url = two_apis
    held = [await GraphQLWS.open(ws_url(first_url), workspace.viewer) for _ in range(PER_TOKEN)]
    for client in held:
        assert await client.execute("1", "{ viewer { role } }") == VIEWER
    assert await _over_cap(ws_url(second_url), workspace.viewer)
    # SIGKILL: the process gives nothing back; its slots lapse unrenewed.
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    await _until_let_in(ws_url(second_url), workspace.viewer, "a dead process's sockets kept counting")
    for client in held:
        with contextlib.suppress(Exception):
            await client.close()


async def test_slots_come_back_after_redis_lost_them_and_fail_open_while_it_is_away(
    settings: Settings,
) -> None:
    redis = Redis.from_url(settings.effective_redis_url)
    slots = SocketSlots(redis, f"{settings.redis_prefix}:slots", ttl_s=60)
    try:
        first = await slots.take(7, 1)
        assert isinstance(first, str)
        assert await slots.take(7, 1) is False  # the cap, on Redis
        # Redis lost its data (a restart without persistence): a renewal puts the slot back.
        await redis.delete(keys.ws_token_sockets_key(f"{settings.redis_prefix}:slots", 7))
        await slots.renew()
        assert await slots.take(7, 1) is False
        await slots.give_back(first)
        second = await slots.take(7, 1)
        assert isinstance(second, str)
        await slots.give_back(second)
    finally:
        await redis.aclose()
    # Redis unreachable: no answer (the caller keeps to its own count), not a refusal.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    away = Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    try:
        assert await SocketSlots(away, "away", ttl_s=60).take(7, 1) is None
    finally:
        await away.aclose()
