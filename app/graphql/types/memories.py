"""Memory, its revision history, and the memory connection."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.domain import actors
from app.domain.errors import NotFound
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.agents import Agent
from app.graphql.types.node import NODE_ID, OLDEST, Connection, Node, Paged, first_page, keyset_connection
from app.graphql.types.runs import LazyActor, Run
from app.services import memory_search, reads
from app.services.memories import RevisionAction
from app.services.reads import PageRequest


async def _source_run(info: Info, run_id: int | None) -> Run | None:
    if run_id is None:
        return None
    row = await (await info.context.loaders()).run.load(run_id)
    return None if row is None else Run.from_row(row)


@strawberry.type(
    name="MemoryRevision", description="One change to a memory; kept after the memory is deleted."
)
class MemoryRevision(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    action: RevisionAction = strawberry.field(
        description="Whether this change created, updated or deleted the memory."
    )
    key: str = strawberry.field(description="The memory's key after this change.")
    old_value: str | None = strawberry.field(description="The value before this change; null for a create.")
    new_value: str | None = strawberry.field(description="The value after this change; null for a delete.")
    old_key: str | None = strawberry.field(description="The key before this change; null for a create.")
    old_tags: list[str] | None = strawberry.field(description="The tags before; null for a create.")
    new_tags: list[str] | None = strawberry.field(description="The tags after; null for a delete.")
    old_importance: float | None = strawberry.field(description="The importance before; null for a create.")
    new_importance: float | None = strawberry.field(description="The importance after; null for a delete.")
    by_operator: bool = strawberry.field(description="True when an API token (not a run) made the change.")
    api_token_id: strawberry.ID | None = strawberry.field(
        description="The ApiToken (global id) that made the change; null when a run made it.",
        deprecation_reason="Use `actor`, an object like `sourceRun`.",
    )
    at: datetime = strawberry.field(description="When the change was made.")
    row: strawberry.Private[orm.MemoryRevision]

    @classmethod
    def from_row(cls, row: orm.MemoryRevision) -> MemoryRevision:
        return cls(
            id=strawberry.ID(to_global_id("MemoryRevision", row.id)),
            action=RevisionAction(row.action),
            key=row.key,
            old_value=row.old_value,
            new_value=row.new_value,
            old_key=row.old_key,
            old_tags=None if row.old_tags is None else [str(t) for t in row.old_tags],
            new_tags=None if row.new_tags is None else [str(t) for t in row.new_tags],
            old_importance=row.old_importance,
            new_importance=row.new_importance,
            by_operator=row.token_id is not None,
            api_token_id=None
            if row.token_id is None
            else strawberry.ID(to_global_id("ApiToken", row.token_id)),
            at=row.at,
            row=row,
        )

    @strawberry.field(description="The run that made the change; null when an operator did.")
    async def source_run(self, info: Info) -> Run | None:
        return await _source_run(info, self.row.run_id)

    @strawberry.field(description="Who made the change: the API token, or the run; null for the CLI.")
    async def actor(self, info: Info) -> LazyActor | None:
        from app.graphql.types.versions import Actor  # circular: versions import agents

        if self.row.token_id is not None:
            return await Actor.of(info, actors.Actor(actors.ActorKind.TOKEN, self.row.token_id).to_json())
        if self.row.run_id is not None:
            return await Actor.of(info, actors.Actor(actors.ActorKind.RUN, self.row.run_id).to_json())
        return None


@strawberry.type(
    name="Memory",
    description="Something an agent remembers across runs, injected into a run's context at its start: docs/concepts/memory.md.",
)
class Memory(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    key: str = strawberry.field(description="What the memory is about; unique among its agent's memories.")
    value: str = strawberry.field(description="The text injected into a run's context.")
    tags: list[str] = strawberry.field(description="Labels to filter by (memories(tags:)).")
    importance: float = strawberry.field(description="0..1; with recency, decides what is injected first.")
    created_at: datetime = strawberry.field(description="When it was created.")
    updated_at: datetime = strawberry.field(
        description="When its key, value, tags or importance last changed."
    )
    last_used_at: datetime | None = strawberry.field(description="When a run last had it injected.")
    row: strawberry.Private[orm.Memory]

    @classmethod
    def from_row(cls, row: orm.Memory) -> Memory:
        return cls(
            id=strawberry.ID(to_global_id("Memory", row.id)),
            key=row.key,
            value=row.value,
            tags=[str(t) for t in row.tags or []],
            importance=row.importance,
            created_at=row.created_at,
            updated_at=row.updated_at,
            last_used_at=row.last_used_at,
            row=row,
        )

    @classmethod
    def as_injected(cls, pinned: dict[str, Any], live: orm.Memory | None, *, agent_id: int) -> Memory:
        """A memory as a run had it injected (key, value, tags, importance then), whatever
        it became since; the live row (None: deleted since) gives only its timestamps."""
        updated_at = datetime.fromisoformat(pinned["updated_at"])
        row = orm.Memory(
            id=int(pinned["id"]),
            agent_id=agent_id,
            key=pinned["key"],
            value=pinned["value"],
            tags=list(pinned.get("tags") or []),
            importance=float(pinned.get("importance") or 0.0),
            source_run_id=None if live is None else live.source_run_id,
            created_at=updated_at if live is None else live.created_at,
            updated_at=updated_at,
            last_used_at=None if live is None else live.last_used_at,
        )
        return cls.from_row(row)

    @strawberry.field(description="The agent it belongs to.")
    async def agent(self, info: Info) -> Agent:
        row = await (await info.context.loaders()).agent.load(self.row.agent_id)
        if row is None:
            raise NotFound("this memory's agent is gone")
        return Agent.from_row(row)

    @strawberry.field(description="The run that created or last updated it; null when an operator wrote it.")
    async def source_run(self, info: Info) -> Run | None:
        return await _source_run(info, self.row.source_run_id)

    @strawberry.field(
        description=(
            "Its changes, oldest first: the first page of `revisionsConnection` (at most "
            "ENVERIF_MAX_PAGE_SIZE, 100 by default); page through the rest there."
        )
    )
    async def revisions(self, info: Info) -> list[MemoryRevision]:
        loaders = await info.context.loaders()
        return await first_page(info, loaders.memory_revisions, self.row.id, MemoryRevision.from_row)

    @strawberry.field(
        description="Its changes, oldest first unless asked otherwise.", extensions=[Paged(OLDEST)]
    )
    async def revisions_connection(self, info: Info, page: PageRequest) -> MemoryRevisionConnection:
        loaders = await info.context.loaders()
        return await loaders.memory_revisions.connection(
            MemoryRevisionConnection, self.row.id, page, None, MemoryRevision.from_row
        )


@strawberry.type(name="MemoryConnection", description="A page of memories (Relay cursor connection).")
class MemoryConnection(Connection[Memory]):
    pass


@strawberry.type(
    name="MemoryRevisionConnection", description="A page of memory revisions (Relay cursor connection)."
)
class MemoryRevisionConnection(Connection[MemoryRevision]):
    pass


async def memory_connection(
    info: Info,
    *,
    agent_id: int,
    query: str | None,
    tags: list[str] | None,
    page: PageRequest,
) -> MemoryConnection:
    """A search (``query``) is its own ranking: ``orderBy`` does not apply to it."""
    principal = await info.context.principal()
    async with info.context.session() as session:
        # An agent of another workspace is NOT_FOUND, never an empty list that confirms it.
        await reads.get_owned(session, orm.Agent, workspace_id=principal.workspace_id, pk=agent_id)
        if query is None or not query.strip():
            stmt = reads.memories_query(
                session, workspace_id=principal.workspace_id, agent_id=agent_id, tags=tags
            )
        else:
            ranked = await _search(
                session, workspace_id=principal.workspace_id, agent_id=agent_id, query=query, tags=tags
            )
    if query is None or not query.strip():
        return await keyset_connection(
            info, MemoryConnection, stmt, page, Memory.from_row, id_column=orm.Memory.id
        )
    connection: MemoryConnection = MemoryConnection.of_rows(ranked, page, Memory.from_row)
    return connection


async def _search(
    session: AsyncSession, *, workspace_id: int, agent_id: int, query: str, tags: list[str] | None
) -> list[orm.Memory]:
    """The ranked search results (at most memory_search.MAX_CANDIDATES in all), paged by the
    caller: a cursor names a memory of the ranking, so the next page starts right after it.
    Operators and viewers browsing do not count as use: ``lastUsedAt`` stays when a run last
    used it."""
    return await memory_search.search(
        session,
        workspace_id=workspace_id,
        agent_id=agent_id,
        query=query,
        tags=tags,
        limit=memory_search.MAX_CANDIDATES,
        now=utcnow(),
        mark_used=False,
    )
