"""Live model output (``runOutput``, docs/graphql/guide.md): text as a model produces it, on
Redis, never in the database (the step keeps the whole text once, when the turn is recorded).

The worker side (``OutputWriter``) appends the pieces to the turn's Redis string
(``keys.output_key``: ``"<stepSeq>:<text so far>"``) and publishes each on
``keys.output_channel`` with the end offset it reached, what has queued up in one round
trip; when the turn ends it publishes ``done`` and deletes the string. The API side (``OutputHub``) is a
``ChannelHandler`` of the process's one Redis subscriber: it fans pieces out to the
subscriptions of their run through bounded queues. A subscription reads the string first
(what a subscriber that joins mid-turn has missed), then follows pieces, using the offsets
to drop what it already sent and to notice a piece it missed (pub/sub is at-most-once):
then, and after an overflow or a reconnect, it reads the string again. So nobody gets text
twice or out of order, and a missed piece costs one GET, not a closed websocket.

A worker writes a turn's output only for a run some subscription watches: the subscription
sets ``keys.output_watch_key`` (with a TTL it renews) before it reads the text so far, and the
worker learns of it in the round trip each of its commits makes anyway
(``Runtime.output_watch``), or, while the model streams, with one ``EXISTS`` per flush
until a watcher comes; the first write then holds the whole text so far. A turn said
without yielding (the scripted provider) goes by the last commit's answer: a subscription
that starts between that commit and the turn's end misses that turn's live output (the
step has its text; docs/graphql/guide.md#live-model-output).

Everything is best effort, like event publishing: Redis trouble is logged and the run goes
on; live output is a view, not a record.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import keys
from app.events.subscriber import RedisSubscriber

logger = logging.getLogger(__name__)

# A turn's text stays readable this long if its worker dies before it says ``done``.
OUTPUT_TTL_S = 3_600
PUBLISH_TIMEOUT_S = 2.0
# A subscription's mark on a run (``keys.output_watch_key``) lasts this long unless renewed,
# and is renewed this often while the subscription lasts.
WATCH_TTL_S = 60
WATCH_RENEW_S = 20.0


@dataclass(frozen=True, slots=True)
class Piece:
    """One message on the output channel."""

    run_id: int
    step_seq: int
    end: int  # the text's length (in characters) once this piece is added
    text: str
    done: bool = False

    @property
    def start(self) -> int:
        return self.end - len(self.text)


def encode_piece(piece: Piece) -> str:
    return json.dumps(
        {"r": piece.run_id, "s": piece.step_seq, "e": piece.end, "t": piece.text, "d": piece.done}
    )


def decode_piece(data: bytes | str) -> Piece | None:
    try:
        raw = json.loads(data)
        return Piece(int(raw["r"]), int(raw["s"]), int(raw["e"]), str(raw["t"]), bool(raw["d"]))
    except (ValueError, KeyError, TypeError):
        return None


class OutputWriter:
    """One turn's live output, in a worker: ``on_text`` is the turn's ``TurnContext.on_text``.

    ``on_text`` only queues the piece: one flush task writes what is queued as soon as the
    model's task yields (to the network, most often), all of it in one round trip, while the
    model goes on. A turn that says everything without yielding (the scripted provider, a
    model replying in one go) is written whole by ``finish``: the text so far, its pieces,
    the string's deletion and ``done``, in one round trip (docs/performance.md)."""

    def __init__(
        self, redis: Redis, prefix: str, *, run_id: int, step_seq: int, watched: bool | None = None
    ) -> None:
        self._redis = redis
        self._channel = keys.output_channel(prefix)
        self._key = keys.output_key(prefix, run_id)
        self._watch_key = keys.output_watch_key(prefix, run_id)
        # Whether a subscription watches the run: None, not known (always write); False,
        # nobody did at the last commit's round trip: nothing is written until a flush finds
        # one (see the module docstring).
        self._watched = watched
        self._asked = False  # a flush asked Redis about watchers (the model yielded)
        self._run_id = run_id
        self._step_seq = step_seq
        self._header = f"{step_seq}:"
        self._end = 0
        self._queued: list[Piece] = []
        self._flusher: asyncio.Task[None] | None = None
        self._flushing = False  # the flush task took pieces: a write is (or was) in flight
        self._started = False  # the Redis string exists (something was flushed)
        self._broken = False

    async def on_text(self, text: str) -> None:
        if not text or self._broken:
            return
        self._end += len(text)
        self._queued.append(Piece(self._run_id, self._step_seq, self._end, text))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=f"enverif-output-{self._run_id}")

    async def _flush(self) -> None:
        while self._queued and not self._broken:
            if self._watched is False:
                # Nothing written yet: the pieces stay queued (the whole text so far) until
                # a subscription watches; asking costs one command, not the writes.
                self._flushing = True
                async with self._best_effort():
                    self._asked = True
                    self._watched = bool(await self._redis.exists(self._watch_key))
                if not self._watched:
                    return
                continue
            pieces, self._queued = self._queued, []
            self._flushing = True
            async with self._best_effort():
                async with self._redis.pipeline(transaction=False) as pipe:
                    if not self._started:
                        pipe.set(self._key, self._header, ex=OUTPUT_TTL_S)
                    pipe.append(self._key, "".join(p.text for p in pieces))
                    for piece in pieces:
                        pipe.publish(self._channel, encode_piece(piece))
                    await pipe.execute()
                self._started = True

    async def finish(self) -> None:
        """The turn ended (answered or failed): subscribers are told, the text is dropped."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            if self._flushing:
                await flusher  # a write in flight: what follows goes after it
            else:
                # Not begun (nothing yielded since the first piece): its pieces go with
                # ``done`` below. Cancelled before its first step, it has sent nothing.
                flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await flusher
        if self._broken:
            self._queued = []  # a subscriber notices the gap and reads the text so far
        if self._watched is False and self._queued and self._asked:
            # The turn took its time (the model yielded): a subscription may have come since
            # the last flush asked.
            async with self._best_effort():
                self._watched = bool(await self._redis.exists(self._watch_key))
        if self._watched is False:
            self._queued = []  # nobody watches: nothing to write, nothing to delete
            return
        if not (self._started or self._queued):
            return
        done = encode_piece(Piece(self._run_id, self._step_seq, self._end, "", done=True))
        async with self._best_effort():
            async with self._redis.pipeline(transaction=False) as pipe:
                if self._queued:
                    # The string holds the whole text while its pieces go out, for a
                    # subscriber that joins between two of them and reads the text so far.
                    text = "".join(p.text for p in self._queued)
                    if self._started:
                        pipe.append(self._key, text)
                    else:
                        pipe.set(self._key, self._header + text, ex=OUTPUT_TTL_S)
                    for piece in self._queued:
                        pipe.publish(self._channel, encode_piece(piece))
                pipe.delete(self._key)
                pipe.publish(self._channel, done)
                await pipe.execute()
        self._queued = []

    @contextlib.asynccontextmanager
    async def _best_effort(self) -> Any:
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                yield
        except (RedisError, OSError, TimeoutError) as exc:
            # One warning per turn: a Redis outage must not slow a run down piece by piece.
            self._broken = True
            logger.warning("run %s: live output stopped for this turn (Redis: %r)", self._run_id, exc)


async def read_so_far(redis: Redis, prefix: str, run_id: int) -> tuple[int, str] | None:
    """The current turn's (stepSeq, text so far), or None when no turn is streaming."""
    raw = await redis.get(keys.output_key(prefix, run_id))
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    seq, sep, rest = text.partition(":")
    if not sep or not seq.isdigit():
        return None
    return int(seq), rest


