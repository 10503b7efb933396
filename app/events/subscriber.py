"""The process's one Redis pub/sub connection, kept alive, with handlers per channel.

An API process listens on two channels: run events (``events.hub``) and token revocations
(``services.token_cache``). Both ride one subscribed connection, owned here: connecting,
noticing a dead link, reconnecting with backoff, and telling each handler when its channel
was lost and when it is back. One connection rather than one per reader, because both react
to a loss the same way and neither can hold the other up:

* Pub/sub is at-most-once: while the connection is down, messages are lost with no signal.
  Every handler is told ``on_lost`` (the token cache stops trusting itself, the hub stops
  counting as connected) and, once Redis has *confirmed* the channel again, ``on_regained``
  (the token cache trusts new lookups again, the hub tells every subscription to re-read
  the database). Confirmed, not merely sent: a database re-read that starts before Redis
  has processed the SUBSCRIBE could miss an event published in between.
* Handlers are synchronous and never block (the hub queues to bounded per-subscription
  queues, the cache drops entries), so a slow consumer of one channel cannot delay the other,
  nor make Redis cut this connection for an overfull output buffer.
* A handler that raises has lost a message: it is told ``on_lost`` then ``on_regained``, as
  after a reconnect, while the other handlers carry on.

Keepalive: a connection whose peer vanished without a FIN (a host gone, a cable pulled, a
firewall dropping state) looks idle forever; TCP keepalive probes would notice only after
the kernel's two hours. So during silence a PING goes out every ``KEEPALIVE_S``, and a
connection that answers nothing for ``KEEPALIVE_S + KEEPALIVE_TIMEOUT_S`` is dropped and
reconnected. redis-py's own ``health_check_interval`` sends PINGs but never checks the answer.

``Backoff`` (jittered, exponential) is the policy every Redis reconnect loop here follows,
the worker's poll-loop restarts (``workers.main``) included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from app.settings import Settings

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
# get_message blocks at most this long, so keepalive checks run during silence
# (get_message's default timeout of 0 would spin the CPU: redis-py #3108).
READ_TIMEOUT_S = 1.0
KEEPALIVE_S = 5.0
KEEPALIVE_TIMEOUT_S = 5.0
KEEPALIVE_MESSAGE = b"enverif-keepalive"


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delays between reconnect attempts: ``first_s``, doubling up to ``max_s``, each drawn
    within ±``jitter`` of its nominal value so that processes cut off together do not all
    come back in the same instant."""

    first_s: float = 0.05
    max_s: float = 5.0
    jitter: float = 0.2

    def delay_s(self, attempt: int, draw: float) -> float:
        """The delay before retry number ``attempt`` (0 first); ``draw`` is uniform in [0, 1)."""
        nominal: float = min(self.max_s, self.first_s * 2.0 ** min(attempt, 64))
        return nominal * (1 - self.jitter + 2 * self.jitter * draw)


RECONNECT = BackoffPolicy()


class Backoff:
    """One reconnect loop's place in a ``BackoffPolicy``; ``reset`` after a success."""

    def __init__(
        self, policy: BackoffPolicy = RECONNECT, *, draw: Callable[[], float] = random.random
    ) -> None:
        self.policy = policy
        self.attempt = 0
        self._draw = draw

    def next_delay_s(self, *, cap_s: float | None = None) -> float:
        delay = self.policy.delay_s(self.attempt, self._draw())
        self.attempt += 1
        return delay if cap_s is None else min(delay, cap_s)

    async def wait(self, *, cap_s: float | None = None) -> None:
        await asyncio.sleep(self.next_delay_s(cap_s=cap_s))

    def reset(self) -> None:
        self.attempt = 0


class ChannelHandler(Protocol):
    """What reads one channel. Called on the event loop; must not block."""

    def on_message(self, data: bytes) -> None: ...

    def on_lost(self) -> None:
        """Messages may be missed from now on, until ``on_regained``."""

    def on_regained(self) -> None:
        """Redis confirmed the channel again: everything published from now on arrives."""


def subscriber_client_name(prefix: str) -> str:
    """The connection's name in CLIENT LIST, for operators (and tests) to find it."""
    return f"{prefix}:subscriber"


