"""Read use cases behind the GraphQL lists: workspace-scoped, keyset-paginated by id.

Every list pages by id, newest first (``id DESC``) unless asked oldest first, with "rows
after cursor" meaning the rows past it in that order, and "before" the rows ahead of it.
Keyset pagination stays correct while rows are inserted (new rows land before page one, not
in the middle) and costs one index range scan per page at any depth, unlike OFFSET.

Every function takes the caller's ``workspace_id`` and filters by it: another workspace's
rows are indistinguishable from rows that do not exist (``NotFound``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, Select, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from app.db import orm
from app.domain.agents import AgentStatus
from app.domain.errors import NotFound
from app.domain.runs import ApprovalStatus, RunStatus, RunTrigger
from app.services.validation import check_text

Row = TypeVar("Row", bound=orm.Base)
T = TypeVar("T")
# A search needle becomes a LIKE pattern; SQLite refuses patterns over 50,000 bytes ("LIKE or
# GLOB pattern too complex"), and nobody searches memories for a page of text.
MAX_SEARCH_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One page of a list ordered by id, newest first unless ``newest_first`` is false.

    ``after_id``/``before_id`` bound the page to the rows strictly after/before those in the
    list's order; ``backward`` takes the *last* ``limit`` rows of that range instead of the
    first (Relay's ``last``/``before``). ``scope`` names the connection the cursors belong to.
    """

    limit: int
    after_id: int | None = None
    before_id: int | None = None
    backward: bool = False
    newest_first: bool = True
    scope: str = ""


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    rows: list[T]
    has_next: bool
    has_previous: bool = False


def _range(stmt: Select[Row], id_column: InstrumentedAttribute[int], page: PageRequest) -> Select[Row]:
    """The rows between ``after`` and ``before`` in the list's order."""
    if page.after_id is not None:
        stmt = stmt.where(id_column < page.after_id if page.newest_first else id_column > page.after_id)
    if page.before_id is not None:
        stmt = stmt.where(id_column > page.before_id if page.newest_first else id_column < page.before_id)
    return stmt


def _scan_order(id_column: InstrumentedAttribute[int], page: PageRequest) -> ColumnElement[int]:
    """The order rows are read in: the list's, or its reverse for a backward page (the last
    ``limit`` rows of the range are the first ``limit`` read from its far end)."""
    return id_column.desc() if page.newest_first != page.backward else id_column.asc()


def page_of(rows: list[T], page: PageRequest) -> Page[T]:
    """``rows`` read in scan order, one more than the page asked for: the page in list order.
    The extra row tells there is more beyond the page without a COUNT; on the other side,
    there is more exactly when the client gave a cursor there (Relay allows that
    approximation)."""
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    if page.backward:
        return Page(rows=rows[::-1], has_next=page.before_id is not None, has_previous=more)
    return Page(rows=rows, has_next=more, has_previous=page.after_id is not None)


def slice_page(rows: Sequence[T], page: PageRequest, key: Callable[[T], int]) -> Page[T]:
    """A page of a list already in memory and in its order (a search's ranking, a tree walk);
    a cursor that names no row of it leaves nothing on that side."""
    ids = [key(row) for row in rows]
    start, end = 0, len(rows)
    if page.after_id is not None:
        start = ids.index(page.after_id) + 1 if page.after_id in ids else len(rows)
    if page.before_id is not None:
        end = ids.index(page.before_id) if page.before_id in ids else 0
    window = list(rows[start:end])
    scanned = window[::-1] if page.backward else window
    return page_of(scanned[: page.limit + 1], page)


async def fetch_page(
    session: AsyncSession,
    stmt: Select[Row],
    *,
    id_column: InstrumentedAttribute[int],
    page: PageRequest,
) -> Page[Row]:
    stmt = _range(stmt, id_column, page).order_by(_scan_order(id_column, page)).limit(page.limit + 1)
    return page_of(list((await session.scalars(stmt)).all()), page)


async def count_rows(session: AsyncSession, stmt: Select[Row]) -> int:
    """How many rows ``stmt`` selects (a connection's ``totalCount``)."""
    return int(await session.scalar(select(func.count()).select_from(stmt.order_by(None).subquery())) or 0)


