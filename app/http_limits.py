"""Request body size limit: an ASGI middleware in front of every HTTP route.

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

import json
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.domain.errors import ValidationFailed

CODE: Final = ValidationFailed.code
WS_MESSAGE_TOO_BIG: Final = 1009


class BodyTooLarge(Exception):
    """Raised from ``receive`` when a streamed body crosses the limit."""


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

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

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
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
