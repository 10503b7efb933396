"""The Relay ``Node`` interface and cursor connections (docs/graphql/frontends.md: paging).

Every connection pages the same way, through this module: the ``Paged`` field extension
gives a field its paging arguments (``first``/``after``, ``last``/``before``, ``orderBy``)
and hands the resolver one checked ``PageRequest``; ``Connection.of`` turns the page read
into edges, ``pageInfo`` and a ``totalCount`` counted only when selected.

A cursor names a row *and* the connection and ordering it was read from
(``"cursor:<Type.field>:<ORDER>:<id>"``, base64url): a cursor from another list, or from
the same list in the other order, is VALIDATION_FAILED rather than a silently wrong page.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

import strawberry
from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute
from strawberry.annotation import StrawberryAnnotation
from strawberry.extensions import FieldExtension
from strawberry.types.arguments import StrawberryArgument
from strawberry.types.field import StrawberryField

from app.domain.errors import ValidationFailed
from app.graphql.ids import from_cursor, to_cursor
from app.graphql.loaders import Pages
from app.services import reads
from app.services.reads import Page, PageRequest
from app.settings import Settings

T = TypeVar("T")
C = TypeVar("C", bound="Connection[Any]")

# Page size when the client does not say; never more than settings.max_page_size.
DEFAULT_PAGE_SIZE = 50


@strawberry.enum(name="Ordering", description="The order a list is read in: by creation (ids grow with it).")
class Ordering(enum.Enum):
    NEWEST_FIRST = strawberry.enum_value("NEWEST_FIRST", description="Newest first.")
    OLDEST_FIRST = strawberry.enum_value("OLDEST_FIRST", description="Oldest first.")


# Every node type's ``id`` says the same: strawberry does not inherit an interface field's
# description into the types that implement it.
NODE_ID = "The global id: opaque and stable; node(id:) fetches the object by it."


@strawberry.interface(
    name="Node", description="An object with an opaque global id, fetchable with node(id:)."
)
class Node:
    id: strawberry.ID = strawberry.field(description=NODE_ID)


@strawberry.type(name="PageInfo", description="Where a page sits in its list (Relay's cursor connections).")
class PageInfo:
    has_next_page: bool = strawberry.field(
        description=(
            "More items follow this page. For a page read backward (`last`), true when it was "
            "asked for `before` a cursor."
        )
    )
    has_previous_page: bool = strawberry.field(
        description=(
            "More items come before this page. For a page read forward (`first`), true when it "
            "was asked for `after` a cursor."
        )
    )
    start_cursor: str | None = strawberry.field(
        description="The first edge's cursor; null for an empty page."
    )
    end_cursor: str | None = strawberry.field(description="The last edge's cursor; null for an empty page.")


@strawberry.type(description="One item of a list, with the cursor that names its place in it.")
class Edge(Generic[T]):
    node: T = strawberry.field(description="The item.")
    cursor: str = strawberry.field(
        description="Names this item in this list and ordering: pass it as `after` or `before`."
    )


Counter = Callable[[], Awaitable[int]]


@strawberry.type
class Connection(Generic[T]):
    """A page of a list. Subclassed once per node type so each connection has its public
    name (``AgentConnection``); edges are named ``AgentEdge``."""

    edges: list[Edge[T]] = strawberry.field(description="This page's items, in the list's order.")
    page_info: PageInfo = strawberry.field(
        description="Where this page sits: cursors and whether more pages follow."
    )
    counter: strawberry.Private[Counter]

    @strawberry.field(  # type: ignore[untyped-decorator]
        description="How many items the whole list holds (with its filters), across all pages."
    )
    async def total_count(self) -> int:
        return await self.counter()

    @classmethod
    def of(cls, page: Page[Any], request: PageRequest, convert: Callable[[Any], T], counter: Counter) -> Any:
        edges = [Edge(node=convert(row), cursor=to_cursor(request.scope, row.id)) for row in page.rows]
        info = PageInfo(
            has_next_page=page.has_next,
            has_previous_page=page.has_previous,
            start_cursor=edges[0].cursor if edges else None,
            end_cursor=edges[-1].cursor if edges else None,
        )
        return cls(edges=edges, page_info=info, counter=counter)

    @classmethod
    def of_rows(cls, rows: Sequence[Any], request: PageRequest, convert: Callable[[Any], T]) -> Any:
        """A connection over rows already in memory and in their order (a search's ranking,
        a tree walk)."""

        async def count() -> int:
            return len(rows)

        return cls.of(reads.slice_page(rows, request, key=lambda row: row.id), request, convert, count)


def page_request(
    settings: Settings,
    scope: str,
    *,
    first: int | None = None,
    after: str | None = None,
    last: int | None = None,
    before: str | None = None,
    order: Ordering = Ordering.NEWEST_FIRST,
) -> PageRequest:
    """Check the paging arguments. There is no query-cost limiter in strawberry, so the page
    size cap is what bounds the work a single list field can ask for (app/graphql/cost.py
    prices the document with the same sizes before anything runs)."""
    if first is not None and last is not None:
        raise ValidationFailed("ask for `first` or for `last`, not both", field="last")
    name, size = ("last", last) if last is not None else ("first", first)
    limit = min(DEFAULT_PAGE_SIZE, settings.max_page_size) if size is None else size
    if limit < 0 or limit > settings.max_page_size:
        raise ValidationFailed(f"{name} must be between 0 and {settings.max_page_size}", field=name)
    scope = f"{scope}:{order.name}"
    return PageRequest(
        limit=limit,
        after_id=None if after is None else from_cursor(after, scope, field="after"),
        before_id=None if before is None else from_cursor(before, scope, field="before"),
        backward=last is not None,
        newest_first=order is Ordering.NEWEST_FIRST,
        scope=scope,
    )


def _argument(name: str, annotation: Any, description: str) -> StrawberryArgument:
    return StrawberryArgument(
        python_name=name,
        graphql_name=None,
        type_annotation=StrawberryAnnotation(annotation),
        description=description,
        default=None,
    )


PAGING_ARGUMENTS = ("first", "after", "last", "before", "order_by")


class Paged(FieldExtension):
    """Makes a field a connection: adds the paging arguments and passes its resolver, as
    ``page``, the checked ``PageRequest`` (bound to ``Type.field`` and the ordering).

    ``order``: the list's order when the client does not ask (``orderBy``); ``orderable``:
    false for a list with an order of its own (a search's ranking, a tree walk)."""

    def __init__(self, order: Ordering = Ordering.NEWEST_FIRST, *, orderable: bool = True) -> None:
        self.order = order
        self.orderable = orderable
        self.scope = ""

    def apply(self, field: StrawberryField) -> None:
        arguments = [a for a in field.arguments if a.python_name != "page"]
        arguments += [
            _argument("first", int | None, "The first n items (after `after`, if given)."),
            _argument("after", str | None, "A cursor of this list: the items after it."),
            _argument("last", int | None, "The last n items (before `before`, if given)."),
            _argument("before", str | None, "A cursor of this list: the items before it."),
        ]
        if self.orderable:
            default = "newest" if self.order is Ordering.NEWEST_FIRST else "oldest"
            arguments.append(
                _argument("order_by", Ordering | None, f"The order; {default} first by default.")
            )
        field.arguments = arguments

    async def resolve_async(self, next_: Any, source: Any, info: Any, **kwargs: Any) -> Any:
        paging = {name: kwargs.pop(name, None) for name in PAGING_ARGUMENTS}
        order = paging.pop("order_by") or self.order
        scope = f"{info._raw_info.parent_type.name}.{info.field_name}"
        page = page_request(info.context.settings, scope, order=order, **paging)
        return await next_(source, info, page=page, **kwargs)


async def keyset_connection(
    info: Any,
    cls: type[C],
    stmt: Select[Any],
    request: PageRequest,
    convert: Callable[[Any], Any],
    *,
    id_column: InstrumentedAttribute[int],
    sessions: Callable[[], AbstractAsyncContextManager[AsyncSession]] | None = None,
) -> C:
    """A connection over ``stmt``'s rows, keyset-paged by ``id_column``; ``totalCount``
    counts the same statement, in a session of its own, only when asked for. ``sessions``:
    where to read, if not in the request's snapshot (``Context.session``)."""
    sessions = sessions or info.context.session
    async with sessions() as session:
        page = await reads.fetch_page(session, stmt, id_column=id_column, page=request)

    async def count() -> int:
        async with sessions() as session:
            return await reads.count_rows(session, stmt)

    connection: C = cls.of(page, request, convert, count)
    return connection


OLDEST = Ordering.OLDEST_FIRST


def first_page_request(info: Any) -> PageRequest:
    """What a list field that is the first page of a connection reads (``Run.steps`` beside
    ``Run.stepsConnection``): the largest page, oldest first. A list that could hold any
    number of rows would make one response any size (docs/graphql/frontends.md: paging)."""
    return PageRequest(limit=info.context.settings.max_page_size, newest_first=False)


async def first_page(info: Any, pages: Pages[Any, None], parent: int, convert: Callable[[Any], T]) -> list[T]:
    found = await pages.pages.load((parent, first_page_request(info), None))
    return [convert(row) for row in found.rows]