class OutputWatch:
    """One subscription's queue of pieces for one run, bounded; ``stale`` says: read the
    text so far again before trusting the next piece (an overflow, a reconnect)."""

    def __init__(self, queue_max: int) -> None:
        self._queue: collections.deque[Piece] = collections.deque()
        self._max = queue_max
        self._ready = asyncio.Event()
        self.stale = True  # nothing read yet

    def put(self, piece: Piece) -> None:
        if len(self._queue) >= self._max:
            self._queue.clear()
            self.stale = True
        else:
            self._queue.append(piece)
        self._ready.set()

    def mark_stale(self) -> None:
        self._queue.clear()
        self.stale = True
        self._ready.set()

    async def get(self, timeout_s: float) -> Piece | None:
        """The next piece, or None after ``timeout_s`` of silence or when it went stale."""
        if not self._queue:
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
        return self._queue.popleft() if self._queue else None


class OutputHub:
    """The API process's fan-out of live output (see the module docstring)."""

    def __init__(self, subscriber: RedisSubscriber, redis: Redis, prefix: str, *, queue_max: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self._queue_max = queue_max
        self._watches: dict[int, set[OutputWatch]] = {}
        subscriber.add(keys.output_channel(prefix), self)

    @contextlib.contextmanager
    def watch(self, run_id: int) -> Iterator[OutputWatch]:
        watch = OutputWatch(self._queue_max)
        self._watches.setdefault(run_id, set()).add(watch)
        try:
            yield watch
        finally:
            watches = self._watches.get(run_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[run_id]

    async def so_far(self, run_id: int) -> tuple[int, str] | None:
        return await read_so_far(self._redis, self._prefix, run_id)

    async def announce(self, run_id: int) -> None:
        """Mark the run as watched, so its worker writes its live output (before the first
        read of the text so far, and again every ``WATCH_RENEW_S``)."""
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                await self._redis.set(keys.output_watch_key(self._prefix, run_id), b"1", ex=WATCH_TTL_S)
        except (RedisError, OSError, TimeoutError) as exc:
            # The run's worker writes nothing it would not have written: the subscription
            # still gets each turn's end and completes with the run.
            logger.warning("run %s: could not mark its live output as watched (Redis: %r)", run_id, exc)

    # -- ChannelHandler --

    def on_message(self, data: bytes) -> None:
        piece = decode_piece(data)
        if piece is None:
            logger.warning("live output: ignoring a message that is no output piece")
            return
        for watch in self._watches.get(piece.run_id, ()):
            watch.put(piece)

    def on_lost(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.mark_stale()

    def on_regained(self) -> None:
        self.on_lost()  # read again what was missed while away
