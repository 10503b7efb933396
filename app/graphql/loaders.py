"""Per-request DataLoaders: one query per kind of object per level of a GraphQL response,
however many objects that level holds.

A ``Loaders`` set is bound to one workspace and filters every query by it, so even an id
that leaked from elsewhere cannot load another tenant's row. Each batch reads in one block
of ``Context.session()``: the HTTP request's shared session on MariaDB/MySQL (uses take
turns: an ``AsyncSession`` must not be used by concurrent tasks), else a short session of
its own (``app.graphql.request_session``).

The cache lives as long as the set: one HTTP request, one GraphQL operation over a
websocket, or one emitted subscription event (``Context.fresh_loaders``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute
from strawberry.dataloader import DataLoader

from app.db import orm
from app.domain.runs import ApprovalStatus, RunStatus
from app.services import reads
from app.services.reads import Page, PageRequest

# Bounds the IN (...) list of one query; a bigger batch becomes several queries.
MAX_BATCH = 500

M = TypeVar("M", bound=orm.Base)
F = TypeVar("F", bound=Hashable)

# A per-parent page is asked for with (parent id, page, filters): parents that share a page
# request and filters are loaded together in one statement.
RunsKey = tuple[int, PageRequest, tuple[RunStatus, ...]]
MemoriesKey = tuple[int, PageRequest, tuple[str | None, tuple[str, ...]]]


class Loaders:
    def __init__(
        self, sessionmaker: Callable[[], AbstractAsyncContextManager[AsyncSession]], workspace_id: int
    ) -> None:
        self._sessionmaker = sessionmaker
        self.workspace_id = workspace_id
        self.workspace = self._by_id(orm.Workspace, scoped=False)
        self.agent = self._by_id(orm.Agent)
        self.run = self._by_id(orm.Run)
        self.step = self._by_id(orm.RunStep)
        self.approval = self._by_id(orm.Approval)
        self.memory = self._by_id(orm.Memory)
        self.schedule = self._by_id(orm.Schedule)
        self.children = self._grouped(orm.Run, orm.Run.parent_run_id, order=orm.Run.id, prime=self.run)
        # A whole run tree by its root id: descendants, subtree approvals and ancestors'
        # lookups all come from this one query per tree.
        self.tree = self._grouped(orm.Run, orm.Run.root_run_id, order=orm.Run.id, prime=self.run)
        self.steps = self._grouped(orm.RunStep, orm.RunStep.run_id, order=orm.RunStep.seq, prime=self.step)
        self.pending_approvals = self._grouped(
            orm.Approval,
            orm.Approval.root_run_id,
            order=orm.Approval.id,
            prime=self.approval,
            where=(orm.Approval.status == ApprovalStatus.PENDING.value,),
        )
        self.revisions = self._grouped(
            orm.MemoryRevision, orm.MemoryRevision.memory_id, order=orm.MemoryRevision.id
        )
        self.schedules = self._grouped(
            orm.Schedule, orm.Schedule.agent_id, order=orm.Schedule.id, prime=self.schedule
        )

        self.agent_runs: DataLoader[RunsKey, Page[orm.Run]] = self._pages(
            self._runs_per_agent, prime=self.run
        )
        self.agent_memories: DataLoader[MemoriesKey, Page[orm.Memory]] = self._pages(
            self._memories_per_agent, prime=self.memory
        )
        self.token = self._by_id(orm.ApiToken)
        self.version_by_id = self._by_id(orm.AgentVersion)
        self.audit_event = self._by_id(orm.AuditEvent)
        # A run's pinned version, by (agent id, version number).
        self.agent_version: DataLoader[tuple[int, int], orm.AgentVersion | None] = DataLoader(
            load_fn=self._agent_versions, max_batch_size=MAX_BATCH
        )
        self.agent_version_pages: DataLoader[tuple[int, PageRequest, None], Page[orm.AgentVersion]] = (
            self._pages(self._versions_per_agent, prime=None)
        )
        self.firing = self._by_id(orm.ScheduleFiring)
        self.schedule_runs: DataLoader[tuple[int, PageRequest, None], Page[orm.Run]] = self._pages(
            self._per_schedule(orm.Run), prime=self.run
        )
        self.schedule_firings: DataLoader[tuple[int, PageRequest, None], Page[orm.ScheduleFiring]] = (
            self._pages(self._per_schedule(orm.ScheduleFiring), prime=self.firing)
        )

    async def _runs_per_agent(
        self, session: AsyncSession, agent_ids: list[int], page: PageRequest, statuses: tuple[RunStatus, ...]
    ) -> dict[int, Page[orm.Run]]:
        return await reads.list_runs_per_agent(
            session, workspace_id=self.workspace_id, agent_ids=agent_ids, page=page, statuses=statuses
        )

    async def _memories_per_agent(
        self,
        session: AsyncSession,
        agent_ids: list[int],
        page: PageRequest,
        search: tuple[str | None, tuple[str, ...]],
    ) -> dict[int, Page[orm.Memory]]:
        query, tags = search
        return await reads.list_memories_per_agent(
            session, workspace_id=self.workspace_id, agent_ids=agent_ids, page=page, query=query, tags=tags
        )

    async def _agent_versions(self, keys: Sequence[tuple[int, int]]) -> list[orm.AgentVersion | None]:
        agent_ids = sorted({agent for agent, _ in keys})
        stmt = select(orm.AgentVersion).where(
            orm.AgentVersion.agent_id.in_(agent_ids),
            orm.AgentVersion.version.in_(sorted({version for _, version in keys})),
            orm.AgentVersion.workspace_id == self.workspace_id,
        )
        found = {(row.agent_id, row.version): row for row in await self._select(stmt)}
        return [found.get(key) for key in keys]

    async def _versions_per_agent(
        self, session: AsyncSession, agent_ids: list[int], page: PageRequest, _: None
    ) -> dict[int, Page[orm.AgentVersion]]:
        """Newest first, per agent."""
        return await reads.fetch_pages_by_parent(
            session,
            orm.AgentVersion,
            select(orm.AgentVersion).where(orm.AgentVersion.workspace_id == self.workspace_id),
            parent_column=orm.AgentVersion.agent_id,
            parent_ids=agent_ids,
            id_column=orm.AgentVersion.id,
            page=page,
        )

    def _per_schedule(
        self, model: type[M]
    ) -> Callable[[AsyncSession, list[int], PageRequest, None], Awaitable[dict[int, Page[M]]]]:
        """Newest first, per schedule: its runs, its firings."""

        async def fetch(
            session: AsyncSession, schedule_ids: list[int], page: PageRequest, _: None
        ) -> dict[int, Page[M]]:
            return await reads.fetch_pages_by_parent(
                session,
                model,
                select(model).where(model.workspace_id == self.workspace_id),  # type: ignore[attr-defined]
                parent_column=model.schedule_id,  # type: ignore[attr-defined]
                parent_ids=schedule_ids,
                id_column=model.id,  # type: ignore[attr-defined]
                page=page,
            )

        return fetch

    def _pages(
        self,
        fetch: Callable[[AsyncSession, list[int], PageRequest, F], Awaitable[dict[int, Page[M]]]],
        *,
        prime: DataLoader[int, M | None] | None,
    ) -> DataLoader[tuple[int, PageRequest, F], Page[M]]:
        """Pages of a per-parent connection: one statement per distinct (page, filters)."""

        async def load(keys: Sequence[tuple[int, PageRequest, F]]) -> list[Page[M]]:
            groups: dict[tuple[PageRequest, F], list[int]] = defaultdict(list)
            for parent, page, filters in keys:
                groups[(page, filters)].append(parent)
            found: dict[tuple[int, PageRequest, F], Page[M]] = {}
            for (page, filters), parents in groups.items():
                async with self._sessionmaker() as session:
                    pages = await fetch(session, parents, page, filters)
                for parent, result in pages.items():
                    found[(parent, page, filters)] = result
                    if prime is None:
                        continue
                    for row in result.rows:
                        prime.prime(row.id, row)  # type: ignore[attr-defined]
            return [found[key] for key in keys]

        return DataLoader(load_fn=load, max_batch_size=MAX_BATCH)

    async def _select(self, stmt: Any) -> list[Any]:
        async with self._sessionmaker() as session:
            return list((await session.scalars(stmt)).all())

    def _by_id(self, model: type[M], *, scoped: bool = True) -> DataLoader[int, M | None]:
        id_col: InstrumentedAttribute[int] = model.id  # type: ignore[attr-defined]

        async def load(keys: Sequence[int]) -> list[M | None]:
            stmt = select(model).where(id_col.in_(keys))
            if scoped:
                stmt = stmt.where(model.workspace_id == self.workspace_id)  # type: ignore[attr-defined]
            found = {row.id: row for row in await self._select(stmt)}
            return [found.get(key) for key in keys]

        return DataLoader(load_fn=load, max_batch_size=MAX_BATCH)

    def _grouped(
        self,
        model: type[M],
        key_col: InstrumentedAttribute[Any],
        *,
        order: InstrumentedAttribute[Any],
        prime: DataLoader[int, M | None] | None = None,
        where: Iterable[Any] = (),
    ) -> DataLoader[int, list[M]]:
        """Rows grouped by a foreign key (children by parent, steps by run, ...)."""

        async def load(keys: Sequence[int]) -> list[list[M]]:
            stmt = (
                select(model)
                .where(key_col.in_(keys), model.workspace_id == self.workspace_id, *where)  # type: ignore[attr-defined]
                .order_by(order)
            )
            groups: dict[int, list[M]] = defaultdict(list)
            key_of: Callable[[M], int] = lambda row: getattr(row, key_col.key)  # noqa: E731
            for row in await self._select(stmt):
                groups[key_of(row)].append(row)
                if prime is not None:
                    # Later `parent { ... }`/`root { ... }` lookups hit the cache, not the DB.
                    prime.prime(row.id, row)
            return [groups.get(key, []) for key in keys]

        return DataLoader(load_fn=load, max_batch_size=MAX_BATCH)


def subtree_ids(tree: Iterable[orm.Run], run_id: int) -> list[int]:
    """Ids of ``run_id``'s descendants within its tree (breadth first, excluding itself)."""
    children: dict[int, list[int]] = defaultdict(list)
    for row in tree:
        if row.parent_run_id is not None:
            children[row.parent_run_id].append(row.id)
    found: list[int] = []
    frontier = [run_id]
    while frontier:
        next_frontier: list[int] = []
        for parent in frontier:
            next_frontier.extend(children.get(parent, ()))
        found.extend(next_frontier)
        frontier = next_frontier
    return found
