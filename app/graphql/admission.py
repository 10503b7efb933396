"""Fair admission: how many GraphQL requests over HTTP one client has in progress at once
(docs/operating/security.md#fair-admission).

Refusing a bad document early bounds what one request costs, not how many a client sends:
twenty connections sending fragment bombs as fast as they are answered kept one API process
answering ~700 requests a second, and every other request (``/healthz``, other tenants'
queries) waited its turn behind them on the event loop: ``/healthz`` at 2.64x its idle
latency. So each client gets a small gate in front of ``/graphql``:

* a request with a token this process has already verified (``app.services.token_cache``)
  counts against its token: ``ENVERIF_GRAPHQL_MAX_IN_FLIGHT_PER_TOKEN`` at once;
* any other request (no token, or a token not verified here yet, which a client could
  otherwise make up anew for every request) counts against its client address:
  ``ENVERIF_GRAPHQL_MAX_IN_FLIGHT_PER_ADDRESS`` at once.

A request over its client's share waits, before its body is read, and costs nothing while it
waits (no task of the loop's ready queue is its): the loop's round stays bounded by the
requests admitted, so ``/healthz``, which never passes through a gate, and other clients'
requests wait behind a few requests of a flooding client, not all of them. One that waited
``ENVERIF_GRAPHQL_ADMISSION_WAIT_S``, or finds ``ENVERIF_GRAPHQL_MAX_QUEUED_PER_CLIENT``
requests of its client already waiting, is answered 429 with ``RATE_LIMITED`` and
``Retry-After``.

The gates are per API process (like uvicorn's ``limit_concurrency``): they share out one
process's event loop, which is what a flood exhausts. A gate lives while its client has
requests in progress or waiting, so their number is bounded by the connections held.
Websockets are not gated here: their operations have their own caps (``app.graphql.ws_auth``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from app.services.auth import bearer_token, hash_token
from app.settings import Settings

CODE: Final = "RATE_LIMITED"
RETRY_AFTER_S: Final = 1


@dataclass(slots=True)
class _Gate:
    slots: asyncio.Semaphore
    users: int = 0  # requests in progress or waiting: the gate is dropped at 0
    waiting: int = 0


class FairAdmission:
    """The gate in front of ``/graphql`` over HTTP (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.per_address = settings.graphql_max_in_flight_per_address
        self.per_token = settings.graphql_max_in_flight_per_token
        self.queued_max = settings.graphql_max_queued_per_client
        self.wait_s = settings.graphql_admission_wait_s
        self._gates: dict[str, _Gate] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key, cap = self._client(scope)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(asyncio.Semaphore(cap))
        if gate.slots.locked() and gate.waiting >= self.queued_max:
            await _refuse(send, f"{self.queued_max} requests of this client are already waiting")
            return
        gate.users += 1
        try:
            gate.waiting += 1
            try:
                async with asyncio.timeout(self.wait_s):
                    await gate.slots.acquire()
            except TimeoutError:
                await _refuse(send, f"this client already has {cap} requests in progress")
                return
            finally:
                gate.waiting -= 1
            try:
                await self.app(scope, receive, send)
            finally:
                gate.slots.release()
        finally:
            gate.users -= 1
            if gate.users == 0:
                del self._gates[key]

    def _client(self, scope: Scope) -> tuple[str, int]:
        """The gate's key and size: the token's when this process has verified it, else the
        client address's."""
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        token = bearer_token(header.decode("latin-1")) if header is not None else None
        if token is not None:
            state = scope["app"].state
            cache = getattr(getattr(state, "runtime", None), "token_cache", None)
            entry = cache.get(hash_token(token)) if cache is not None else None
            if entry is not None:
                return f"token:{entry.id}", self.per_token
        client = scope.get("client")
        return f"address:{client[0] if client else ''}", self.per_address

    @property
    def clients(self) -> int:
        """Clients with requests in progress or waiting (for tests and metrics)."""
        return len(self._gates)


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps({"errors": [{"message": message, "extensions": {"code": CODE}}]}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
