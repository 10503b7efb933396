"""Websockets whose token dies: refused at once, closed within seconds (docs/operating/security.md).

A websocket authenticates once, in ``connection_init``, and then may live for hours. So the
graphql-transport-ws handler here checks the token again

* before every new operation (``subscribe`` message): a revoked or expired token gets no
  new operation, the socket is closed at once;
* on a timer, in one watcher task per connection: every ``ws_token_recheck_s`` and, for a
  token with an expiry, exactly at ``expiresAt``. A dead token's operations are cancelled
  first (so no further event goes out), each gets an ``error`` message with
  ``extensions.code`` ``UNAUTHENTICATED`` (the protocol has error messages for operations
  only, so a refused ``connection_init`` gets the close code alone), then the socket is
  closed with 4403.

Every check reads the token row from the database by id, so it does not matter which API
process the revocation went through: nothing here is state another process needs. The
sockets of one process that hold the same token share their reads (``TokenChecks``): a
thousand dashboards on one token cost one query per ``TOKEN_CHECK_SHARE_S``, not a thousand
queries per interval, and a revocation is still seen within the promised seconds.

Two more limits live here because only the connection can enforce them:

* at most ``ENVERIF_MAX_SUBSCRIPTIONS_PER_CONNECTION`` operations run at once on one
  socket; one more gets an ``error`` message with ``extensions.code`` ``RATE_LIMITED``
  (the socket stays open);
* a subscription too slow to keep up (``app.events.hub``) closes its whole socket with
  ``CLOSE_TOO_SLOW`` and the hub's reason: its sends are what blocks, and they block for
  every operation on the socket alike.

And two socket caps, so that neither a stolen token nor an address without one can hold the
API's sockets (docs/operating/security.md):

* at most ``ENVERIF_WS_MAX_PENDING_SOCKETS_PER_ADDRESS`` sockets per client address that
  have not signed in yet (from the handshake until connection_init is answered), per API
  process (``SocketCounts``); one more is closed at once with ``CLOSE_OVER_CAP``;
* at most ``ENVERIF_WS_MAX_SOCKETS_PER_TOKEN`` signed-in sockets per token in the whole
  deployment (``app.services.socket_slots``: slots in Redis, which lapse when their process
  dies; while Redis is away, per process); one more is acknowledged and then closed with
  ``CLOSE_OVER_CAP``, before it can run anything.

And every error sent carries an ``extensions.code``, as over HTTP: strawberry's handler sends
graphql-core's own errors (validation, variable coercion) without one, so a request error
gets ``VALIDATION_FAILED`` and any other uncoded error ``INTERNAL`` (docs/graphql/errors.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from graphql import GraphQLError
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    SubscribeMessage,
)

from app.clock import utcnow
from app.domain.errors import Unauthenticated
from app.domain.tokens import seconds_until_next_check
from app.graphql.context import Context
from app.graphql.errors import INTERNAL_CODE
from app.graphql.hardening import REQUEST_ERROR_CODE, too_large
from app.outages import is_outage
from app.services.auth import Principal, recheck
from app.services.runtime import Runtime
from app.services.socket_slots import SocketSlots

logger = logging.getLogger(__name__)

# graphql-transport-ws's "Forbidden": what a bad token gets at connection_init too.
CLOSE_TOKEN_REFUSED = 4403
# The websocket's "Try Again Later": clients such as graphql-ws retry it (the 44xx codes of
# graphql-transport-ws are fatal to them), and the reason says to resume with afterSeq.
CLOSE_TOO_SLOW = 1013
# A socket over one of the caps: "Try Again Later", which graphql-ws clients retry with
# backoff (the cap is about sockets open now, not about the client).
CLOSE_OVER_CAP = 1013
# Asyncio may wake a timer a hair early; sleeping this much longer means the check at
# expiresAt finds the token expired instead of spinning through a few zero-length sleeps.
EXPIRY_SLACK_S = 0.01


# How long one token check's answer serves the other sockets of the process holding the
# same token: adds at most this much to the time a revoked token's sockets stay open.
TOKEN_CHECK_SHARE_S = 0.5


class TokenChecks:
    """Token re-checks shared by every websocket of one API process (see the module docstring)."""

    def __init__(self, share_s: float = TOKEN_CHECK_SHARE_S) -> None:
        self._share_s = share_s
        self._recent: dict[int, tuple[float, asyncio.Future[Principal]]] = {}

    async def recheck(self, runtime: Runtime, principal: Principal) -> Principal:
        if principal.expires_at is not None and utcnow() >= principal.expires_at:
            # Due to expire now: an answer from a moment ago could still say it is alive.
            return await recheck(runtime, principal)
        now = time.monotonic()
        entry = self._recent.get(principal.token_id)
        if entry is None or now - entry[0] > self._share_s:
            if len(self._recent) > 10_000:  # forget tokens nobody asked about lately
                self._recent = {k: v for k, v in self._recent.items() if now - v[0] <= self._share_s}
            entry = (now, asyncio.ensure_future(recheck(runtime, principal)))
            self._recent[principal.token_id] = entry
        # Shielded: one socket closing mid-check must not cancel the read the others await.
        return await asyncio.shield(entry[1])


class SocketCounts:
    """The websockets one API process holds: signed in, per token; not yet, per address."""

    def __init__(self) -> None:
        self.by_token: Counter[int] = Counter()
        self.pending_by_address: Counter[str] = Counter()

    @staticmethod
    def take(counter: Counter[Any], key: Any, cap: int) -> bool:
        if counter[key] >= cap:
            return False
        counter[key] += 1
        return True

    @staticmethod
    def give_back(counter: Counter[Any], key: Any) -> None:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]


def with_error_codes(message: Any) -> Any:
    """``message`` with a code on each of its errors (an ``error`` message, or a ``next``
    whose payload has errors); other messages are returned as they are."""
    kind = message.get("type") if isinstance(message, dict) else None
    payload = message.get("payload") if kind in ("error", "next") else None
    errors = payload if kind == "error" else payload.get("errors") if isinstance(payload, dict) else None
    for error in errors or ():
        if isinstance(error, dict) and not (error.get("extensions") or {}).get("code"):
            # No path: about the request, not a field (as app.graphql.hardening decides).
            code = INTERNAL_CODE if error.get("path") else REQUEST_ERROR_CODE
            error["extensions"] = {**(error.get("extensions") or {}), "code": code}
    return message


class TokenCheckingHandler(BaseGraphQLTransportWSHandler[Context, None]):
    """strawberry's graphql-transport-ws handler, plus the token checks described above."""

    _watcher: asyncio.Task[None] | None = None
    _closer: asyncio.Task[None] | None = None
    _pending_address: str | None = None  # holds a pending slot for this address
    _token_slot: int | None = None  # holds a slot for this token id
    _deployment_slot: str | None = None  # and this slot of the deployment's count

    async def handle(self) -> None:
        counts = self._counts()
        if counts is not None:
            client = self.context.request.client
            address = client.host if client is not None else ""
            cap = self.context.settings.ws_max_pending_sockets_per_address
            if not counts.take(counts.pending_by_address, address, cap):
                with contextlib.suppress(Exception):
                    await self.websocket.close(
                        code=CLOSE_OVER_CAP, reason=f"over {cap} sockets from this address not signed in"
                    )
                return
            self._pending_address = address
        await super().handle()  # ends with shutdown(), which gives the slots back

    async def send_message(self, message: Any) -> None:
        await super().send_message(self._within_limit(with_error_codes(message)))

    def _within_limit(self, message: Any) -> Any:
        """A ``next`` message over ENVERIF_MAX_RESPONSE_BYTES carries, in place of its payload,
        the error an HTTP response that size gets: a socket carries no larger result than a
        request does (an event too big is refused, the subscription goes on)."""
        limit = getattr(self.view, "max_response_bytes", None)
        if limit is None or not isinstance(message, dict) or message.get("type") != "next":
            return message
        # The view's encoding: a shared event's text is encoded once for every socket (and
        # cached); JSON escapes every non-ASCII character, so characters are bytes.
        size = len(self.view.encode_json(message))
        if size <= limit:
            return message
        return {**message, "payload": {"data": None, "errors": [too_large(size, limit)]}}

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        self.context.close_websocket = self._close_soon
        await super().handle_connection_init(message)
        self._give_back_pending()
        principal = self.context.signed_in
        counts = self._counts()
        if (
            self.connection_acknowledged
            and principal is not None
            and counts is not None
            and self._token_slot is None
        ):
            cap = self.context.settings.ws_max_sockets_per_token
            if not counts.take(counts.by_token, principal.token_id, cap):
                await self._close_for(f"this token already holds {cap} sockets", code=CLOSE_OVER_CAP)
                return
            self._token_slot = principal.token_id
            slots = self._slots()
            slot = await slots.take(principal.token_id, cap) if slots is not None else None
            if slot is False:
                await self._close_for(f"this token already holds {cap} sockets", code=CLOSE_OVER_CAP)
                return
            if isinstance(slot, str):
                self._deployment_slot = slot
        if self.connection_acknowledged and self._watcher is None:
            self._watcher = asyncio.create_task(self._watch_token(), name="enverif-ws-token-watch")

    def _counts(self) -> SocketCounts | None:
        counts: SocketCounts | None = getattr(self.context.request.app.state, "socket_counts", None)
        return counts

    def _slots(self) -> SocketSlots | None:
        slots: SocketSlots | None = getattr(self.context.request.app.state, "socket_slots", None)
        return slots

    def _give_back_pending(self) -> None:
        counts = self._counts()
        if self._pending_address is not None and counts is not None:
            counts.give_back(counts.pending_by_address, self._pending_address)
        self._pending_address = None

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if self.connection_acknowledged:
            try:
                await self.context.recheck_token()
            except Unauthenticated as exc:
                await self._close_for(exc.message, refused=[*self.operations, message["id"]])
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                # The database is away: the operation runs and answers UNAVAILABLE itself
                # (it authenticates again), so the client knows to retry, socket kept.
            cap = self.context.settings.max_subscriptions_per_connection
            if len(self.operations) >= cap and message["id"] not in self.operations:
                error = GraphQLError(
                    f"at most {cap} operations may run at once on one connection",
                    extensions={"code": "RATE_LIMITED"},
                )
                await self.send_message({"id": message["id"], "type": "error", "payload": [error.formatted]})
                return
        await super().handle_subscribe(message)

    def _close_soon(self, code: int, reason: str) -> None:
        """Close the socket from synchronous code (the event hub's reader): operations first,
        then the close frame, in a task of its own."""
        if self._closer is None:
            self._closer = asyncio.create_task(self._close_for(reason, code=code), name="enverif-ws-close")

    async def shutdown(self) -> None:
        self._give_back_pending()
        counts = self._counts()
        if self._token_slot is not None and counts is not None:
            counts.give_back(counts.by_token, self._token_slot)
        self._token_slot = None
        slots, slot = self._slots(), self._deployment_slot
        self._deployment_slot = None
        if slots is not None and slot is not None:
            await slots.give_back(slot)
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await super().shutdown()

    async def _watch_token(self) -> None:
        interval_s = self.context.settings.ws_token_recheck_s
        while True:
            principal = self.context.signed_in
            if principal is None:
                return
            delay_s = seconds_until_next_check(
                now=utcnow(), expires_at=principal.expires_at, interval_s=interval_s
            )
            await asyncio.sleep(delay_s + EXPIRY_SLACK_S)
            try:
                await self.context.recheck_token()
            except Unauthenticated as exc:
                await self._close_for(exc.message, refused=list(self.operations))
                return
            except Exception:
                # The database is unreachable: keep the socket (its events come from Redis and
                # the log alike) and ask again next time rather than drop every client at once.
                logger.warning("websocket token re-check failed; retrying", exc_info=True)

    async def _close_for(
        self, reason: str, *, code: int = CLOSE_TOKEN_REFUSED, refused: Sequence[str] = ()
    ) -> None:
        """``refused``: the operations told why with an UNAUTHENTICATED ``error`` message
        (after they are cancelled, before the close frame)."""
        # Operations first: once cancelled, nothing more is sent to a dead token's holder, and
        # no operation task races the close frame with a late send.
        tasks = [op.task for op in self.operations.values() if op.task is not None]
        for operation_id in list(self.operations):
            await self.cleanup_operation(operation_id)
        for task in tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        error = GraphQLError(reason, extensions={"code": Unauthenticated.code})
        for operation_id in dict.fromkeys(refused):
            with contextlib.suppress(Exception):
                await self.send_message({"id": operation_id, "type": "error", "payload": [error.formatted]})
        with contextlib.suppress(Exception):
            # A close reason is at most 123 bytes on the wire.
            await self.websocket.close(code=code, reason=reason[:120])
