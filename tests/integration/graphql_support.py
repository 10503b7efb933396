"""The old import path of the GraphQL test helpers, kept while other branches still import
from it: they live in ``tests/support/graphql.py`` (creating agents and memories, ids) and
``tests/support/trees.py`` (``Rows``: runs, steps and approvals written straight to the
database). New tests import from there."""

from tests.support.graphql import (
    CREATE_AGENT,
    CREATE_MEMORY,
    SCRIPTED,
    create_agent,
    create_memory,
    gid,
    pk,
    unique,
)
from tests.support.trees import Rows

__all__ = [
    "CREATE_AGENT",
    "CREATE_MEMORY",
    "SCRIPTED",
    "Rows",
    "create_agent",
    "create_memory",
    "gid",
    "pk",
    "unique",
]
