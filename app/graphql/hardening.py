"""Per-operation guards for documents from untrusted clients.

* ``MaxQueryLength`` refuses a document longer than a character cap before it is parsed.
  The token limit alone does not bound size: a single string literal is one token, and a
  megabyte of it would otherwise be parsed, validated and handed to a resolver.
* ``OneOperationOrName`` refuses a document of several operations sent without an
  ``operationName``, as the GraphQL spec's GetOperation does (strawberry would run the
  first one).
* ``RequestErrors`` gives graphql-core's own request errors (syntax, validation, limits,
  variable coercion) the code ``VALIDATION_FAILED`` so every error a client sees carries an
  ``extensions.code``; in production it also removes graphql-core's "Did you mean ...?"
  suggestions, which would let a client enumerate fields and types with introspection off.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import OperationDefinitionNode
from graphql.error import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.types.execution import ExecutionResult

from app.domain.errors import EnverifError, ValidationFailed
from app.graphql.errors import is_unexpected

REQUEST_ERROR_CODE: Final = ValidationFailed.code


def too_large(size: int, limit: int) -> dict[str, Any]:
    """The one error that replaces a response (or a websocket ``next`` payload) of ``size``
    bytes over ENVERIF_MAX_RESPONSE_BYTES: refused whole, never cut short."""
    message = (
        f"the response is {size} bytes, over the limit of {limit} (ask for smaller pages or fewer fields)"
    )
    return {"message": message, "extensions": {"code": REQUEST_ERROR_CODE}}


# graphql-core appends suggestions as one or more sentences: "Did you mean 'agents'?",
# "Did you mean the enum value 'ACTIVE'?", "Did you mean 'a', 'b', or 'c'?".
_SUGGESTION = re.compile(r"\s*Did you mean [^?]*\?")


class MaxQueryLength(SchemaExtension):
    def __init__(self, *, max_chars: int) -> None:
        self.max_chars = max_chars

    def on_parse(self) -> Iterator[None]:
        query = self.execution_context.query
        if query is not None and len(query) > self.max_chars:
            # Raised before parsing: strawberry turns it into the operation's only error.
            raise GraphQLError(
                f"The document is longer than {self.max_chars} characters.",
                extensions={"code": REQUEST_ERROR_CODE},
            )
        yield


class OneOperationOrName(SchemaExtension):
    """Placed before the document cache: its "valid" must not be recorded for a request
    refused here (the same text with an operationName is fine)."""

    def on_validate(self) -> Iterator[None]:
        ec = self.execution_context
        document = ec.graphql_document
        # ``operation_name`` falls back to the first operation's name: ask what the client sent.
        sent_name = ec._provided_operation_name
        if sent_name is None and document is not None and not ec.pre_execution_errors:
            operations = sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
            if operations > 1:
                # Set before validation runs, so strawberry skips it and answers this error.
                ec.pre_execution_errors = [
                    GraphQLError(
                        f"The document has {operations} operations: say which to run with operationName",
                        extensions={"code": REQUEST_ERROR_CODE, "field": "operationName"},
                    )
                ]
        yield


class RequestErrors(SchemaExtension):
    def __init__(self, *, hide_suggestions: bool) -> None:
        self.hide_suggestions = hide_suggestions

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if isinstance(result, GraphQLExecutionResult | ExecutionResult) and result.errors:
            result.errors = [self._rewrite(error) for error in result.errors]

    def _rewrite(self, error: GraphQLError) -> GraphQLError:
        message = _SUGGESTION.sub("", error.message) if self.hide_suggestions else error.message
        extensions = dict(error.extensions or {})
        if is_request_error(error):
            extensions.setdefault("code", REQUEST_ERROR_CODE)
        if message == error.message and extensions == (error.extensions or {}):
            return error
        return GraphQLError(
            message,
            nodes=error.nodes,
            source=error.source,
            positions=error.positions,
            path=error.path,
            original_error=error.original_error,
            extensions=extensions,
        )


def is_request_error(error: GraphQLError) -> bool:
    """About the request, not a field: no path, and neither a service's EnverifError (it has
    its own code) nor a bug (ErrorPresenter masks those as INTERNAL)."""
    return (
        error.path is None and not isinstance(error.original_error, EnverifError) and not is_unexpected(error)
    )
