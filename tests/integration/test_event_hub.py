"""The per-process event hub and the publisher, against a real Redis (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from app.dev.embedded import redis_server_binary
from app.events.hub import DEFAULT_QUEUE_MAX, EventHub, HubStopped, Resync, SubscriberTooSlow, Subscription
from app.events.publish import EventMessage, decode_message, encode_message, publish_events
from app.events.subscriber import RedisSubscriber, subscriber_client_name
from app.services.runtime import Runtime
from app.settings import Settings

# Ids far from anything the database hands out, and distinct per test, so concurrent tests
# sharing the session's channel never see each other's events.
_ids = itertools.count(random.randint(10**9, 2 * 10**9) * 1000)


def fresh_id() -> int:
    return next(_ids)


def event(workspace_id: int, root_run_id: int, seq: int, **extra: Any) -> EventMessage:
    return EventMessage(
        workspace_id=workspace_id,
        root_run_id=root_run_id,
        seq=seq,
        run_id=extra.get("run_id", root_run_id),
        parent_run_id=extra.get("parent_run_id"),
        type=extra.get("type", "RUN_STATUS_CHANGED"),
        status=extra.get("status", "RUNNING"),
        step_id=extra.get("step_id"),
        payload=extra.get("payload", {"n": seq}),
        at=datetime.now(UTC),
    )


@asynccontextmanager
async def started_hub(
    runtime: Runtime, *, queue_max: int = DEFAULT_QUEUE_MAX, wait_s: float = 5.0
) -> AsyncIterator[EventHub]:
    """A hub on its own subscriber, as an API process has them."""
    subscriber = RedisSubscriber(runtime.settings)
    hub = EventHub(runtime, subscriber, queue_max=queue_max)
    await subscriber.start(wait_s=wait_s)
    try:
        yield hub
    finally:
        await subscriber.stop()
        hub.stop()


@pytest.fixture
async def hub(runtime: Runtime) -> AsyncIterator[EventHub]:
    async with started_hub(runtime) as h:
        assert h.connected
        yield h


async def drain(sub: Subscription, *, quiet_s: float = 0.3) -> list[EventMessage | Resync]:
    """Everything the subscription receives until it has been quiet for ``quiet_s``."""
    got: list[EventMessage | Resync] = []
    while (item := await sub.get(timeout_s=quiet_s)) is not None:
        got.append(item)
    return got


async def test_delivers_only_the_subscribed_tree_of_the_subscribed_workspace(
    hub: EventHub, runtime: Runtime
) -> None:
    ws, other_ws, root, other_root = fresh_id(), fresh_id(), fresh_id(), fresh_id()
    prefix = runtime.settings.redis_prefix
    with (
        hub.subscribe(ws, root) as mine,
        hub.subscribe(ws, root) as mine_too,
        hub.subscribe(other_ws, root) as same_root_other_workspace,
        hub.subscribe(ws, other_root) as other_tree,
    ):
        await publish_events(runtime.redis, prefix, [event(ws, root, 1), event(ws, root, 2, step_id=7)])
        await publish_events(runtime.redis, prefix, [event(other_ws, other_root, 1)])
        await publish_events(runtime.redis, prefix, [event(ws, root, 3, parent_run_id=5, payload=None)])

        for sub in (mine, mine_too):
            got = await drain(sub)
            assert [m.seq for m in got if isinstance(m, EventMessage)] == [1, 2, 3]
            assert all(
                isinstance(m, EventMessage) and (m.workspace_id, m.root_run_id) == (ws, root) for m in got
            )
            assert isinstance(got[1], EventMessage) and got[1].step_id == 7
            assert isinstance(got[2], EventMessage) and got[2].parent_run_id == 5 and got[2].payload is None
        assert await drain(same_root_other_workspace) == []
        assert await drain(other_tree) == []
    assert hub.subscription_count == 0


async def test_signals_resync_after_losing_the_connection_and_keeps_delivering(
    hub: EventHub, runtime: Runtime
) -> None:
    ws, root = fresh_id(), fresh_id()
    prefix = runtime.settings.redis_prefix
    with hub.subscribe(ws, root) as sub:
        await publish_events(runtime.redis, prefix, [event(ws, root, 1)])
        first = await sub.get(timeout_s=5)
        assert isinstance(first, EventMessage) and first.seq == 1

        # Cut only this session's hub connection (other test sessions share the server).
        killed = await _kill_clients_named(runtime.redis, subscriber_client_name(prefix))
        assert killed >= 1

        signal = await sub.get(timeout_s=10)
        assert isinstance(signal, Resync), signal
        assert hub.connected  # the resync is only signalled once the hub has re-subscribed

        await publish_events(runtime.redis, prefix, [event(ws, root, 2)])
        again = await sub.get(timeout_s=5)
        assert isinstance(again, EventMessage) and again.seq == 2


async def test_a_subscriber_that_falls_behind_is_closed_with_a_reason_instead_of_a_growing_queue(
    runtime: Runtime,
) -> None:
    async with started_hub(runtime, queue_max=5) as hub:
        ws, root = fresh_id(), fresh_id()
        prefix = runtime.settings.redis_prefix
        told: list[str] = []
        with hub.subscribe(ws, root, on_overflow=told.append) as slow, hub.subscribe(ws, root) as fast:
            received: list[int] = []

            async def keep_up() -> None:
                while len(received) < 12:
                    item = await fast.get(timeout_s=5)
                    assert isinstance(item, EventMessage), item
                    received.append(item.seq)

            reader = asyncio.create_task(keep_up())
            for seq in range(1, 13):
                await publish_events(runtime.redis, prefix, [event(ws, root, seq)])
                await asyncio.sleep(0.01)  # let the fast reader keep up
            await asyncio.wait_for(reader, 10)
            assert received == list(range(1, 13))

            # Told once, at the moment of the overflow; unregistered; its backlog dropped.
            assert len(told) == 1 and "too slow" in told[0] and "afterSeq" in told[0]
            assert slow.closed and hub.subscription_count == 1
            with pytest.raises(SubscriberTooSlow, match="too slow"):
                await slow.get(timeout_s=1)


async def test_stopping_the_hub_wakes_waiting_consumers(runtime: Runtime) -> None:
    async with started_hub(runtime) as hub:
        sub = hub.subscribe(fresh_id(), fresh_id())
        waiter = asyncio.create_task(sub.get())
        await asyncio.sleep(0.05)
    with pytest.raises(HubStopped):
        await asyncio.wait_for(waiter, 5)
    assert [item async for item in sub] == []


async def test_a_hub_started_without_redis_catches_up_once_it_appears(
    runtime: Runtime, settings: Settings, tmp_path: Path
) -> None:
    # On a unix socket, like the embedded Redis of `enverif dev`.
    sock = tmp_path / "redis.sock"
    down = Settings(**{**settings.model_dump(), "redis_url": f"unix://{sock}"})
    subscriber = RedisSubscriber(down)
    hub = EventHub(replace(runtime, settings=down), subscriber)
    # Nothing listens there yet: start() must neither hang nor raise.
    await subscriber.start(wait_s=0.3)
    server: asyncio.subprocess.Process | None = None
    try:
        assert not hub.connected
        ws, root = fresh_id(), fresh_id()
        sub = hub.subscribe(ws, root)
        assert await sub.get(timeout_s=0.2) is None

        args = ["--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"]
        server = await asyncio.create_subprocess_exec(
            redis_server_binary(), *args, stdout=asyncio.subprocess.DEVNULL
        )
        # Subscriptions made while it was down may have missed events: they must re-read.
        assert isinstance(await sub.get(timeout_s=15), Resync)
        assert hub.connected
        publisher = aioredis.Redis(unix_socket_path=str(sock))
        try:
            await publish_events(publisher, down.redis_prefix, [event(ws, root, 1)])
        finally:
            await publisher.aclose()
        live = await sub.get(timeout_s=5)
        assert isinstance(live, EventMessage) and live.seq == 1
    finally:
        await subscriber.stop()
        hub.stop()
        if server is not None:
            server.terminate()
            await server.wait()


async def test_publish_swallows_redis_failures(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = aioredis.Redis(host="127.0.0.1", port=_free_port(), socket_connect_timeout=1)
    try:
        with caplog.at_level(logging.WARNING, logger="app.events.publish"):
            await publish_events(unreachable, "nowhere", [event(1, 1, 1), event(1, 1, 2)])
            await publish_events(unreachable, "nowhere", [event(1, 1, 3)])
    finally:
        await unreachable.aclose()
    assert sum("could not publish" in r.getMessage() for r in caplog.records) == 2


def test_message_round_trip_and_large_payloads_are_left_to_the_database() -> None:
    small = event(3, 4, 5, run_id=6, parent_run_id=4, step_id=9, payload={"ok": "é"})
    decoded = decode_message(encode_message(small))
    assert decoded == small

    big = event(3, 4, 6, payload={"blob": "x" * 100_000})
    wire = encode_message(big)
    assert len(wire) < 1_000
    decoded_big = decode_message(wire)
    assert decoded_big.payload_omitted and decoded_big.payload is None and decoded_big.seq == 6

    with pytest.raises(ValueError):
        decode_message(b'{"seq": 1}')
    with pytest.raises(ValueError):
        decode_message(b"not json")


def test_a_transactions_events_are_one_message_split_only_when_large() -> None:
    """One PUBLISH per transaction: an array of its events in seq order; a single event is
    the plain object older hubs read; a transaction past MAX_MESSAGE_CHARS goes in several."""
    from app.events.publish import MAX_INLINE_PAYLOAD_CHARS, MAX_MESSAGE_CHARS, decode_messages, encode_events

    events = [event(1, 9, seq) for seq in (2, 3, 1)]
    (wire,) = encode_events(events)
    assert [e.seq for e in decode_messages(wire)] == [1, 2, 3]
    (single,) = encode_events(events[:1])
    assert decode_message(single).seq == 2
    bulky = "x" * (MAX_INLINE_PAYLOAD_CHARS - 1_000)
    many = [
        event(1, 9, seq, payload={"v": bulky}) for seq in range(1, 2 * MAX_MESSAGE_CHARS // len(bulky) + 2)
    ]
    messages = encode_events(many)
    assert len(messages) >= 2 and all(len(m) <= MAX_MESSAGE_CHARS for m in messages)
    assert [e.seq for m in messages for e in decode_messages(m)] == list(range(1, len(many) + 1))
    with pytest.raises(ValueError):
        decode_messages(b'[{"seq": 1}]')


async def _kill_clients_named(client: aioredis.Redis, name: str) -> int:
    killed = 0
    for entry in await client.client_list():
        if entry.get("name") == name:
            killed += int(await client.client_kill_filter(_id=entry["id"]))
    return killed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_a_shorter_idle_timeout_after_a_longer_one_is_kept(hub: EventHub) -> None:
    """``get``'s idle timer outlives a wait (it is not re-created per event): a wait with a
    shorter timeout than the armed timer's must still end on time."""
    root = fresh_id()
    with hub.subscribe(1, root) as sub:
        waiting = asyncio.create_task(sub.get(timeout_s=60))
        await asyncio.sleep(0.05)
        sub._offer(event(1, root, 1))
        assert isinstance(await asyncio.wait_for(waiting, 5), EventMessage)
        assert await asyncio.wait_for(sub.get(timeout_s=0.2), 5) is None
        # A message arriving during a wait ends it at once, whatever timer is armed.
        waiting = asyncio.create_task(sub.get(timeout_s=60))
        await asyncio.sleep(0.05)
        sub._offer(event(1, root, 2))
        got = await asyncio.wait_for(waiting, 5)
        assert isinstance(got, EventMessage) and got.seq == 2
