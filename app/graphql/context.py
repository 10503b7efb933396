"""The typed per-request GraphQL context.

Over HTTP a context lives for one request. Over a websocket strawberry builds it once per
*connection* (docs/architecture.md), so anything cached on it would go stale for a long-lived
subscription. Hence:

* the principal is authenticated lazily on first need and cached: per request over HTTP,
  per connection over a websocket (``on_ws_connect`` authenticates before any operation).
  A websocket's token is re-checked on every new operation and on a timer
  (``app.graphql.ws_auth``); once it is found revoked or expired, ``principal()`` refuses;
* DataLoaders are replaced at the start of every operation (``FreshLoadersPerOperation``)
  and a subscription calls ``fresh_loaders()`` before it emits each event, so every
  emitted event resolves against the database as it is now.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import strawberry
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from app.db.session import is_mysql
from app.domain.errors import Unauthenticated
from app.graphql.loaders import Loaders
from app.graphql.request_session import RequestSession
from app.services.auth import Principal, bearer_token, recheck, sign_in
from app.services.runtime import Runtime
from app.settings import Settings

if TYPE_CHECKING:  # ws_auth imports this module
    from app.graphql.ws_auth import TokenChecks


class Context:
    def __init__(
        self, *, runtime: Runtime, request: Request | WebSocket, response: Response | WebSocket | None = None
    ) -> None:
        self.runtime = runtime
        self.request = request
        self.response = response
        # Set by strawberry from the websocket's connection_init payload.
        self.connection_params: dict[str, object] | None = None
        self._principal: Principal | None = None
        self._auth_error: Unauthenticated | None = None
        # Several top-level fields resolve concurrently; one token lookup serves them all.
        self._auth_lock = asyncio.Lock()
        self._loaders: Loaders | None = None
        # Over a websocket: closes it (code, reason) without waiting; set by the
        # graphql-transport-ws handler (app.graphql.ws_auth) once the connection is up.
        self.close_websocket: Callable[[int, str], None] | None = None
        # HTTP: one session, one snapshot, for a query's reads (app.graphql.request_session).
        self._shared: RequestSession | None = None
        self._unshared: RequestSession | None = None
        if not self.is_websocket:
            self._shared = RequestSession(runtime.read_sessionmaker, repeatable_read=is_mysql(runtime.engine))

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def is_websocket(self) -> bool:
        return isinstance(self.request, WebSocket)

    def session(self) -> contextlib.AbstractAsyncContextManager[AsyncSession]:
        """A session to read with, for one ``async with`` block: the request's shared one
        (uses take turns), or a new short-lived one (a mutation's, websockets)."""
        if self._shared is not None:
            return self._shared.use()
        return self.runtime.read_sessionmaker()

    def unshare_session(self) -> None:
        """From now on every ``session()`` is a short session of its own (see
        ``FreshLoadersPerOperation``). Called before any resolver has read; should something
        have read already, its session is set aside all the same (closed with the request):
        its snapshot predates the mutation's commit, which the mutation's payload must show."""
        if self._shared is not None:
            self._unshared, self._shared = self._shared, None

    async def close(self) -> None:
        """The request is over: give its session's connection back."""
        for shared in (self._shared, self._unshared):
            if shared is not None:
                await shared.close()

    async def principal(self) -> Principal:
        """The caller, or UNAUTHENTICATED. Looked up once, then cached (failures too)."""
        if self._auth_error is not None:
            raise Unauthenticated(self._auth_error.message)
        if self._principal is not None:
            return self._principal
        async with self._auth_lock:
            if self._principal is None and self._auth_error is None:
                try:
                    self._principal = await sign_in(self.runtime, token=self._token(), sessions=self.session)
                except Unauthenticated as exc:
                    self._auth_error = exc
        if self._auth_error is not None:
            raise Unauthenticated(self._auth_error.message)
        assert self._principal is not None
        return self._principal

    @property
    def signed_in(self) -> Principal | None:
        """The principal once authenticated, without checking it again."""
        return self._principal if self._auth_error is None else None

    async def recheck_token(self) -> Principal:
        """Ask the database whether this connection's token still works; UNAUTHENTICATED if not.

        A refusal sticks: every later ``principal()`` on this context refuses too, so an
        operation that slips in while the socket is being closed cannot run.
        """
        principal = await self.principal()
        # One process-wide reader for every socket holding this token (app.graphql.ws_auth).
        checks: TokenChecks | None = getattr(self.request.app.state, "token_checks", None)
        try:
            if checks is not None:
                fresh = await checks.recheck(self.runtime, principal)
            else:
                fresh = await recheck(self.runtime, principal)
        except Unauthenticated as exc:
            self._auth_error = exc
            raise
        # The role and workspace of a token never change; only its expiry is news.
        self._principal = fresh
        return fresh

    def _token(self) -> str | None:
        if self.is_websocket:
            return bearer_token(authorization_param(self.connection_params))
        return bearer_token(self.request.headers.get("authorization"))

    async def loaders(self) -> Loaders:
        """The current DataLoaders, bound to the caller's workspace (authenticates first)."""
        principal = await self.principal()
        if self._loaders is None:
            self._loaders = Loaders(self.session, principal.workspace_id)
        return self._loaders

    def fresh_loaders(self) -> None:
        """Start a new cache generation: call before emitting each subscription event. The
        loaders are built when a resolver first asks (most events select no loaded field)."""
        self._loaders = None

    def reset_loaders(self) -> None:
        self._loaders = None


def authorization_param(params: Mapping[str, object] | None) -> str | None:
    """The ``Authorization`` entry of connection_init's payload; the key is case-insensitive."""
    for key, value in (params or {}).items():
        if isinstance(key, str) and key.lower() == "authorization" and isinstance(value, str):
            return value
    return None


class FreshLoadersPerOperation(SchemaExtension):
    """Over a websocket many operations share one context: give each its own loader cache.

    Also: only a query reads through the request's shared session. A mutation takes write
    connections from the same pool, and a request holding one connection while it waits
    for another could, with enough of them at once, leave the pool with none to give.
    """

    def on_operation(self) -> Iterator[None]:
        context = self.execution_context.context
        if isinstance(context, Context):
            context.reset_loaders()
        yield

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context.context
        if isinstance(context, Context) and self.execution_context.operation_type is not OperationType.QUERY:
            context.unshare_session()
        yield


# What resolvers annotate their ``info`` parameter with.
Info = strawberry.Info[Context, None]