async def count_rows_by_parent(
    session: AsyncSession,
    stmt: Select[Row],
    *,
    parent_column: InstrumentedAttribute[int],
    parent_ids: Sequence[int],
) -> dict[int, int]:
    """``count_rows`` for each of several parents, in one statement."""
    inner = stmt.where(parent_column.in_(parent_ids)).order_by(None).subquery()
    parent = inner.c[parent_column.key]
    found = {
        int(p): int(n)
        for p, n in (await session.execute(select(parent, func.count()).group_by(parent))).all()
    }
    return {p: found.get(p, 0) for p in parent_ids}


async def fetch_pages_by_parent(
    session: AsyncSession,
    model: type[Row],
    stmt: Select[Row],
    *,
    parent_column: InstrumentedAttribute[int],
    parent_ids: Sequence[int],
    id_column: InstrumentedAttribute[int],
    page: PageRequest,
) -> dict[int, Page[Row]]:
    """The same page of ``stmt`` for each of several parents, in ONE statement.

    ``ROW_NUMBER() OVER (PARTITION BY parent ORDER BY id)`` numbers each parent's rows in
    scan order; keeping those numbered up to ``limit + 1`` gives every parent its own page
    (and tells whether it has more), however many parents a GraphQL level holds. Window
    functions need SQLite >= 3.25 and MariaDB >= 10.2, both below what we support.
    """
    stmt = _range(stmt.where(parent_column.in_(parent_ids)), id_column, page)
    position = func.row_number().over(partition_by=parent_column, order_by=_scan_order(id_column, page))
    numbered = stmt.add_columns(position.label("position")).subquery()
    row = aliased(model, numbered)
    outer = (
        select(row)
        .where(numbered.c.position <= page.limit + 1)
        .order_by(numbered.c[parent_column.key], numbered.c.position)
    )
    grouped: dict[int, list[Row]] = defaultdict(list)
    for found in (await session.scalars(outer)).all():
        grouped[getattr(found, parent_column.key)].append(found)
    return {parent: page_of(grouped[parent], page) for parent in parent_ids}


# -- single objects -------------------------------------------------------------------------


async def get_owned(
    session: AsyncSession, model: type[Row], *, workspace_id: int, pk: int, lock: bool = False
) -> Row:
    """The row ``pk`` of ``model`` if it belongs to the workspace, else NOT_FOUND
    (``lock``: FOR UPDATE, for a read-modify-write)."""
    stmt: Select[Row] = select(model).where(
        model.id == pk,  # type: ignore[attr-defined]
        model.workspace_id == workspace_id,  # type: ignore[attr-defined]
    )
    if lock:
        stmt = stmt.with_for_update()
    row = await session.scalar(stmt)
    if row is None:
        raise NotFound(f"no {_noun(model)} with this id")
    return row


async def find_agent_by_name(session: AsyncSession, *, workspace_id: int, name: str) -> orm.Agent | None:
    """The workspace's agent called exactly ``name``. Compared again here: MariaDB's default
    collation ignores case and trailing spaces, and a lookup by name must not."""
    stmt = select(orm.Agent).where(orm.Agent.workspace_id == workspace_id, orm.Agent.name == name)
    return next((row for row in await session.scalars(stmt) if row.name == name), None)


def _noun(model: type[orm.Base]) -> str:
    return {orm.Run: "run", orm.RunStep: "run step", orm.MemoryRevision: "memory revision"}.get(
        model, model.__name__.lower()
    )


# -- lists ----------------------------------------------------------------------------------


def agents_query(workspace_id: int, statuses: Sequence[AgentStatus] | None = None) -> Select[orm.Agent]:
    stmt = select(orm.Agent).where(orm.Agent.workspace_id == workspace_id)
    if statuses:
        stmt = stmt.where(orm.Agent.status.in_([s.value for s in statuses]))
    return stmt


