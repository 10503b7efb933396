"""Run events from the process's Redis subscriber (``events.subscriber``), fanned out to
local subscriptions.

Pub/sub is at-most-once: whatever is published while our connection is down is gone, with
no signal from Redis. So after every reconnect the hub tells every local subscription to
``Resync`` (re-read ``run_events`` from the database from its last seq). The order matters:
re-subscribe FIRST (the subscriber calls ``on_regained`` only once Redis confirmed the
channel), then signal, so that nothing published between the subscriber's database read
and its next live message can fall through the crack.

A subscription's queue is bounded (``ENVERIF_SUBSCRIPTION_QUEUE_MAX``): a subscriber too slow
to keep up (typically a websocket whose client stopped reading, so its sends block) is
closed. Its queue is dropped and nothing more is queued for it, ``on_overflow`` is told the
reason at once (the GraphQL layer closes the websocket, which also frees a send blocked on
a full socket), and ``get`` raises ``SubscriberTooSlow``. One stuck client therefore never
grows the process's memory nor holds up the others: dispatching never waits on a consumer.
The client resumes from its last seq with ``afterSeq``; the database replays what it missed.

Everything here runs on the event loop thread; dispatching a message to the subscriptions is
synchronous (no ``await`` between looking up the subscribers and queueing), so the
subscription registry needs no lock.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from app import keys
from app.events.publish import EventMessage, decode_messages
from app.events.subscriber import RedisSubscriber

if TYPE_CHECKING:
    from app.services.runtime import Runtime

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_QUEUE_MAX = 1_000
# How long one read of a tree's newest seq serves the process's other subscriptions to that
# tree (their idle polls): a thousand quiet subscribers cost one query, not a thousand.
HEAD_SHARE_S = 0.5
# Workspace-wide subscriptions (``approvalEvents``) are kept under this root id (no run has
# it) and receive only the events of these types, from every tree of their workspace.
WORKSPACE_WIDE = 0
WORKSPACE_EVENT_TYPES = frozenset({"APPROVAL_REQUESTED", "APPROVAL_DECIDED"})


class HubStopped(Exception):
    """The hub shut down (process exit): no more live events will come."""


class SubscriberTooSlow(Exception):
    """The subscription's queue overflowed: it was closed and gets no more events."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Resync:
    """Live delivery had a hole: re-read the database from the last delivered seq."""

    reason: str


