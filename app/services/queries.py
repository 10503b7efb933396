"""Read use cases behind the GraphQL lists: workspace-scoped, keyset-paginated by id.

Every list pages newest first (``id DESC``) with "rows after cursor" meaning ``id < cursor``.
Keyset pagination stays correct while rows are inserted (new rows land before page one, not
in the middle) and costs one index range scan per page at any depth, unlike OFFSET.

Every function takes the caller's ``workspace_id`` and filters by it: another workspace's
rows are indistinguishable from rows that do not exist (``NotFound``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, Select, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from app.db import orm
from app.domain.agents import AgentStatus
from app.domain.errors import NotFound
from app.domain.runs import ApprovalStatus, RunStatus

Row = TypeVar("Row", bound=orm.Base)
T = TypeVar("T")


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


# -- single objects -------------------------------------------------------------------------


async def get_owned(session: AsyncSession, model: type[Row], *, workspace_id: int, pk: int) -> Row:
    """The row ``pk`` of ``model`` if it belongs to the workspace, else NOT_FOUND."""
    stmt: Select[Row] = select(model).where(
        model.id == pk,  # type: ignore[attr-defined]
        model.workspace_id == workspace_id,  # type: ignore[attr-defined]
    )
    row = await session.scalar(stmt)
    if row is None:
        raise NotFound(f"no {_noun(model)} with this id")
    return row


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
    stmt = select(orm.Run).where(orm.Run.workspace_id == workspace_id)
    if statuses:
        stmt = stmt.where(orm.Run.status.in_([s.value for s in statuses]))
    if agent_id is not None:
        stmt = stmt.where(orm.Run.agent_id == agent_id)
    if roots_only:
        stmt = stmt.where(orm.Run.parent_run_id.is_(None))
    return await fetch_page(session, stmt, id_column=orm.Run.id, page=page)


async def list_memories(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_id: int,
    page: PageRequest,
    tags: Sequence[str] | None = None,
) -> Page[orm.Memory]:
    """An agent's memories carrying all ``tags``, newest first (full-text search with a query
    is ``app.services.memory_search``)."""
    stmt = select(orm.Memory).where(orm.Memory.workspace_id == workspace_id, orm.Memory.agent_id == agent_id)
    for tag in dict.fromkeys(tags or ()):
        stmt = stmt.where(memory_has_tag(session, tag))
    return await fetch_page(session, stmt, id_column=orm.Memory.id, page=page)


def memory_has_tag(session: AsyncSession, tag: str) -> ColumnElement[bool]:
    """``tag`` is an element of the memory's JSON tag list, filtered in SQL so that pages
    stay full (filtering after the LIMIT would return short pages)."""
    bind = session.get_bind()
    if bind.dialect.name in ("mysql", "mariadb"):
        return func.json_contains(orm.Memory.tags, json.dumps(tag)) == 1
    elements = func.json_each(orm.Memory.tags).table_valued("value").alias("tag")
    return exists(select(1).select_from(elements).where(elements.c.value == tag))


async def list_approvals(
    session: AsyncSession, *, workspace_id: int, status: ApprovalStatus | None, page: PageRequest
) -> Page[orm.Approval]:
    stmt = select(orm.Approval).where(orm.Approval.workspace_id == workspace_id)
    if status is not None:
        stmt = stmt.where(orm.Approval.status == status.value)
    return await fetch_page(session, stmt, id_column=orm.Approval.id, page=page)
