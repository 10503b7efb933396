"""The ASGI app: ``/graphql`` (HTTP and graphql-transport-ws), ``/healthz``, dev routes.

The lifespan owns the process's resources (STYLE: no module-level clients): the runtime
(database engine, Redis pool) and the event hub (one Redis subscriber fanning run events out
to this process's subscriptions).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types.unset import UNSET, UnsetType

from app import health
from app.domain.errors import EnverifError
from app.events.hub import EventHub
from app.graphql.context import Context
from app.graphql.schema import build_schema
from app.outages import is_outage
from app.services.runtime import open_runtime
from app.settings import Settings

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0


class GraphQLApp(GraphQL[Context, None]):
    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None
    ) -> Context:
        return Context(runtime=request.app.state.runtime, request=request, response=response)

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        # Browsers cannot set headers on a websocket: the token comes in connection_init's
        # payload. Rejecting here closes the socket (4403) before any operation can run.
        try:
            await context.principal()
        except EnverifError as exc:
            raise ConnectionRejectionError({"message": exc.message, "code": exc.code}) from None
        except Exception as exc:
            if is_outage(exc):
                # The database is away: keep the socket. Every operation authenticates again
                # (only a rejected token is cached) and answers UNAVAILABLE until it returns.
                logger.warning("websocket accepted unauthenticated for now: %s", type(exc).__name__)
                return UNSET
            logger.exception("authenticating a websocket failed")
            raise ConnectionRejectionError({"message": "Internal server error", "code": "INTERNAL"}) from None
        return UNSET


def create_app(settings: Settings) -> Starlette:
    graphql = GraphQLApp(
        build_schema(settings.max_query_depth),
        graphql_ide="graphiql" if settings.graphiql or settings.dev_mode else None,
        allow_queries_via_get=False,
        # Only graphql-transport-ws: the legacy graphql-ws protocol had auth-bypass advisories.
        subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL],
    )
    routes: list[BaseRoute] = [
        Route("/graphql", graphql),
        WebSocketRoute("/graphql", graphql),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if settings.dev_mode:
        # Only the dev stack serves these (in-memory webhook sink, demo page).
        from app.dev_routes import routes as dev_routes

        routes.extend(dev_routes)
    return Starlette(routes=routes, lifespan=_lifespan(settings))


def _lifespan(settings: Settings) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = await open_runtime(settings)
        try:
            hub = EventHub(runtime)
            await hub.start()
            try:
                app.state.runtime = runtime
                app.state.event_hub = hub
                yield
            finally:
                await hub.stop()
        finally:
            await runtime.close()

    return lifespan


async def healthz(request: Request) -> JSONResponse:
    body, healthy = await health.report(request.app.state.runtime)
    return JSONResponse(body, status_code=200 if healthy else 503)
