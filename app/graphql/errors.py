"""How errors leave the API.

Three kinds of error reach the edge:

* expected failures, ``EnverifError`` raised by services: the client gets the message and
  ``extensions {"code", "field"?}``;
* request errors produced by graphql-core itself (syntax, validation, limits, variable
  coercion): left exactly as graphql-core words them, they describe the client's document;
* an outage (the database or Redis not answering, ``app.outages.is_outage``): the client
  gets ``UNAVAILABLE`` with ``extensions.retryAfter`` (seconds), and a request that produced
  no data at all is answered with HTTP 503 and ``Retry-After``; logged as a warning;
* anything else is a bug: logged here with its traceback, and the client gets
  ``"Internal server error"`` with code ``INTERNAL`` and nothing else — no SQL, no stack, no
  exception text (which for a database error may contain the query and its parameters).

``EnverifSchema.process_errors`` sees the original errors (strawberry calls it before the
extensions run) and does the logging; ``ErrorPresenter`` rewrites what the client sees.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from graphql import ExecutionResult as GraphQLExecutionResult
from graphql.error import GraphQLError
from starlette.responses import Response
from strawberry import Schema
from strawberry.extensions import SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.types import ExecutionContext
from strawberry.types.execution import ExecutionResult, StreamExecutionResult
from strawberry.utils.await_maybe import await_maybe

from app.domain.errors import EnverifError, Unavailable
from app.outages import is_outage

logger = logging.getLogger("app.graphql.errors")

INTERNAL_MESSAGE = "Internal server error"
INTERNAL_CODE = "INTERNAL"
# What clients are told to wait before retrying during an outage (seconds).
RETRY_AFTER_S = 2


def outage_of(error: GraphQLError) -> Unavailable | None:
    """The ``Unavailable`` a resolver's error stands for, if it is an outage."""
    original = error.original_error
    if isinstance(original, Unavailable):
        return original
    if original is not None and not isinstance(original, EnverifError | GraphQLError) and is_outage(original):
        return Unavailable(retry_after_s=RETRY_AFTER_S)
    return None


def is_unexpected(error: GraphQLError) -> bool:
    original = error.original_error
    if original is None or isinstance(original, EnverifError | GraphQLError) or is_outage(original):
        return False
    # graphql-core's variable coercion wraps a scalar's ValueError/TypeError and points at
    # the variable definition (nodes, no path): the client's input, not our bug.
    return not (error.path is None and error.nodes and isinstance(original, ValueError | TypeError))


def present(error: GraphQLError) -> GraphQLError:
    original = error.original_error
    outage = outage_of(error)
    if outage is not None:
        return _replace(error, outage.message, outage.extensions())
    if isinstance(original, EnverifError):
        return _replace(error, original.message, original.extensions())
    if is_unexpected(error):
        return _replace(error, INTERNAL_MESSAGE, {"code": INTERNAL_CODE})
    return error


def _replace(error: GraphQLError, message: str, extensions: dict[str, object]) -> GraphQLError:
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=None,
        extensions=extensions,
    )


class ErrorPresenter(SchemaExtension):
    """Rewrites every error of a result (and of each streamed subscription result)."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if isinstance(result, GraphQLExecutionResult | ExecutionResult):
            retry_after = _unavailable_retry_after(result)
            _rewrite(result)
            if retry_after is not None:
                _answer_503(self.execution_context.context, retry_after)

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        _rewrite(result)
        yield None


# Extensions whose ``on_stream_result`` only touches a result's errors.
_ERRORS_ONLY_STREAM_HOOKS: tuple[type[SchemaExtension], ...] = (ErrorPresenter,)
_NO_HOOKS = contextlib.nullcontext()


class StreamResultsRunner(SchemaExtensionsRunner):
    """strawberry's runner, made cheap for the many results of a subscription (a live event
    can go out to a thousand subscribers): a result without errors skips the stream-result
    hooks when they only rewrite errors, and only extensions that have results are asked."""

    def __init__(self, execution_context: ExecutionContext, extensions: list[SchemaExtension] | None = None):
        super().__init__(execution_context, extensions)
        self._errors_only = all(
            isinstance(e, _ERRORS_ONLY_STREAM_HOOKS)
            or type(e).on_stream_result is SchemaExtension.on_stream_result
            for e in self.extensions
        )
        self._with_results = [
            e for e in self.extensions if type(e).get_results is not SchemaExtension.get_results
        ]

    def on_stream_result(self, result: StreamExecutionResult) -> Any:
        if self._errors_only and not getattr(result, "errors", None):
            return _NO_HOOKS
        return super().on_stream_result(result)

    async def get_extensions_results(self, ctx: ExecutionContext) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for extension in self._with_results:
            data.update(await await_maybe(extension.get_results()))
        data.update(ctx.extensions_results)
        return data


def _unavailable_retry_after(result: GraphQLExecutionResult | ExecutionResult) -> int | None:
    """Retry-After for a request that could not run at all because of an outage: every root
    field failed or is empty, and an outage is among the errors. A partial answer stays 200."""
    outages = [o for o in (outage_of(e) for e in result.errors or []) if o is not None]
    if not outages:
        return None
    data = result.data
    if data is not None and any(value is not None for value in data.values()):
        return None
    return max(o.retry_after_s for o in outages)


def _answer_503(context: object, retry_after_s: int) -> None:
    # Over HTTP strawberry copies this response's status and headers onto its answer; over a
    # websocket there is no status to set (the error's extensions carry the hint).
    response = getattr(context, "response", None)
    if isinstance(response, Response):
        response.status_code = 503
        response.headers["Retry-After"] = str(retry_after_s)


def _rewrite(result: object) -> None:
    errors = getattr(result, "errors", None)
    if errors:
        result.errors = [present(e) for e in errors]  # type: ignore[attr-defined]


class EnverifSchema(Schema):
    def create_extensions_runner(
        self, execution_context: ExecutionContext, extensions: list[SchemaExtension]
    ) -> SchemaExtensionsRunner:
        return StreamResultsRunner(execution_context=execution_context, extensions=extensions)

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Expected failures and bad requests are the client's business, not the operator's:
        # only the unexpected ones are logged, each with its traceback.
        for error in errors:
            if outage_of(error) is not None:
                logger.warning(
                    "GraphQL %s at %s: a service is unavailable (%s)",
                    getattr(execution_context, "operation_name", None) or "operation",
                    ".".join(str(p) for p in error.path or ()) or "-",
                    type(error.original_error).__name__,
                )
            elif is_unexpected(error):
                original = error.original_error
                assert original is not None
                logger.error(
                    "unexpected error in GraphQL %s at %s",
                    getattr(execution_context, "operation_name", None) or "operation",
                    ".".join(str(p) for p in error.path or ()) or "-",
                    exc_info=(type(original), original, original.__traceback__),
                )
