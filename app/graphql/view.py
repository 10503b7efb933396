"""The ``/graphql`` endpoint: strawberry's ASGI view, speaking GraphQL over HTTP.

What it adds to strawberry's view (https://graphql.github.io/graphql-over-http/):

* Content negotiation. ``Accept: application/graphql-response+json`` gets that media type,
  and a *request error* (the document does not parse or validate, a variable does not
  coerce, several operations and no ``operationName``: nothing was executed) is a 400.
  ``application/json`` (also for ``*/*`` or no Accept header) answers it with 200, as the
  spec asks of that media type. Under both, a request error has no ``data`` entry at all
  (not even null). An Accept header naming nothing we serve gets 406.
* Every refusal of the HTTP layer is GraphQL-shaped, never a bare text or a 500:
  ``{"errors": [{"message": ..., "extensions": {"code": "VALIDATION_FAILED"}}]}``. That
  covers bodies that are not a JSON object (``"hello"``, ``null``, a batch ``[...]``), are
  not UTF-8, nest deeper than the parser's recursion allows, contain ``NaN`` or an
  unpaired surrogate escape (``"\\ud800"``).
* Queries over GET (``?query=…&variables=…``), never mutations; their answers carry
  ``Vary: Authorization, Accept`` and ``Cache-Control: private, no-cache``, since every
  answer is one token's view. No batching.
* Automatic persisted queries (``app.graphql.persisted``), over POST and GET.

Request bodies are size-capped before they reach this view (``app.http_limits``), and so
are responses: one over ``ENVERIF_MAX_RESPONSE_BYTES`` is replaced by a ``VALIDATION_FAILED``
error (the query cost is an estimate; a page of runs with large results can still be many
megabytes), never cut short.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Final

from cross_web import AsyncHTTPRequestAdapter, HTTPException, StarletteRequestAdapter
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError, MissingQueryError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.base import BaseRequestProtocol
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UNSET, UnsetType

from app.domain.errors import EnverifError, ValidationFailed
from app.graphql import graphiql_page
from app.graphql.context import Context
from app.graphql.hardening import too_large
from app.graphql.persisted import NOT_FOUND_BODY, PersistedQueries, PersistedQueryNotFound, requested_hash
from app.graphql.shared_execution import encode_next
from app.graphql.ws_auth import TokenCheckingHandler
from app.outages import is_outage

logger = logging.getLogger(__name__)

JSON: Final = "application/json"
GRAPHQL_RESPONSE: Final = "application/graphql-response+json"
REQUEST_ERROR_CODE: Final = ValidationFailed.code

# Keys on ``request.state``: the view's hooks get the request but not each other's results.
_MEDIA_TYPE = "graphql_media_type"
_REQUEST_ERROR = "graphql_request_error"
_CONTEXT = "graphql_context"


def negotiate(accept: str | None) -> str | None:
    """The media type to answer with for an ``Accept`` header; None if we serve nothing it
    accepts. Highest q wins; on a tie an exact name beats a wildcard, and
    ``application/graphql-response+json`` beats ``application/json``."""
    if accept is None or not accept.strip():
        return JSON
    best: tuple[float, int] = (0.0, 0)
    chosen: str | None = None
    for media_range in accept.split(","):
        media, *params = (part.strip() for part in media_range.split(";"))
        q = _quality(params)
        media = media.lower()
        if media == GRAPHQL_RESPONSE:
            candidate, rank = GRAPHQL_RESPONSE, 3
        elif media == JSON:
            candidate, rank = JSON, 2
        elif media in ("*/*", "application/*"):
            candidate, rank = JSON, 1
        else:
            continue
        if q > 0 and (q, rank) > best:
            best, chosen = (q, rank), candidate
    return chosen


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value)
            except ValueError:
                return 0.0
            return q if 0.0 <= q <= 1.0 else 0.0
    return 1.0


def nothing_executed(result: ExecutionResult) -> bool:
    """Nothing was executed: graphql-core gives field errors a path, and request errors
    (syntax, validation, variable coercion, our document limits) none."""
    return result.data is None and bool(result.errors) and all(e.path is None for e in result.errors or ())


def error_response(status_code: int, message: str, *, media_type: str) -> Response:
    """A GraphQL-shaped refusal of the whole request."""
    code = "NOT_FOUND" if status_code == 404 else REQUEST_ERROR_CODE
    body = {"errors": [{"message": message, "extensions": {"code": code}}]}
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=status_code,
        media_type=f"{media_type}; charset=utf-8",
    )


class InvalidJSON(json.JSONDecodeError):
    """A body or message that Python's parser would take but we do not. A JSONDecodeError,
    so that the websocket transport (which shares ``decode_json``) closes the socket with
    4400 as for any unparseable message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, "", 0)
        self.reason = reason


