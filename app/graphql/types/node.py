"""The Relay ``Node`` interface and cursor connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import strawberry

from app.domain.errors import ValidationFailed
from app.graphql.ids import from_cursor, to_cursor
from app.services.reads import Page, PageRequest
from app.settings import Settings

T = TypeVar("T")
R = TypeVar("R")

# Page size when the client does not say; never more than settings.max_page_size.
DEFAULT_PAGE_SIZE = 50


@strawberry.interface(
    name="Node", description="An object with an opaque global id, fetchable with node(id:)."
)
class Node:
    id: strawberry.ID


@strawberry.type(name="PageInfo")
class PageInfo:
    has_next_page: bool
    # Forward pagination only: true when the page was asked for after a cursor, since the
    # row that cursor names came before it (Relay lets us approximate this cheaply).
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class Edge(Generic[T]):
    node: T
    cursor: str


@strawberry.type
class Connection(Generic[T]):
    """A page of a list that grows, newest first. Subclassed once per node type so each
    connection has its public name (``AgentConnection``); edges are named ``AgentEdge``."""

    edges: list[Edge[T]]
    page_info: PageInfo


def build_edges(
    page: Page[R], request: PageRequest, convert: Callable[[R], T]
) -> tuple[list[Edge[T]], PageInfo]:
    edges = [Edge(node=convert(row), cursor=to_cursor(row.id)) for row in page.rows]  # type: ignore[attr-defined]
    info = PageInfo(
        has_next_page=page.has_next,
        has_previous_page=request.after_id is not None,
        start_cursor=edges[0].cursor if edges else None,
        end_cursor=edges[-1].cursor if edges else None,
    )
    return edges, info


def page_request(first: int | None, after: str | None, settings: Settings) -> PageRequest:
    """Check ``first``/``after``. There is no query-cost limiter in strawberry, so the page
    size cap is what bounds the work a single list field can ask for."""
    limit = min(DEFAULT_PAGE_SIZE, settings.max_page_size) if first is None else first
    if limit < 0 or limit > settings.max_page_size:
        raise ValidationFailed(f"first must be between 0 and {settings.max_page_size}", field="first")
    return PageRequest(limit=limit, after_id=None if after is None else from_cursor(after, field="after"))
