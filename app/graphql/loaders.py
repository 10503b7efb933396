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
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased
from strawberry.dataloader import DataLoader

from app.db import orm
from app.domain.runs import ApprovalStatus, RunStatus
from app.services import reads
from app.services.memories import RevisionAction
from app.services.reads import Page, PageRequest

# Bounds the IN (...) list of one query; a bigger batch becomes several queries.
MAX_BATCH = 500

M = TypeVar("M", bound=orm.Base)
F = TypeVar("F", bound=Hashable)

MemoriesFilter = tuple[str | None, tuple[str, ...]]
C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Pages(Generic[M, F]):
    """Pages of a per-parent connection (an agent's runs, a run's steps ...), asked for with
    (parent id, page, filters): parents that share a page request and filters load together
    in one statement, and so do their counts."""

    pages: DataLoader[tuple[int, PageRequest, F], Page[M]]
    counts: DataLoader[tuple[int, F], int]

    async def connection(
        self, cls: type[C], parent: int, page: PageRequest, filters: F, convert: Callable[[M], Any]
    ) -> C:
        found = await self.pages.load((parent, page, filters))

        async def count() -> int:
            return await self.counts.load((parent, filters))

        connection: C = cls.of(found, page, convert, count)  # type: ignore[attr-defined]
        return connection


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
        self.memory_revision = self._by_id(orm.MemoryRevision)
        self.schedule = self._by_id(orm.Schedule)
        # A whole run tree by its root id: descendants, subtree approvals and ancestors'
        # lookups all come from this one query per tree.
        self.tree = self._grouped(orm.Run, orm.Run.root_run_id, order=orm.Run.id, prime=self.run)
        self.pending_approvals = self._grouped(
            orm.Approval,
            orm.Approval.root_run_id,
            order=orm.Approval.id,
            prime=self.approval,
            where=(orm.Approval.status == ApprovalStatus.PENDING.value,),
        )
        self.schedules = self._grouped(
            orm.Schedule, orm.Schedule.agent_id, order=orm.Schedule.id, prime=self.schedule
        )
        # An approval's webhook deliveries, oldest first (an inbox page lists many approvals).
        self.approval_notifications = self._grouped(
            orm.ApprovalNotification, orm.ApprovalNotification.approval_id, order=orm.ApprovalNotification.id
        )

        self.agent_runs: Pages[orm.Run, tuple[RunStatus, ...]] = self._per_parent(
            orm.Run,
            orm.Run.agent_id,
            lambda _, statuses: reads.runs_query(self.workspace_id, reads.RunFilter(statuses=statuses)),
            prime=self.run,
        )
        self.agent_memories: Pages[orm.Memory, MemoriesFilter] = self._per_parent(
            orm.Memory, orm.Memory.agent_id, self._memories, prime=self.memory
        )
        self.run_steps: Pages[orm.RunStep, None] = self._per_parent(
            orm.RunStep, orm.RunStep.run_id, self._scoped(orm.RunStep), prime=self.step
        )
        self.run_children: Pages[orm.Run, None] = self._per_parent(
            orm.Run, orm.Run.parent_run_id, self._scoped(orm.Run), prime=self.run
        )
        self.memory_revisions: Pages[orm.MemoryRevision, None] = self._per_parent(
            orm.MemoryRevision, orm.MemoryRevision.memory_id, self._revisions, prime=self.memory_revision
        )
        # How many of each agent's runs are RUNNING (``Run.budget``'s maxConcurrentRuns).
        self.agent_running: DataLoader[int, int] = DataLoader(
            load_fn=self._agent_running, max_batch_size=MAX_BATCH
        )
        self.token = self._by_id(orm.ApiToken)
        self.version_by_id = self._by_id(orm.AgentVersion)
        self.audit_event = self._by_id(orm.AuditEvent)
        # A run's pinned version, by (agent id, version number).
        self.agent_version: DataLoader[tuple[int, int], orm.AgentVersion | None] = DataLoader(
            load_fn=self._agent_versions, max_batch_size=MAX_BATCH
        )
        self.agent_version_pages: Pages[orm.AgentVersion, None] = self._per_parent(
            orm.AgentVersion, orm.AgentVersion.agent_id, self._scoped(orm.AgentVersion)
        )
        self.firing = self._by_id(orm.ScheduleFiring)
        self.schedule_runs: Pages[orm.Run, None] = self._per_parent(
            orm.Run, orm.Run.schedule_id, self._scoped(orm.Run), prime=self.run
        )
        self.schedule_firings: Pages[orm.ScheduleFiring, None] = self._per_parent(
            orm.ScheduleFiring,
            orm.ScheduleFiring.schedule_id,
            self._scoped(orm.ScheduleFiring),
            prime=self.firing,
        )

    async def _agent_running(self, agent_ids: Sequence[int]) -> list[int]:
        stmt = (
            select(orm.Run.agent_id, func.count())
            .where(
                orm.Run.agent_id.in_(agent_ids),
                orm.Run.workspace_id == self.workspace_id,
                orm.Run.status == RunStatus.RUNNING.value,
            )
            .group_by(orm.Run.agent_id)
        )
        async with self._sessionmaker() as session:
            counts = {agent_id: int(count) for agent_id, count in await session.execute(stmt)}
        return [counts.get(agent_id, 0) for agent_id in agent_ids]

    def _memories(self, session: AsyncSession, search: MemoriesFilter) -> Select[orm.Memory]:
        query, tags = search
        return reads.memories_of_agents(session, workspace_id=self.workspace_id, query=query, tags=tags)

    def _scoped(self, model: type[M]) -> Callable[[AsyncSession, None], Select[M]]:
        return lambda _session, _filters: select(model).where(model.workspace_id == self.workspace_id)  # type: ignore[attr-defined]

    def _revisions(self, _session: AsyncSession, _filters: None) -> Select[orm.MemoryRevision]:
        """A memory's history. SQLite hands a deleted newest row's id to the next insert (no
        AUTOINCREMENT), so the history under an id may start with an earlier memory's, ending
        in its DELETE: only what came after the last DELETE is this memory's."""
        revision, earlier = orm.MemoryRevision, aliased(orm.MemoryRevision)
        last_delete = (
            select(func.coalesce(func.max(earlier.id), 0))
            .where(earlier.memory_id == revision.memory_id, earlier.action == RevisionAction.DELETE.value)
            .scalar_subquery()
        )
        return select(revision).where(revision.workspace_id == self.workspace_id, revision.id > last_delete)

    async def _agent_versions(self, keys: Sequence[tuple[int, int]]) -> list[orm.AgentVersion | None]:
        agent_ids = sorted({agent for agent, _ in keys})
        stmt = select(orm.AgentVersion).where(
            orm.AgentVersion.agent_id.in_(agent_ids),
            orm.AgentVersion.version.in_(sorted({version for _, version in keys})),
            orm.AgentVersion.workspace_id == self.workspace_id,
        )
        found = {(row.agent_id, row.version): row for row in await self._select(stmt)}
        return [found.get(key) for key in keys]

    def _per_parent(
        self,
        model: type[M],
        parent_column: InstrumentedAttribute[Any],
        query: Callable[[AsyncSession, F], Select[M]],
        *,
        prime: DataLoader[int, M | None] | None = None,
    ) -> Pages[M, F]:
        """A per-parent connection: one statement per distinct (page, filters) for its pages,
        and one per distinct filters for its counts."""
        id_column: InstrumentedAttribute[int] = model.id  # type: ignore[attr-defined]

        async def pages(keys: Sequence[tuple[int, PageRequest, F]]) -> list[Page[M]]:
            groups: dict[tuple[PageRequest, F], list[int]] = defaultdict(list)
            for parent, page, filters in keys:
                groups[(page, filters)].append(parent)
            found: dict[tuple[int, PageRequest, F], Page[M]] = {}
            for (page, filters), parents in groups.items():
                async with self._sessionmaker() as session:
                    by_parent = await reads.fetch_pages_by_parent(
                        session,
                        model,
                        query(session, filters),
                        parent_column=parent_column,
                        parent_ids=parents,
                        id_column=id_column,
                        page=page,
                    )
                for parent, result in by_parent.items():
                    found[(parent, page, filters)] = result
                    for row in result.rows if prime is not None else ():
                        prime.prime(row.id, row)  # type: ignore[union-attr, attr-defined]
            return [found[key] for key in keys]

        async def counts(keys: Sequence[tuple[int, F]]) -> list[int]:
            groups: dict[F, list[int]] = defaultdict(list)
            for parent, filters in keys:
                groups[filters].append(parent)
            found: dict[tuple[int, F], int] = {}
            for filters, parents in groups.items():
                async with self._sessionmaker() as session:
                    by_parent = await reads.count_rows_by_parent(
                        session, query(session, filters), parent_column=parent_column, parent_ids=parents
                    )
                found.update({(parent, filters): n for parent, n in by_parent.items()})
            return [found[key] for key in keys]

        return Pages(
            DataLoader(load_fn=pages, max_batch_size=MAX_BATCH),
            DataLoader(load_fn=counts, max_batch_size=MAX_BATCH),
        )

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
