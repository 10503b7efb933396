"""How errors leave the API.

Three kinds of error reach the edge:

* expected failures, ``EnverifError`` raised by services: the client gets the message and
  ``extensions {"code", "field"?}``;
* request errors produced by graphql-core itself (syntax, validation, limits, variable
  coercion): left exactly as graphql-core words them, they describe the client's document;
* anything else is a bug or an outage: logged here with its traceback, and the client gets
  ``"Internal server error"`` with code ``INTERNAL`` and nothing else — no SQL, no stack, no
  exception text (which for a database error may contain the query and its parameters).

``EnverifSchema.process_errors`` sees the original errors (strawberry calls it before the
extensions run) and does the logging; ``ErrorPresenter`` rewrites what the client sees.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from graphql import ExecutionResult as GraphQLExecutionResult
from graphql.error import GraphQLError
from strawberry import Schema
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionContext
from strawberry.types.execution import ExecutionResult, StreamExecutionResult

from app.domain.errors import EnverifError

logger = logging.getLogger("app.graphql.errors")

INTERNAL_MESSAGE = "Internal server error"
INTERNAL_CODE = "INTERNAL"


def is_unexpected(error: GraphQLError) -> bool:
    original = error.original_error
    if original is None or isinstance(original, EnverifError | GraphQLError):
        return False
    # graphql-core's variable coercion wraps a scalar's ValueError/TypeError and points at
    # the variable definition (nodes, no path): the client's input, not our bug.
    return not (error.path is None and error.nodes and isinstance(original, ValueError | TypeError))


def present(error: GraphQLError) -> GraphQLError:
    original = error.original_error
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
            _rewrite(result)

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        _rewrite(result)
        yield None


def _rewrite(result: object) -> None:
    errors = getattr(result, "errors", None)
    if errors:
        result.errors = [present(e) for e in errors]  # type: ignore[attr-defined]


class EnverifSchema(Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Expected failures and bad requests are the client's business, not the operator's:
        # only the unexpected ones are logged, each with its traceback.
        for error in errors:
            if is_unexpected(error):
                original = error.original_error
                assert original is not None
                logger.error(
                    "unexpected error in GraphQL %s at %s",
                    getattr(execution_context, "operation_name", None) or "operation",
                    ".".join(str(p) for p in error.path or ()) or "-",
                    exc_info=(type(original), original, original.__traceback__),
                )