class RedisSubscriber:
    """See the module docstring. Add every handler, then ``start``; ``stop`` at shutdown."""

    def __init__(self, settings: Settings, *, policy: BackoffPolicy = RECONNECT) -> None:
        self._settings = settings
        self._policy = policy
        self._handlers: dict[bytes, ChannelHandler] = {}
        self._confirmed: set[bytes] = set()
        self._all_confirmed = asyncio.Event()
        self._client: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._down_since: float | None = None

    def add(self, channel: str, handler: ChannelHandler) -> None:
        if self._task is not None:
            raise RuntimeError("add every handler before starting the subscriber")
        self._handlers[channel.encode()] = handler

    @property
    def connected(self) -> bool:
        """Every channel is confirmed subscribed on a live connection."""
        return self._all_confirmed.is_set()

    async def start(self, *, wait_s: float = CONNECT_TIMEOUT_S) -> None:
        """Start reading; waits (bounded) for every channel to be confirmed. If Redis is not
        reachable yet the process still starts: the reader keeps retrying."""
        if self._task is not None:
            raise RuntimeError("RedisSubscriber already started")
        if not self._handlers:
            return
        # Our own client, not the arq pool: a subscribed connection can do nothing else, and
        # the pool's connections must stay free for enqueues and publishes.
        url = self._settings.effective_redis_url
        # TCP keepalive on top of ours costs nothing; unix socket connections do not take the
        # option (the embedded Redis listens on one).
        tcp_options = {} if url.startswith("unix://") else {"socket_keepalive": True}
        self._client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            client_name=subscriber_client_name(self._settings.redis_prefix),
            **tcp_options,
        )
        self._task = asyncio.create_task(self._run(), name="enverif-redis-subscriber")
        try:
            async with asyncio.timeout(wait_s):
                await self._all_confirmed.wait()
        except TimeoutError:
            logger.warning("redis subscriber: Redis not reachable yet; subscribing once it is")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the reader --------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = Backoff(self._policy)
        while True:
            assert self._client is not None
            pubsub = self._client.pubsub()
            try:
                await pubsub.subscribe(*self._handlers)
                await self._read(pubsub, backoff)
            except (RedisError, OSError) as exc:
                # Once per outage: each retry of a Redis that is down would say the same.
                if self._down_since is None:
                    logger.warning("redis subscriber: connection lost (%r); reconnecting", exc)
                    self._down_since = asyncio.get_running_loop().time()
                else:
                    logger.debug("redis subscriber: still no connection (%r)", exc)
            except Exception:
                # Never let the process's only subscriber die: log, then recover like a disconnect.
                logger.exception("redis subscriber: unexpected error; reconnecting")
            finally:
                self._lost()
                # Shielded so a cancellation during stop() still releases the connection.
                with contextlib.suppress(Exception):
                    await asyncio.shield(pubsub.aclose())
            await backoff.wait()

    async def _read(self, pubsub: Any, backoff: Backoff) -> None:
        loop = asyncio.get_running_loop()
        heard_at = loop.time()
        pinged = False
        while True:
            raw = await pubsub.get_message(timeout=READ_TIMEOUT_S)
            now = loop.time()
            if raw is None:
                silent_s = now - heard_at
                if silent_s > KEEPALIVE_S + KEEPALIVE_TIMEOUT_S:
                    raise RedisConnectionError(f"no answer from Redis for {silent_s:.1f}s")
                if silent_s > KEEPALIVE_S and not pinged:
                    await pubsub.ping(KEEPALIVE_MESSAGE)
                    pinged = True
                continue
            heard_at, pinged = now, False
            kind = raw.get("type")
            if kind == "message":
                self._deliver(raw["channel"], raw["data"])
            elif kind == "subscribe":
                self._confirm(raw["channel"])
                backoff.reset()

    def _deliver(self, channel: bytes, data: bytes) -> None:
        handler = self._handlers.get(channel)
        if handler is None or channel not in self._confirmed:
            return
        try:
            handler.on_message(data)
        except Exception:
            logger.exception("redis subscriber: a handler of %s failed; it starts over", channel.decode())
            self._call(handler.on_lost)
            self._call(handler.on_regained)

    def _confirm(self, channel: bytes) -> None:
        handler = self._handlers.get(channel)
        if handler is None or channel in self._confirmed:
            return
        self._confirmed.add(channel)
        if len(self._confirmed) == len(self._handlers):
            self._all_confirmed.set()
            if self._down_since is not None:
                down_s = asyncio.get_running_loop().time() - self._down_since
                logger.info("redis subscriber: subscribed again after %.1fs", down_s)
                self._down_since = None
        self._call(handler.on_regained)

    def _lost(self) -> None:
        self._all_confirmed.clear()
        confirmed, self._confirmed = self._confirmed, set()
        for channel in confirmed:
            self._call(self._handlers[channel].on_lost)

    @staticmethod
    def _call(hook: Callable[[], None]) -> None:
        try:
            hook()
        except Exception:
            logger.exception("redis subscriber: a handler's lost/regained hook failed")