def _reject_constant(name: str) -> Any:
    # JSON has no NaN or Infinity; Python's parser accepts them unless told otherwise.
    raise InvalidJSON(f"{name} is not a JSON value")


# A \uD800-\uDFFF escape: only a pair of them is a character. Checked cheaply first.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

# Accepts a websocket with a connection_ack that carries no payload. It is strawberry's UNSET
# singleton, which strawberry types as Any (so that it can default a field of any type).
_ACK_WITHOUT_PAYLOAD: Final[UnsetType] = UNSET


class GraphQLView(GraphQL[Context, None]):
    # Re-checks the token of an open websocket: a revoked or expired one closes it (4403).
    graphql_transport_ws_handler_class = TokenCheckingHandler
    # Set by the app from ENVERIF_MAX_RESPONSE_BYTES; None: no cap.
    max_response_bytes: int | None = None

    def create_response(
        self, response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse], sub_response: Response
    ) -> Response:
        response = super().create_response(response_data, sub_response)
        limit = self.max_response_bytes
        if limit is None or len(response.body) <= limit:
            return response
        body = {"data": None, "errors": [too_large(len(response.body), limit)]}
        return Response(
            json.dumps(body, separators=(",", ":")), status_code=response.status_code, media_type=JSON
        )

    persisted_queries: PersistedQueries

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.persisted_queries = PersistedQueries()

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
        data = await super().parse_http_body(request)
        if isinstance(data, GraphQLRequestData):
            try:
                sha256 = requested_hash(data.extensions)
                if sha256 is not None:
                    data.query = self.persisted_queries.resolve(sha256, data.query)
            except ValidationFailed as exc:
                raise HTTPException(400, exc.message) from None
        return data

    def encode_json(self, data: object) -> str | bytes:
        # A live event shared by many subscriptions is serialized once (app.graphql.shared_execution).
        return encode_next(data) or super().encode_json(data)

    def should_render_graphql_ide(self, request: BaseRequestProtocol) -> bool:
        # A persisted query over GET has no ``query`` either: it is a request, not a page view.
        return super().should_render_graphql_ide(request) and request.query_params.get("extensions") is None

    @property
    def graphql_ide_html(self) -> str:
        # Our own page: its assets come from this server, not a CDN (app.graphql.graphiql_page).
        return graphiql_page.page_html()

    async def render_graphql_ide(self, request: Request) -> Response:
        return HTMLResponse(self.graphql_ide_html, headers=graphiql_page.page_headers())

    async def get_context(
        self, request: Request | WebSocket, response: Response | WebSocket | None
    ) -> Context:
        context = Context(runtime=request.app.state.runtime, request=request, response=response)
        if isinstance(request, Request):
            setattr(request.state, _CONTEXT, context)  # closed by __call__ once answered
        return context

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
                return _ACK_WITHOUT_PAYLOAD
            logger.exception("authenticating a websocket failed")
            raise ConnectionRejectionError({"message": "Internal server error", "code": "INTERNAL"}) from None
        return _ACK_WITHOUT_PAYLOAD

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope, receive)
        media_type = negotiate(request.headers.get("accept"))
        setattr(request.state, _MEDIA_TYPE, media_type or JSON)
        setattr(request.state, _REQUEST_ERROR, False)
        response: Response
        if media_type is None and not self.should_render_graphql_ide(StarletteRequestAdapter(request)):
            response = error_response(406, f"Accept must allow {GRAPHQL_RESPONSE} or {JSON}", media_type=JSON)
        else:
            try:
                response = await self.run(request)
            except PersistedQueryNotFound:
                # 200, as Apollo's link expects: the client retries with the document.
                response = Response(
                    json.dumps(NOT_FOUND_BODY, separators=(",", ":")),
                    media_type=f"{media_type or JSON}; charset=utf-8",
                )
            except HTTPException as exc:
                response = error_response(exc.status_code, exc.reason, media_type=media_type or JSON)
            else:
                self._negotiated(request, response)
        try:
            await response(scope, receive, send)
        finally:
            # After answering: the request's database session goes back to the pool.
            context: Context | None = getattr(request.state, _CONTEXT, None)
            if context is not None:
                await context.close()

    def _negotiated(self, request: Request, response: Response) -> None:
        """Give a GraphQL result the negotiated media type (and 400 for a request error)."""
        if response.media_type != JSON:  # GraphiQL's page, not a GraphQL result
            return
        media_type = getattr(request.state, _MEDIA_TYPE)
        response.headers["content-type"] = f"{media_type}; charset=utf-8"
        if request.method == "GET":
            # Cacheable by the browser that asked, revalidated each time; never shared:
            # the answer is the token's view of its workspace.
            response.headers["cache-control"] = "private, no-cache"
            response.headers["vary"] = "Authorization, Accept"
        if media_type == GRAPHQL_RESPONSE and getattr(request.state, _REQUEST_ERROR):
            response.status_code = 400

    async def execute_single(
        self,
        request: Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: Response,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """strawberry's, minus subscriptions: it lets them through POST for a multipart
        transport we do not serve, and one executed as a query ends in an INTERNAL error.
        Over HTTP a subscription is a request error; it is served on the websocket."""
        allowed = OperationType.from_http(request_adapter.method) - {OperationType.SUBSCRIPTION}
        if not self.allow_queries_via_get and request_adapter.method == "GET":
            allowed -= {OperationType.QUERY}
        try:
            return await self.schema.execute(
                request_data.query,
                root_value=root_value,
                variable_values=request_data.variables,
                context_value=context,
                operation_name=request_data.operation_name,
                allowed_operation_types=allowed,
                operation_extensions=request_data.extensions,
            )
        except CannotGetOperationTypeError as exc:
            raise HTTPException(400, exc.as_http_error_reason()) from None
        except InvalidOperationTypeError as exc:
            reason = exc.as_http_error_reason(request_adapter.method)
            if exc.operation_type == OperationType.SUBSCRIPTION:
                reason = "Subscriptions are served over the websocket (graphql-transport-ws), not HTTP"
            raise HTTPException(400, reason) from None
        except MissingQueryError:
            raise HTTPException(400, "No GraphQL query found in the request") from None

    def decode_json(self, data: str | bytes) -> object:
        """Strict JSON, for HTTP bodies and websocket messages alike: an object, nothing else
        (a websocket message that is not an object would crash strawberry's handler)."""
        if isinstance(data, bytes):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidJSON("it is not UTF-8") from None
        try:
            value = json.loads(data, parse_constant=_reject_constant)
        except RecursionError:
            raise InvalidJSON("it is nested too deeply") from None
        if not isinstance(value, dict):
            raise InvalidJSON("it must be a JSON object with a query (batching is not supported)")
        if _SURROGATE_ESCAPE.search(data):
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate is no character: no database would store it.
                raise InvalidJSON("it contains an unpaired surrogate escape") from None
        return value

    def parse_json(self, data: str | bytes) -> Any:
        try:
            return self.decode_json(data)
        except InvalidJSON as exc:
            raise HTTPException(400, f"The request body is refused: {exc.reason}") from None
        except json.JSONDecodeError:
            raise HTTPException(400, "The request body is not valid JSON") from None

    async def process_result(self, request: Request, result: ExecutionResult) -> GraphQLHTTPResponse:
        response = await super().process_result(request, result)
        if nothing_executed(result):
            setattr(request.state, _REQUEST_ERROR, True)
            # The spec: a request error has no data entry at all (not even null).
            response.pop("data", None)
        return response