@dataclass(frozen=True, slots=True)
class RunFilter:
    statuses: Sequence[RunStatus] | None = None
    agent_id: int | None = None
    roots_only: bool = False
    triggers: Sequence[RunTrigger] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def runs_query(workspace_id: int, f: RunFilter) -> Select[orm.Run]:
    stmt = _runs(workspace_id, f.statuses)
    if f.agent_id is not None:
        stmt = stmt.where(orm.Run.agent_id == f.agent_id)
    if f.roots_only:
        stmt = stmt.where(orm.Run.parent_run_id.is_(None))
    if f.triggers:
        stmt = stmt.where(orm.Run.trigger.in_([t.value for t in f.triggers]))
    if f.created_after is not None:
        stmt = stmt.where(orm.Run.created_at > f.created_after)
    if f.created_before is not None:
        stmt = stmt.where(orm.Run.created_at < f.created_before)
    return stmt


async def list_runs(
    session: AsyncSession,
    *,
    workspace_id: int,
    page: PageRequest,
    statuses: Sequence[RunStatus] | None = None,
    agent_id: int | None = None,
    roots_only: bool = False,
) -> Page[orm.Run]:
    stmt = runs_query(workspace_id, RunFilter(statuses=statuses, agent_id=agent_id, roots_only=roots_only))
    return await fetch_page(session, stmt, id_column=orm.Run.id, page=page)


def _runs(workspace_id: int, statuses: Sequence[RunStatus] | None) -> Select[orm.Run]:
    stmt = select(orm.Run).where(orm.Run.workspace_id == workspace_id)
    if statuses:
        stmt = stmt.where(orm.Run.status.in_([s.value for s in statuses]))
    return stmt


def memories_query(
    session: AsyncSession, *, workspace_id: int, agent_id: int, tags: Sequence[str] | None = None
) -> Select[orm.Memory]:
    """An agent's memories carrying all ``tags``. Searching with a query is
    ``app.services.memory_search`` (full-text, ranked)."""
    return _memories(session, workspace_id, None, tags).where(orm.Memory.agent_id == agent_id)


def memories_of_agents(
    session: AsyncSession, *, workspace_id: int, query: str | None = None, tags: Sequence[str] | None = None
) -> Select[orm.Memory]:
    """``Agent.memories`` for a whole level of agents (paged per agent by the caller)."""
    return _memories(session, workspace_id, query, tags)


def _memories(
    session: AsyncSession, workspace_id: int, query: str | None, tags: Sequence[str] | None
) -> Select[orm.Memory]:
    stmt = select(orm.Memory).where(orm.Memory.workspace_id == workspace_id)
    if query:
        needle = check_text(query, field="query", max_chars=MAX_SEARCH_CHARS).lower()
        # autoescape: a '%' or '_' in the query is a literal character, not a wildcard.
        stmt = stmt.where(
            func.lower(orm.Memory.key).contains(needle, autoescape=True)
            | func.lower(orm.Memory.value).contains(needle, autoescape=True)
        )
    for tag in dict.fromkeys(tags or ()):
        stmt = stmt.where(memory_has_tag(session, tag))
    return stmt


def memory_has_tag(session: AsyncSession, tag: str) -> ColumnElement[bool]:
    """``tag`` is an element of the memory's JSON tag list, filtered in SQL so that pages
    stay full (filtering after the LIMIT would return short pages)."""
    bind = session.get_bind()
    if bind.dialect.name in ("mysql", "mariadb"):
        return func.json_contains(orm.Memory.tags, json.dumps(tag)) == 1
    elements = func.json_each(orm.Memory.tags).table_valued("value").alias("tag")
    return exists(select(1).select_from(elements).where(elements.c.value == tag))


def approvals_query(
    workspace_id: int,
    *,
    status: ApprovalStatus | None = None,
    run_id: int | None = None,
    agent_id: int | None = None,
) -> Select[orm.Approval]:
    """``run_id``: the approvals of that run itself (not its subtree's)."""
    stmt = select(orm.Approval).where(orm.Approval.workspace_id == workspace_id)
    if status is not None:
        stmt = stmt.where(orm.Approval.status == status.value)
    if run_id is not None:
        stmt = stmt.where(orm.Approval.run_id == run_id)
    if agent_id is not None:
        stmt = stmt.where(orm.Approval.run_id.in_(select(orm.Run.id).where(orm.Run.agent_id == agent_id)))
    return stmt
