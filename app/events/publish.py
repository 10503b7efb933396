"""Run events on the wire: the message format and publishing after commit (docs/architecture.md).

The database is the source of truth; pub/sub is only a low-latency hint. So publishing is
best effort: a Redis failure is logged and swallowed (the transition already committed and
must not look failed), and subscribers recover anything they missed by re-reading
``run_events`` when they see a seq gap, a resync or a quiet spell.

All events of all workspaces go on one channel (``keys.events_channel``) so each API
process needs exactly one subscriber; the hub filters by workspace and root run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import keys
from app.db import orm

logger = logging.getLogger(__name__)

# A payload (a tool result, say) can be megabytes. Larger payloads are left out of the
# message and the subscriber reads that event from the database instead: this keeps every
# subscriber's Redis output buffer far from the server's pubsub limit.
MAX_INLINE_PAYLOAD_CHARS = 32_000
# A transaction's events go out as one message (an array) up to this size, then in more.
MAX_MESSAGE_CHARS = 256_000
# A hung Redis must not hold up the caller (a worker mid-run, a mutation) after its commit.
PUBLISH_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class EventMessage:
    """One run event, as read from the database or received from pub/sub."""

    workspace_id: int
    root_run_id: int
    seq: int
    run_id: int
    parent_run_id: int | None
    type: str
    status: str | None
    step_id: int | None
    at: datetime
    payload: Any
    # True when the publisher left a large payload out: read the event from the database.
    payload_omitted: bool = False


def event_to_message(event: orm.RunEvent) -> EventMessage:
    return EventMessage(
        workspace_id=event.workspace_id,
        root_run_id=event.root_run_id,
        seq=event.seq,
        run_id=event.run_id,
        parent_run_id=event.parent_run_id,
        type=event.type,
        status=event.status,
        step_id=event.step_id,
        at=event.at,
        payload=event.payload,
    )


def encode_message(message: EventMessage) -> str:
    fields: dict[str, Any] = {
        "workspace_id": message.workspace_id,
        "root_run_id": message.root_run_id,
        "seq": message.seq,
        "run_id": message.run_id,
        "parent_run_id": message.parent_run_id,
        "type": message.type,
        "status": message.status,
        "step_id": message.step_id,
        "at": message.at.isoformat(),
        "payload": message.payload,
    }
    encoded = _dumps(fields)
    if len(encoded) > MAX_INLINE_PAYLOAD_CHARS:
        fields["payload"] = None
        fields["payload_omitted"] = True
        encoded = _dumps(fields)
    return encoded


def decode_message(raw: str | bytes) -> EventMessage:
    """Parse a message of one event; raises ``ValueError`` for anything malformed."""
    messages = decode_messages(raw)
    if len(messages) != 1:
        raise ValueError(f"malformed run event message: {len(messages)} events, one expected")
    return messages[0]


def raw_events(raw: str | bytes) -> list[dict[str, Any]]:
    """The events of one published message as plain JSON objects (one, or a transaction's
    array), for tools that read the channel without the hub (benchmarks, tests)."""
    data = json.loads(raw)
    return [item for item in (data if isinstance(data, list) else [data]) if isinstance(item, dict)]


def decode_messages(raw: str | bytes) -> list[EventMessage]:
    """Parse a published message: one event (an object) or a transaction's events (an array
    of them, in seq order). Raises ``ValueError`` for anything malformed."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"malformed run event message: {exc}") from exc
    return [_from_fields(item) for item in (data if isinstance(data, list) else [data])]


def _from_fields(data: Any) -> EventMessage:
    try:
        return EventMessage(
            workspace_id=int(data["workspace_id"]),
            root_run_id=int(data["root_run_id"]),
            seq=int(data["seq"]),
            run_id=int(data["run_id"]),
            parent_run_id=_optional_int(data.get("parent_run_id")),
            type=str(data["type"]),
            status=data.get("status"),
            step_id=_optional_int(data.get("step_id")),
            at=datetime.fromisoformat(data["at"]),
            payload=data.get("payload"),
            payload_omitted=bool(data.get("payload_omitted", False)),
        )
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise ValueError(f"malformed run event message: {exc!r}") from exc


def encode_events(events: list[EventMessage]) -> list[str]:
    """The messages of a transaction's committed events, in seq order: one message (an array
    when there are several) per ``MAX_MESSAGE_CHARS``, so one PUBLISH per transaction in all
    but the largest (docs/architecture.md). Each event's own payload is capped as above."""
    encoded = [encode_message(e) for e in sorted(events, key=lambda e: (e.root_run_id, e.seq))]
    messages: list[str] = []
    batch: list[str] = []
    size = 0
    for one in encoded:
        if batch and size + len(one) > MAX_MESSAGE_CHARS:
            messages.append(_joined(batch))
            batch, size = [], 0
        batch.append(one)
        size += len(one) + 1
    if batch:
        messages.append(_joined(batch))
    return messages


async def publish_events(redis: Redis, prefix: str, events: list[EventMessage]) -> None:
    """Publish committed events, in seq order. Never raises for Redis trouble."""
    if not events:
        return
    channel = keys.events_channel(prefix)
    messages = encode_events(events)
    try:
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            # One round trip; a non-transactional pipeline still keeps the order.
            async with redis.pipeline(transaction=False) as pipe:
                for message in messages:
                    pipe.publish(channel, message)
                await pipe.execute()
    except (RedisError, OSError, TimeoutError) as exc:
        # OSError covers socket errors redis-py lets through; TimeoutError is our own cap.
        logger.warning(
            "could not publish %d run event(s) on %s (subscribers will re-read them): %r",
            len(events),
            channel,
            exc,
        )


def _joined(batch: list[str]) -> str:
    return batch[0] if len(batch) == 1 else "[" + ",".join(batch) + "]"


def _dumps(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False, default=str)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