class Subscription:
    """Live events of one run tree in one workspace, for one local consumer.

    Use as an async context manager (unsubscribes on exit) and read with ``get`` (with an
    idle timeout) or ``async for``.
    """

    def __init__(
        self,
        hub: EventHub,
        workspace_id: int,
        root_run_id: int,
        queue_max: int,
        on_overflow: Callable[[str], None] | None = None,
    ) -> None:
        self.workspace_id = workspace_id
        self.root_run_id = root_run_id
        self._hub = hub
        self._queue_max = queue_max
        self._on_overflow = on_overflow
        self._queue: collections.deque[EventMessage] = collections.deque()
        self._resync: Resync | None = None
        self._too_slow: str | None = None
        self._wakeup = asyncio.Event()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_deadline: float | None = None
        self._timed_out = False
        self._stopped = False
        self.closed = False

    # -- producer side (the hub's reader task) --------------------------------------------
    def _offer(self, message: EventMessage) -> None:
        if self._resync is not None or self.closed:
            # A database re-read is already due and will cover this message (or nobody
            # will read it any more).
            return
        if len(self._queue) >= self._queue_max:
            self._overflow(
                f"subscriber too slow: more than {self._queue_max} live events waited to be sent; "
                "resubscribe with afterSeq set to the last seq received"
            )
            return
        self._queue.append(message)
        self._wakeup.set()

    def _overflow(self, reason: str) -> None:
        self._queue.clear()
        self._too_slow = reason
        self._wakeup.set()
        self.close()
        if self._on_overflow is not None:
            try:
                self._on_overflow(reason)
            except Exception:
                # The hub's reader must survive whatever a consumer's callback does.
                logger.exception("event hub: overflow callback failed")

    def _signal_stopped(self) -> None:
        self._stopped = True
        self._wakeup.set()

    def _signal_resync(self, reason: str) -> None:
        # Anything still queued is older than the hole; the re-read covers it too.
        self._queue.clear()
        self._resync = Resync(reason)
        self._wakeup.set()

    # -- consumer side ---------------------------------------------------------------------
    async def get(self, timeout_s: float | None = None) -> EventMessage | Resync | None:
        """The next message or ``Resync``; ``None`` when ``timeout_s`` passed in silence.

        Raises ``HubStopped`` once the hub has shut down, ``SubscriberTooSlow`` once the queue
        overflowed.
        """
        while True:
            if self._too_slow is not None:
                raise SubscriberTooSlow(self._too_slow)
            if self._stopped:
                raise HubStopped("the event hub has stopped")
            if self._resync is not None:
                resync, self._resync = self._resync, None
                return resync
            if self._queue:
                return self._queue.popleft()
            self._wakeup.clear()
            if timeout_s is not None:
                self._arm_idle_timer(timeout_s)
            try:
                await self._wakeup.wait()
            finally:
                self._idle_deadline = None
            if self._timed_out:
                self._timed_out = False
                if not self._queue and self._resync is None and not self._stopped and self._too_slow is None:
                    return None

    # The idle timeout of ``get`` is one timer per subscription that outlives many waits: an
    # event arriving before the deadline leaves it armed (it re-arms itself for the next
    # deadline when it fires early), instead of creating and cancelling a timer per event.
    # With a thousand subscribers to a busy tree that is a thousand fewer timer operations
    # per event.
    def _arm_idle_timer(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self._idle_deadline = deadline
        timer = self._idle_timer
        if timer is not None and timer.when() > deadline:
            timer.cancel()
            timer = None
        if timer is None:
            self._idle_timer = loop.call_at(deadline, self._on_idle_timer)

    def _on_idle_timer(self) -> None:
        self._idle_timer = None
        deadline = self._idle_deadline
        if deadline is None:
            return  # nobody is waiting now; the next wait arms a new timer
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            self._timed_out = True
            self._wakeup.set()
        else:
            self._idle_timer = loop.call_at(deadline, self._on_idle_timer)

    def __aiter__(self) -> AsyncIterator[EventMessage | Resync]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[EventMessage | Resync]:
        while not self.closed:
            try:
                item = await self.get()
            except (HubStopped, SubscriberTooSlow):
                return
            if item is not None:
                yield item

    async def shared_read(self, read: Callable[[], Awaitable[T]], *key: object) -> T:
        """``read()``, shared for ``HEAD_SHARE_S`` with the process's other subscriptions to
        the same tree that ask for the same ``key`` (the tree's newest seq, a run's labels):
        a thousand subscribers on one tree then cost one query, not a thousand."""
        return await self._hub._shared_read((self.workspace_id, self.root_run_id, *key), read)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._hub._remove(self)
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

    # Registering and unregistering never wait, so both context manager flavours work.
    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class EventHub:
    """The handler of ``keys.events_channel`` on the process's subscriber; see the module
    docstring. Created before the subscriber starts; ``stop`` at shutdown wakes every
    consumer with ``HubStopped``."""

    def __init__(
        self, runtime: Runtime, subscriber: RedisSubscriber, *, queue_max: int = DEFAULT_QUEUE_MAX
    ) -> None:
        self._queue_max = queue_max
        self._subscriptions: dict[tuple[int, int], set[Subscription]] = {}
        # Set while the subscriber holds a confirmed subscription on the channel.
        self._connected = False
        self._reads: dict[tuple[object, ...], tuple[float, asyncio.Future[Any]]] = {}
        subscriber.add(keys.events_channel(runtime.settings.redis_prefix), self)

    @property
    def connected(self) -> bool:
        return self._connected

    def stop(self) -> None:
        # Wake consumers blocked in get(): they must not wait forever for a dead hub.
        for subs in list(self._subscriptions.values()):
            for sub in list(subs):
                sub._signal_stopped()
                sub.close()

    def subscribe(
        self, workspace_id: int, root_run_id: int, *, on_overflow: Callable[[str], None] | None = None
    ) -> Subscription:
        """Register a local subscription; it receives everything dispatched from now on.

        ``on_overflow`` is called (synchronously, on the hub's reader) with the reason when
        the subscription is closed for being too slow; it must not block.
        """
        sub = Subscription(self, workspace_id, root_run_id, self._queue_max, on_overflow)
        self._subscriptions.setdefault((workspace_id, root_run_id), set()).add(sub)
        return sub

    def subscribe_workspace(
        self, workspace_id: int, *, on_overflow: Callable[[str], None] | None = None
    ) -> Subscription:
        """A subscription to the approval events of every run tree of the workspace."""
        return self.subscribe(workspace_id, WORKSPACE_WIDE, on_overflow=on_overflow)

    def _remove(self, sub: Subscription) -> None:
        key = (sub.workspace_id, sub.root_run_id)
        subs = self._subscriptions.get(key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscriptions[key]

    async def _shared_read(self, key: tuple[object, ...], read: Callable[[], Awaitable[T]]) -> T:
        now = time.monotonic()
        entry = self._reads.get(key)
        if entry is None or now - entry[0] > HEAD_SHARE_S:
            if len(self._reads) > 10_000:
                self._reads = {k: v for k, v in self._reads.items() if now - v[0] <= HEAD_SHARE_S}
            entry = (now, asyncio.ensure_future(read()))
            self._reads[key] = entry
        # Shielded: one subscriber going away must not cancel the read the others await.
        result: T = await asyncio.shield(entry[1])
        return result

    @property
    def subscription_count(self) -> int:
        return sum(len(s) for s in self._subscriptions.values())

    # -- the subscriber's hooks --------------------------------------------------------------
    def on_message(self, data: bytes) -> None:
        if not self._subscriptions:
            return
        try:
            messages = decode_messages(data)  # a transaction's events, or one (older publishers)
        except ValueError as exc:
            logger.warning("event hub: ignoring %s", exc)
            return
        for message in messages:
            self._dispatch(message)

    def on_lost(self) -> None:
        self._connected = False

    def on_regained(self) -> None:
        self._connected = True
        # Only now, with the subscription back in place, may subscribers re-read: any event
        # committed after their read will reach them live. (At start-up there are none.)
        self._resync_all("lost the Redis connection; events may have been missed")

    def _dispatch(self, message: EventMessage) -> None:
        # Both keys: a subscription never sees another workspace's events, even for a
        # colliding root id.
        for sub in tuple(self._subscriptions.get((message.workspace_id, message.root_run_id), ())):
            sub._offer(message)
        if message.type in WORKSPACE_EVENT_TYPES:
            for sub in tuple(self._subscriptions.get((message.workspace_id, WORKSPACE_WIDE), ())):
                sub._offer(message)

    def _resync_all(self, reason: str) -> None:
        for subs in tuple(self._subscriptions.values()):
            for sub in tuple(subs):
                sub._signal_resync(reason)
