"""The ASGI app: ``/graphql`` (HTTP and graphql-transport-ws), ``/healthz``, the operator
console at ``/console`` (``app.console``), dev routes,
behind a request body size limit (``app.http_limits``); ``/graphql`` over HTTP behind fair
admission (``app.graphql.admission``).

The lifespan owns the process's resources (no module-level clients): the runtime (database
engine, Redis pool) and the process's one Redis subscriber (``app.events.subscriber``) with
its two handlers: the event hub (run events fanned out to this process's subscriptions) and
the token cache (revocations).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from app import console
from app.events.hub import EventHub
from app.events.output import OutputHub
from app.events.subscriber import RedisSubscriber
from app.graphql import graphiql_page
from app.graphql.admission import FairAdmission
from app.graphql.schema import build_schema
from app.graphql.view import GraphQLView
from app.graphql.ws_auth import SocketCounts, TokenChecks
from app.http_limits import BodySizeLimit
from app.services import health
from app.services.runtime import open_runtime
from app.services.socket_slots import SocketSlots
from app.services.token_cache import TokenCache
from app.settings import Settings

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0


def create_app(settings: Settings) -> Starlette:
    # Settings refuse GraphiQL and dev mode in production.
    with_graphiql = settings.graphiql or settings.dev_mode
    graphql = GraphQLView(
        build_schema(settings.max_query_depth, production=settings.is_production),
        graphql_ide="graphiql" if with_graphiql else None,
        # Queries only: strawberry refuses mutations over GET (docs/graphql/frontends.md).
        allow_queries_via_get=True,
        # Only graphql-transport-ws: the legacy graphql-ws protocol had auth-bypass advisories.
        subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL],
        connection_init_wait_timeout=timedelta(seconds=settings.ws_connection_init_timeout_s),
        # Browsers apply no CORS to websocket handshakes: strawberry refuses those from
        # cross-origin pages unless their origin is one of these.
        allowed_origins=settings.cors_origins or (),
    )
    # The cap is ENVERIF_MAX_SUBSCRIPTIONS_PER_CONNECTION, enforced with an error code by our
    # handler (app.graphql.ws_auth); strawberry's own check would answer without one.
    graphql.max_subscriptions_per_connection = None
    graphql.max_response_bytes = settings.max_response_bytes
    routes: list[BaseRoute] = [
        # Only HTTP is gated: /healthz and the console never wait behind GraphQL requests.
        Route("/graphql", FairAdmission(graphql, settings)),
        WebSocketRoute("/graphql", graphql),
        Route("/healthz", healthz, methods=["GET"]),
        *console.routes,
    ]
    if with_graphiql:
        routes.extend(graphiql_page.routes())  # the page's scripts and styles, vendored
    also_running: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None
    if settings.dev_mode:
        # Only the dev stack serves these (in-memory webhook sink, demo page, demo CRM).
        from app.dev.crm import DemoCrm
        from app.dev.routes import routes as dev_routes

        crm = DemoCrm()
        routes.extend(dev_routes)
        routes.extend(crm.routes())
        also_running = crm.running
    middleware = [
        Middleware(
            BodySizeLimit,
            max_body_bytes=settings.max_body_bytes,
            body_timeout_s=settings.request_body_timeout_s,
        )
    ]
    if settings.cors_origins:
        # Outermost, so that refusals further in (413, 400) carry the CORS headers too and a
        # browser shows the real error rather than "blocked by CORS policy".
        middleware.insert(0, cors_middleware(settings.cors_origins))
    return Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=_lifespan(settings, also_running),
    )


# Headers a frontend's GraphQL client sends besides the ones CORS always allows (Accept,
# Content-Type): the bearer token, and Apollo Client's own.
CORS_REQUEST_HEADERS = (
    "authorization",
    "apollographql-client-name",
    "apollographql-client-version",
    "apollo-require-preflight",
    "x-apollo-operation-name",
)
# How long a browser may reuse a preflight's answer (Chrome caps it at 7200).
CORS_MAX_AGE_S = 600


def cors_middleware(origins: tuple[str, ...]) -> Middleware:
    """CORS for browser apps on other origins (docs/graphql/frontends.md#cors). The API takes
    bearer tokens, never cookies: credentials stay disallowed, so a page can only act with a
    token it was given."""
    return Middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=list(CORS_REQUEST_HEADERS),
        allow_credentials=False,
        max_age=CORS_MAX_AGE_S,
    )


def _lifespan(
    settings: Settings, also_running: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """``also_running``: what runs as long as the app does besides the runtime (the dev
    stack's demo CRM)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with also_running() if also_running is not None else contextlib.nullcontext():
            async with _serving(app, settings):
                yield

    return lifespan


@contextlib.asynccontextmanager
async def _serving(app: Starlette, settings: Settings) -> AsyncIterator[None]:
    runtime = await open_runtime(settings)
    try:
        subscriber = RedisSubscriber(settings)
        hub = EventHub(runtime, subscriber, queue_max=settings.subscription_queue_max)
        output_hub = OutputHub(
            subscriber, runtime.redis, settings.redis_prefix, queue_max=settings.subscription_queue_max
        )
        runtime.token_cache = TokenCache(settings, subscriber)
        # Bounded: with Redis away the process still starts; live events and the token
        # cache follow once the subscriber is in place.
        await subscriber.start()
        try:
            app.state.runtime = runtime
            app.state.event_hub = hub
            app.state.output_hub = output_hub
            app.state.token_checks = TokenChecks()
            app.state.socket_counts = SocketCounts()
            app.state.socket_slots = slots = SocketSlots(
                runtime.redis, settings.redis_prefix, ttl_s=settings.ws_socket_slot_ttl_s
            )
            slots.start()
            try:
                yield
            finally:
                await slots.stop()
        finally:
            await subscriber.stop()
            hub.stop()
    finally:
        await runtime.close()


async def healthz(request: Request) -> JSONResponse:
    body, healthy = await health.report(request.app.state.runtime)
    return JSONResponse(body, status_code=200 if healthy else 503)
