"""The graphql-transport-ws client of the tests: one connection to ``/graphql``, spoken as a
browser library would (the token in ``connection_init``, pings answered with pongs).

``GraphQLWS.open(url, token)`` connects and is acknowledged; ``GraphQLWS.connect(url)`` only
connects, for tests of what the server does before (or instead of) ``connection_ack``.
``subscribe`` + ``events`` read a ``runTree`` stream; ``execute`` runs a query or mutation
over the socket. (``tests/integration/test_live_limits.py`` has a client that can stop
reading altogether, which a websocket library cannot do; it is the one other client.)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.typing import Subprotocol

PROTOCOL = Subprotocol("graphql-transport-ws")

# Every field an event carries, and `run { ... }`, which is read from the database per event.
RUN_TREE = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) {
    seq type at runId rootRunId parentRunId status stepId stepStatus
    agentName stepTool stepDecision approvalId payload
    run { id status }
  }
}
"""
# Only what the event carries: no field that reads the database per event.
RUN_OUTPUT = """
subscription Output($run: ID!) { runOutput(runId: $run) { runId stepSeq text done } }
"""
RUN_TREE_LIGHT = """
subscription Watch($root: ID!, $after: Int) {
  runTree(rootRunId: $root, afterSeq: $after) { seq type runId agentName payload }
}
"""


class Stream(list[dict[str, Any]]):
    """The events one ``events`` call read, in seq order; ``complete``: the server ended the
    operation with ``complete``."""

    complete: bool = False

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self)

    @property
    def seqs(self) -> list[int]:
        return [e["seq"] for e in self]


def ws_url(base_url: str) -> str:
    """The websocket URL of ``/graphql`` on a server at ``http://127.0.0.1:port``."""
    return base_url.replace("http://", "ws://") + "/graphql"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class GraphQLWS:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, url: str) -> GraphQLWS:
        return cls(await ws_connect(url, subprotocols=[PROTOCOL]))

    @classmethod
    async def open(cls, url: str, token: str) -> GraphQLWS:
        client = await cls.connect(url)
        await client.init(bearer(token))
        return client

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def receive(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """The next message that is not a ping (pings are answered)."""
        while True:
            message: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), timeout_s))
            if message["type"] == "ping":
                await self.send({"type": "pong"})
                continue
            return message

    async def init(self, payload: dict[str, Any]) -> None:
        await self.send({"type": "connection_init", "payload": payload})
        assert await self.receive() == {"type": "connection_ack"}

    async def subscribe(
        self, op_id: str, root: str, after_seq: int | None = None, query: str = RUN_TREE, **more: Any
    ) -> None:
        """``runTree`` of ``root`` (``query``'s variables ``$root`` and ``$after``, and ``more``)."""
        variables: dict[str, Any] = {"root": root, **more}
        if after_seq is not None:
            variables["after"] = after_seq
        await self.send(
            {"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables}}
        )

    async def execute(
        self, op_id: str, query: str, variables: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A query or mutation over the socket: its one result (``next``, then ``complete``)."""
        await self.send(
            {"id": op_id, "type": "subscribe", "payload": {"query": query, "variables": variables or {}}}
        )
        result = await self.receive()
        assert result["type"] == "next", result
        assert (await self.receive())["type"] == "complete"
        payload: dict[str, Any] = result["payload"]
        return payload

    async def events(
        self,
        op_id: str,
        count: int | None = None,
        *,
        until: Callable[[dict[str, Any]], bool] | None = None,
        on_event: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        timeout_s: float = 60.0,
        field: str = "runTree",
    ) -> Stream:
        """Events of ``op_id``: ``count`` of them, or until ``until`` says stop, or until the
        server sends ``complete`` (``Stream.complete``), all within ``timeout_s``. Anything
        else (an error, another operation's message) fails the test. ``field``: the
        subscription read (``runOutput`` chunks instead of ``runTree`` events)."""
        stream = Stream()
        deadline = time.monotonic() + timeout_s
        while count is None or len(stream) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, (
                f"no {'events' if count else 'complete'} after {timeout_s}s; got {len(stream)}: {stream[-3:]}"
            )
            message = await self.receive(remaining)
            assert message.get("id") == op_id, message
            if message["type"] == "complete":
                assert count is None, f"complete after {len(stream)} of {count} events"
                stream.complete = True
                return stream
            assert message["type"] == "next" and not message["payload"].get("errors"), message
            event = message["payload"]["data"][field]
            stream.append(event)
            if on_event is not None:
                await on_event(event)
            if until is not None and until(event):
                break
        return stream

    async def nothing_more(self, quiet_s: float = 0.5) -> None:
        with pytest.raises(TimeoutError):
            message = await self.receive(quiet_s)
            pytest.fail(f"unexpected message {message}")

    async def errors(self, op_id: str) -> list[dict[str, Any]]:
        """The errors an operation ended with (as ``next`` + ``complete`` or as ``error``)."""
        message = await self.receive()
        assert message.get("id") == op_id, message
        if message["type"] == "error":
            errors: list[dict[str, Any]] = message["payload"]
            return errors
        assert message["type"] == "next" and message["payload"].get("errors"), message
        assert (await self.receive())["type"] == "complete"
        errors = message["payload"]["errors"]
        return errors

    async def close(self) -> None:
        await self.ws.close()
