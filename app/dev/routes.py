"""Routes that exist only under ``enverif dev`` (``app/main.py`` mounts them in dev mode).

They give the demo agents something real to talk to without leaving the machine:

* ``GET /dev/page`` — a small text page for ``http.get``.
* ``POST /dev/webhook`` — a webhook sink for ``webhook.post``. It remembers deliveries by
  their ``Idempotency-Key`` (the tool sends the step id), so a redelivered call shows up as
  ``"duplicate": true`` instead of a second delivery — the at-least-once story made visible.
* ``GET /dev/webhook`` — what the sink has received, newest last.
* ``GET /dev/candidates`` — a feed of newly listed companies for the scheduled
  ``prospector``: each request returns the next page of four, and consecutive pages overlap
  by two (feeds repeat themselves: that is what the prospector's memory is for).
* ``GET /dev/enrich?domains=a,b`` — enrichment and a fit score per domain, for the
  ``qualifier`` specialist.

The deliveries and the feed's position live in the app's memory: fine for the single-process dev stack, and the
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


# (domain, name, country, employees, sector, fit score 0-100): a fixed catalogue, so the demo
# is the same every time. A score of QUALIFYING_SCORE or more qualifies.
CATALOGUE = [
    ("northwind.example", "Northwind Analytics", "DE", 180, "B2B SaaS", 86),
    ("globex.example", "Globex Retail", "US", 12_000, "retail", 42),
    ("initech.example", "Initech Cloud", "NL", 240, "B2B SaaS", 91),
    ("umbrella.example", "Umbrella Health", "FR", 3_500, "healthcare", 55),
    ("hooli.example", "Hooli Payments", "IE", 95, "fintech", 78),
    ("vandelay.example", "Vandelay Imports", "US", 40, "logistics", 30),
    ("stark.example", "Stark Components", "SE", 420, "B2B SaaS", 88),
    ("wonka.example", "Wonka Foods", "BE", 800, "food", 61),
]
FEED_PAGE = 4
FEED_STEP = 2
QUALIFYING_SCORE = 70


async def candidates(request: Request) -> JSONResponse:
    state = request.app.state
    page = getattr(state, "dev_feed_page", 0)
    state.dev_feed_page = page + 1
    start = page * FEED_STEP
    listed = [CATALOGUE[(start + i) % len(CATALOGUE)] for i in range(FEED_PAGE)]
    return JSONResponse(
        {"page": page, "candidates": [{"domain": d, "name": n, "country": c} for d, n, c, *_ in listed]}
    )


async def enrich(request: Request) -> JSONResponse:
    wanted = [d for d in request.query_params.get("domains", "").split(",") if d][: FEED_PAGE * 4]
    known = {row[0]: row for row in CATALOGUE}
    companies = [
        {
            "domain": d,
            "name": known[d][1],
            "country": known[d][2],
            "employees": known[d][3],
            "sector": known[d][4],
            "score": known[d][5],
        }
        for d in wanted
        if d in known
    ]
    return JSONResponse({"companies": companies, "qualifyingScore": QUALIFYING_SCORE})


routes: list[Route] = [
    Route("/dev/page", page, methods=["GET"]),
    Route("/dev/webhook", webhook_post, methods=["POST"]),
    Route("/dev/webhook", webhook_list, methods=["GET"]),
    Route("/dev/candidates", candidates, methods=["GET"]),
    Route("/dev/enrich", enrich, methods=["GET"]),
]
