"""Slow and large requests: what a client may hold of the API before it is cut off.

Headers (``header_timeout_protocol``, uvicorn's HTTP protocol with a deadline): a request's
headers must arrive whole within ``ENVERIF_REQUEST_HEADER_TIMEOUT_S`` of the connection
opening or of the previous response ending; otherwise the connection is closed (with 408
when part of a request came). uvicorn has no such deadline: its keep-alive timer stops at
the first byte, so a client sending one header byte every few seconds held a connection
(and a file descriptor) for as long as it liked: 300 of them were held for 20 s.

Bodies (``BodySizeLimit``): the whole body must be read within
``ENVERIF_REQUEST_BODY_TIMEOUT_S`` of the first read; the read that passes the deadline
fails, the client gets 408 and the connection is closed. A per-read timeout would not do:
a byte every second never trips it.

Request body size limit: an ASGI middleware in front of every HTTP route.

A body larger than ``settings.max_body_bytes`` is refused with 413 *before it is read*:

* with a ``Content-Length`` header, from the header alone (nothing of the body is read);
* without one (``Transfer-Encoding: chunked``), by counting while the app reads: the read
  that crosses the limit fails, the app is abandoned and the client gets 413.

Either way the connection is closed after the answer (``Connection: close``), so the rest
of the body is never read.

A websocket message larger than the same limit closes the socket with 1009 (message too
big) before the app parses it. uvicorn has already buffered such a message (up to its
``ws_max_size``, 16 MiB by default); what this saves is parsing and executing it.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.domain.errors import ValidationFailed

if TYPE_CHECKING:
    from app.settings import Settings

CODE: Final = ValidationFailed.code
WS_MESSAGE_TOO_BIG: Final = 1009


class BodyTooLarge(Exception):
    """Raised from ``receive`` when a streamed body crosses the limit."""


class BodyTooSlow(Exception):
    """Raised from ``receive`` when the body has not arrived by its deadline."""


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            declared = _content_length(scope)
        except ValueError:
            await _refuse(send, 400, "Content-Length is not a valid length")
            return
        if declared is not None and declared > self.max_body_bytes:
            await _refuse(send, 413, self._message())
            return

        received = 0
        response_started = False
        deadline: float | None = None
        body_done = False
        loop = asyncio.get_running_loop()

        async def counting_receive() -> Message:
            nonlocal received, deadline, body_done
            if self.body_timeout_s is None or body_done:
                # Once the body is in, a read waits for the client to leave (Starlette's
                # disconnect watch during a streamed response): no deadline for that.
                message = await receive()
            else:
                if deadline is None:
                    deadline = loop.time() + self.body_timeout_s
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    raise BodyTooSlow from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if response_started:  # an app that answers before reading the body; nothing to fix
                raise
            await _refuse(send, 413, self._message())
        except BodyTooSlow:
            if response_started:
                raise
            await _refuse(send, 408, f"The request body did not arrive within {self.body_timeout_s:g} s")

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        closed = False

        async def capped_receive() -> Message:
            nonlocal closed
            message = await receive()
            if message["type"] == "websocket.receive":
                data = message.get("text") or message.get("bytes") or b""
                size = len(data.encode()) if isinstance(data, str) else len(data)
                if size > self.max_body_bytes:
                    closed = True
                    await send(
                        {"type": "websocket.close", "code": WS_MESSAGE_TOO_BIG, "reason": "message too big"}
                    )
                    # To the app the client is gone: it stops without seeing the message.
                    return {"type": "websocket.disconnect", "code": WS_MESSAGE_TOO_BIG}
            return message

        async def guarded_send(message: Message) -> None:
            if not closed:  # the app may still try to close a socket we closed
                await send(message)

        await self.app(scope, capped_receive, guarded_send)

    def _message(self) -> str:
        return f"The request body is larger than {self.max_body_bytes} bytes"


def _content_length(scope: Scope) -> int | None:
    """The declared length, None when absent; ValueError when unparseable."""
    values = [value for name, value in scope["headers"] if name == b"content-length"]
    if not values:
        return None
    # Several different Content-Length headers are a request-smuggling signature.
    if len(set(values)) != 1 or not values[0].strip().isdigit():
        raise ValueError("invalid Content-Length")
    return int(values[0])


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"errors": [{"message": message, "extensions": {"code": CODE}}]}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                # Do not read (or wait for) the rest of the body.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- request headers ---------------------------------------------------------------------------

REQUEST_TIMEOUT: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 36\r\nconnection: close\r\n\r\nThe request headers did not arrive.\n"
)


def header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, as uvicorn's ``auto``; else h11)
    with the header deadline of the module docstring. Pass it as ``uvicorn.Config(http=...)``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - httptools is a dependency
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]

    class HeaderTimeoutProtocol(base):
        """The deadline runs while no request is between its headers and its response: from
        the connection opening, and again from each response's end. A new request cycle
        (uvicorn makes one when the headers are complete) or a websocket upgrade stops it."""

        _header_timer: asyncio.TimerHandle | None = None
        _waiting_cycle: Any = None
        _partial = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self._partial = True
            super().data_received(data)
            if self._header_timer is not None and (
                self.cycle is not self._waiting_cycle or self.transport.get_protocol() is not self
            ):
                self._disarm_header_timer()  # the headers are in (or the socket is a websocket now)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if (
                not self.transport.is_closing()
                and self.transport.get_protocol() is self
                and (self.cycle is None or self.cycle.response_complete)  # nothing pipelined
            ):
                self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            self._waiting_cycle = self.cycle
            self._partial = False
            self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return
            if self._partial:
                self.transport.write(REQUEST_TIMEOUT)
            self.transport.close()

    return HeaderTimeoutProtocol


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The options of ``uvicorn.Config`` that carry these limits (``enverif serve``/``dev``)."""
    return {
        "http": header_timeout_protocol(settings.request_header_timeout_s),
        "limit_concurrency": settings.max_connections,
    }
