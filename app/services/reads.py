"""Read use cases behind the GraphQL lists: workspace-scoped, keyset-paginated by id.

Every list pages newest first (``id DESC``) with "rows after cursor" meaning ``id < cursor``.
Keyset pagination stays correct while rows are inserted (new rows land before page one, not
in the middle) and costs one index range scan per page at any depth, unlike OFFSET.

Every function takes the caller's ``workspace_id`` and filters by it: another workspace's
rows are indistinguishable from rows that do not exist (``NotFound``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, Select, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from app.db import orm
from app.domain.agents import AgentStatus
from app.domain.errors import NotFound
from app.domain.runs import ApprovalStatus, RunStatus
from app.services.validation import check_text

Row = TypeVar("Row", bound=orm.Base)
T = TypeVar("T")
# A search needle becomes a LIKE pattern; SQLite refuses patterns over 50,000 bytes ("LIKE or
# GLOB pattern too complex"), and nobody searches memories for a page of text.
MAX_SEARCH_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int
    after_id: int | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    rows: list[T]
    has_next: bool


async def fetch_page(
    session: AsyncSession,
    stmt: Select[Row],
    *,
    id_column: InstrumentedAttribute[int],
    page: PageRequest,
) -> Page[Row]:
    if page.after_id is not None:
        stmt = stmt.where(id_column < page.after_id)
    # One row more than asked tells us whether there is a next page without a COUNT.
    stmt = stmt.order_by(id_column.desc()).limit(page.limit + 1)
    rows = list((await session.scalars(stmt)).all())
    return Page(rows=rows[: page.limit], has_next=len(rows) > page.limit)


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

    ``ROW_NUMBER() OVER (PARTITION BY parent ORDER BY id DESC)`` numbers each parent's rows;
    keeping those numbered up to ``limit + 1`` gives every parent its own first page (and
    tells whether it has a next one), however many parents a GraphQL level holds. Window
    functions need SQLite >= 3.25 and MariaDB >= 10.2, both below what we support.
    """
    stmt = stmt.where(parent_column.in_(parent_ids))
    if page.after_id is not None:
        stmt = stmt.where(id_column < page.after_id)
    position = func.row_number().over(partition_by=parent_column, order_by=id_column.desc())
    numbered = stmt.add_columns(position.label("position")).subquery()
    row = aliased(model, numbered)
    outer = (
        select(row)
        .where(numbered.c.position <= page.limit + 1)
        .order_by(numbered.c[parent_column.key], numbered.c[id_column.key].desc())
    )
    grouped: dict[int, list[Row]] = defaultdict(list)
    for found in (await session.scalars(outer)).all():
        grouped[getattr(found, parent_column.key)].append(found)
    return {
        parent: Page(rows=grouped[parent][: page.limit], has_next=len(grouped[parent]) > page.limit)
        for parent in parent_ids
    }


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


async def list_agents(
    session: AsyncSession, *, workspace_id: int, status: AgentStatus | None, page: PageRequest
) -> Page[orm.Agent]:
    stmt = select(orm.Agent).where(orm.Agent.workspace_id == workspace_id)
    if status is not None:
        stmt = stmt.where(orm.Agent.status == status.value)
    return await fetch_page(session, stmt, id_column=orm.Agent.id, page=page)


async def list_runs(
    session: AsyncSession,
    *,
    workspace_id: int,
    page: PageRequest,
    statuses: Sequence[RunStatus] | None = None,
    agent_id: int | None = None,
    roots_only: bool = False,
) -> Page[orm.Run]:
    stmt = _runs(workspace_id, statuses)
    if agent_id is not None:
        stmt = stmt.where(orm.Run.agent_id == agent_id)
    if roots_only:
        stmt = stmt.where(orm.Run.parent_run_id.is_(None))
    return await fetch_page(session, stmt, id_column=orm.Run.id, page=page)


async def list_runs_per_agent(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_ids: Sequence[int],
    page: PageRequest,
    statuses: Sequence[RunStatus] | None = None,
) -> dict[int, Page[orm.Run]]:
    """``Agent.runs`` for a whole level of agents in one statement."""
    return await fetch_pages_by_parent(
        session,
        orm.Run,
        _runs(workspace_id, statuses),
        parent_column=orm.Run.agent_id,
        parent_ids=agent_ids,
        id_column=orm.Run.id,
        page=page,
    )


def _runs(workspace_id: int, statuses: Sequence[RunStatus] | None) -> Select[orm.Run]:
    stmt = select(orm.Run).where(orm.Run.workspace_id == workspace_id)
    if statuses:
        stmt = stmt.where(orm.Run.status.in_([s.value for s in statuses]))
    return stmt


async def list_memories(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_id: int,
    page: PageRequest,
    tags: Sequence[str] | None = None,
) -> Page[orm.Memory]:
    """An agent's memories carrying all ``tags``, newest first. Searching with a query is
    ``app.services.memory_search`` (full-text, ranked)."""
    stmt = _memories(session, workspace_id, None, tags).where(orm.Memory.agent_id == agent_id)
    return await fetch_page(session, stmt, id_column=orm.Memory.id, page=page)


async def list_memories_per_agent(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_ids: Sequence[int],
    page: PageRequest,
    query: str | None = None,
    tags: Sequence[str] | None = None,
) -> dict[int, Page[orm.Memory]]:
    """``Agent.memories`` for a whole level of agents in one statement."""
    return await fetch_pages_by_parent(
        session,
        orm.Memory,
        _memories(session, workspace_id, query, tags),
        parent_column=orm.Memory.agent_id,
        parent_ids=agent_ids,
        id_column=orm.Memory.id,
        page=page,
    )


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


async def approval_notifications(
    session: AsyncSession, *, approval_id: int
) -> list[orm.ApprovalNotification]:
    return list(
        await session.scalars(
            select(orm.ApprovalNotification)
            .where(orm.ApprovalNotification.approval_id == approval_id)
            .order_by(orm.ApprovalNotification.id)
        )
    )


async def list_approvals(
    session: AsyncSession, *, workspace_id: int, status: ApprovalStatus | None, page: PageRequest
) -> Page[orm.Approval]:
    stmt = select(orm.Approval).where(orm.Approval.workspace_id == workspace_id)
    if status is not None:
        stmt = stmt.where(orm.Approval.status == status.value)
    return await fetch_page(session, stmt, id_column=orm.Approval.id, page=page)
