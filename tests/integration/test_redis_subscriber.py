"""The process's one Redis pub/sub connection (app.events.subscriber), against a real Redis:
one connection for the event hub and the token cache, a silently dead link noticed by the
keepalive, a failing handler isolated from the others."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from app.events import subscriber as subscriber_module
from app.events.subscriber import RedisSubscriber, subscriber_client_name
from app.settings import Settings
from tests.integration.test_resilience import changed


class Recorder:
    """A handler that records what it is told; raises on a message b"boom"."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.messages: list[bytes] = []
        self.changed = asyncio.Event()

    def on_message(self, data: bytes) -> None:
        if data == b"boom":
            raise ValueError("a handler bug")
        self.messages.append(data)
        self.changed.set()

    def on_lost(self) -> None:
        self.calls.append("lost")
        self.changed.set()

    def on_regained(self) -> None:
        self.calls.append("regained")
        self.changed.set()

    async def wait_for(self, predicate: Any, timeout_s: float = 15.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


def channel() -> str:
    return f"test-subscriber-{uuid.uuid4().hex[:8]}"


async def test_one_connection_serves_every_channel_and_a_failing_handler_alone_starts_over(
    settings: Settings,
) -> None:
    first, second = Recorder(), Recorder()
    a, b = channel(), channel()
    sub = RedisSubscriber(settings)
    sub.add(a, first)
    sub.add(b, second)
    publisher = aioredis.from_url(settings.effective_redis_url)
    try:
        await sub.start()
        assert sub.connected and first.calls == ["regained"] and second.calls == ["regained"]
        named = [
            c
            for c in await publisher.client_list()
            if c.get("name") == subscriber_client_name(settings.redis_prefix)
        ]
        assert len(named) == 1 and named[0]["sub"] == "2"  # one connection, both channels

        await publisher.publish(a, b"one")
        await publisher.publish(b, b"two")
        await first.wait_for(lambda: first.messages == [b"one"])
        await second.wait_for(lambda: second.messages == [b"two"])

        # A handler that fails has lost that message: it starts over; the other one is untouched.
        await publisher.publish(a, b"boom")
        await first.wait_for(lambda: first.calls == ["regained", "lost", "regained"])
        await publisher.publish(a, b"three")
        await first.wait_for(lambda: first.messages == [b"one", b"three"])
        assert second.calls == ["regained"] and sub.connected
    finally:
        await sub.stop()
        await publisher.aclose()


class FreezableProxy:
    """A loopback TCP proxy whose open connections can be frozen: bytes stop flowing both
    ways and nothing is closed, as when a peer vanishes without a FIN."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.frozen = False
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> FreezableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:  # or Redis keeps the frozen connection's upstream side
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        frozen_here = asyncio.Event()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    if self.frozen or frozen_here.is_set():
                        frozen_here.set()
                        await asyncio.Event().wait()  # hold the connection open, forward nothing
                    dst.write(data)
                    await dst.drain()

        for task in (
            asyncio.create_task(pump(reader, up_writer)),
            asyncio.create_task(pump(up_reader, writer)),
        ):
            self._tasks.add(task)


async def test_a_silently_dead_link_is_noticed_by_the_keepalive_and_replaced(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscriber_module, "KEEPALIVE_S", 0.5)
    monkeypatch.setattr(subscriber_module, "KEEPALIVE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(subscriber_module, "READ_TIMEOUT_S", 0.1)
    url = httpx.URL(settings.effective_redis_url)
    recorder, name = Recorder(), channel()
    async with FreezableProxy(url.port or 6379) as proxy:
        via_proxy = changed(settings, redis_url=str(url.copy_with(host="127.0.0.1", port=proxy.port)))
        sub = RedisSubscriber(via_proxy)
        sub.add(name, recorder)
        publisher = aioredis.from_url(settings.effective_redis_url)
        try:
            await sub.start()
            assert recorder.calls == ["regained"]
            # Freeze the live connection: no FIN, no RST; only the missing PONG tells.
            proxy.frozen = True
            await recorder.wait_for(lambda: recorder.calls == ["regained", "lost"], timeout_s=10)
            proxy.frozen = False
            await recorder.wait_for(lambda: recorder.calls == ["regained", "lost", "regained"], timeout_s=10)
            assert proxy.connections == 2 and sub.connected
            await publisher.publish(name, b"after")
            await recorder.wait_for(lambda: recorder.messages == [b"after"])
        finally:
            await sub.stop()
            await publisher.aclose()
