"""The schema: roots, the Node types, and the per-operation extensions.

``schema`` (default limits) is what ``schema.graphql`` is generated from::

    .venv/bin/python -c 'from app.graphql.schema import schema; print(schema.as_str())' > schema.graphql

``build_schema`` gives an app the same types with its configured depth limit. The limits
matter because strawberry ships no query-cost limiter (``app.graphql.cost`` is ours; see
docs/architecture.md): characters and tokens bound a document's size before it is parsed;
depth, aliases and fields (fragments expanded, each measured once: ``app.graphql.shape``)
bound its shape before it is validated; ``settings.max_page_size`` bounds each list.
``production`` turns introspection and "Did you mean ...?" suggestions off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from strawberry.extensions import (
    DisableIntrospection,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig

from app.graphql.context import FreshLoadersPerOperation
from app.graphql.cost import QueryCostLimiter
from app.graphql.documents import DocumentCache
from app.graphql.errors import EnverifSchema, ErrorPresenter
from app.graphql.hardening import MaxQueryLength, OneOperationOrName, RequestErrors
from app.graphql.limits import ArgumentLimiter
from app.graphql.mutations import Mutation
from app.graphql.queries import Query
from app.graphql.scalars import SCALAR_MAP
from app.graphql.shape import DocumentPrescan, DocumentShapeLimiter, ShapeLimits
from app.graphql.shared_execution import SharedEventExecutor
from app.graphql.subscriptions import Subscription
from app.graphql.types.agents import Agent
from app.graphql.types.approvals import Approval
from app.graphql.types.memories import Memory, MemoryRevision
from app.graphql.types.runs import Run, RunStep
from app.graphql.types.schedules import Schedule, ScheduleFiring
from app.graphql.types.tokens import ApiToken
from app.graphql.types.workspace import Workspace
from app.settings import Settings

# Reachable only through node(id:) for some clients: every Node is listed explicitly.
NODE_CLASSES = [
    Workspace,
    Agent,
    Run,
    RunStep,
    Memory,
    MemoryRevision,
    Approval,
    Schedule,
    ScheduleFiring,
    ApiToken,
]

MAX_ALIASES = 50
MAX_TOKENS = 5_000
# Tokens do not bound size (one string literal is one token). Long texts belong in variables.
MAX_QUERY_CHARS = 100_000
# A document without fragments under the token cap holds fewer fields than this; fragments
# may not make one select more (``fragment f24 { ...f23 ...f23 }`` selects 2^24).
MAX_FIELDS = MAX_TOKENS
DEFAULT_MAX_QUERY_DEPTH: int = Settings.model_fields["max_query_depth"].default


@functools.cache
def build_schema(
    max_query_depth: int = DEFAULT_MAX_QUERY_DEPTH, *, production: bool = False
) -> EnverifSchema:
    # Factories, not instances: strawberry builds fresh extensions for every operation. The
    # shape limits are fixed here, once: the document cache's "this document is valid" holds
    # only for the same limits (app.graphql.documents).
    documents = DocumentCache()
    shape_limits = ShapeLimits(max_depth=max_query_depth, max_aliases=MAX_ALIASES, max_fields=MAX_FIELDS)
    extensions: list[Callable[[], SchemaExtension] | type[SchemaExtension]] = [
        # First, so its on_operation exits last and sees every other extension's errors.
        ErrorPresenter,
        FreshLoadersPerOperation,
        lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
        # Before the cache: an over-long document is refused before it is looked up.
        lambda: MaxQueryLength(max_chars=MAX_QUERY_CHARS),
        OneOperationOrName,
        documents.extension,
        # After the cache, before parsing: a fragment bomb is refused from its text alone.
        lambda: DocumentPrescan(limits=shape_limits),
        # After the cache (it skips what the cache knows to be valid), before graphql-core's
        # validation (linear, but ~15 ms for an 800-byte fragment bomb): a bomb never gets there.
        lambda: DocumentShapeLimiter(limits=shape_limits),
        # Both read their limits from the request's settings at execution start.
        ArgumentLimiter,
        QueryCostLimiter,
        lambda: RequestErrors(hide_suggestions=production),
    ]
    if production:
        # Clients of a production server know the schema from schema.graphql, not by asking.
        extensions.append(DisableIntrospection)
    return EnverifSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        types=NODE_CLASSES,
        # A live runTree event is executed once for every subscription alike, not once each.
        execution_context_class=SharedEventExecutor,
        # DateTime in one form (app/graphql/scalars.py).
        config=StrawberryConfig(scalar_map=SCALAR_MAP),
    )


schema = build_schema()
