"""Routes that exist only under ``enverif dev`` (``app/main.py`` mounts them in dev mode).

They give the demo agents something real to talk to without leaving the machine:

* ``GET /dev/page`` — a small text page for ``http.get``.
* ``POST /dev/webhook`` — a webhook sink for ``webhook.post``. It remembers deliveries by
  their ``Idempotency-Key`` (the tool sends the step id), so a redelivered call shows up as
  ``"duplicate": true`` instead of a second delivery — the at-least-once story made visible.
* ``GET /dev/webhook`` — what the sink has received, newest last.

The deliveries live in the app's memory: fine for the single-process dev stack, and the
reason these routes are never mounted outside dev mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from app.clock import utcnow

MAX_WEBHOOK_BODY_BYTES = 1_000_000
MAX_KEPT_DELIVERIES = 1_000

PAGE_TEXT = """\
Enverif demo page: served by `enverif dev` so the demo agents have something to read.

Enverif runs LLM agents durably: every run is a row in the database, every tool call a step,
and a step that writes to the outside world waits for an operator's approval first.
"""


@dataclass
class Delivery:
    idempotency_key: str | None
    payload: Any
    received_at: str
    count: int = 1


class WebhookSink:
    """Deliveries per ``Idempotency-Key``; deliveries without a key are each kept."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._by_key: dict[str, Delivery] = {}

    def record(self, key: str | None, payload: Any) -> bool:
        """Record one delivery; True when this key was seen before."""
        if key is not None and key in self._by_key:
            self._by_key[key].count += 1
            return True
        delivery = Delivery(idempotency_key=key, payload=payload, received_at=utcnow().isoformat())
        self.deliveries.append(delivery)
        if key is not None:
            self._by_key[key] = delivery
        if len(self.deliveries) > MAX_KEPT_DELIVERIES:
            dropped = self.deliveries.pop(0)
            if dropped.idempotency_key is not None:
                self._by_key.pop(dropped.idempotency_key, None)
        return False


def _sink(request: Request) -> WebhookSink:
    # Kept on the app, not in a module global: two apps in one process (tests) stay apart.
    state = request.app.state
    sink = getattr(state, "dev_webhook_sink", None)
    if sink is None:
        sink = WebhookSink()
        state.dev_webhook_sink = sink
    return sink


async def page(request: Request) -> PlainTextResponse:
    return PlainTextResponse(PAGE_TEXT)


async def webhook_post(request: Request) -> JSONResponse:
    body = await request.body()
    if len(body) > MAX_WEBHOOK_BODY_BYTES:
        return JSONResponse({"received": False, "error": "payload too large"}, status_code=413)
    try:
        payload: Any = json.loads(body) if body else None
    except ValueError:
        payload = body.decode("utf-8", errors="replace")
    key = request.headers.get("idempotency-key")
    duplicate = _sink(request).record(key, payload)
    return JSONResponse({"received": True, "idempotencyKey": key, "duplicate": duplicate})


async def webhook_list(request: Request) -> JSONResponse:
    deliveries = [
        {
            "idempotencyKey": d.idempotency_key,
            "payload": d.payload,
            "receivedAt": d.received_at,
            "count": d.count,
        }
        for d in _sink(request).deliveries
    ]
    return JSONResponse({"deliveries": deliveries})


routes: list[Route] = [
    Route("/dev/page", page, methods=["GET"]),
    Route("/dev/webhook", webhook_post, methods=["POST"]),
    Route("/dev/webhook", webhook_list, methods=["GET"]),
]
