"""Memory writes: the cores shared by operators (GraphQL) and runs (the memory tools), and the
operator use cases around them.

Every change writes a ``MemoryRevision`` (who: run or token, old value, new value, when) in
the same transaction as the change, so history and state can never disagree. Every stored
key, value and tag passes ``screen`` first: input limits, then the credential guard
(``app.domain.credentials``). A refused write stores nothing and leaves no revision.

The cores (``remember``, ``forget``) take an open session and keyword-only arguments, and
neither begin nor commit: an operator's use case wraps them in its own transaction, a run's
memory tool calls them inside its step's fenced transaction (docs/extending/tools.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.db.session import retry_deadlocks
from app.domain.agents import Role
from app.domain.audit import diff as audit_diff
from app.domain.credentials import check_credentials
from app.domain.errors import Conflict, CredentialRejected, NotFound
from app.services import audit
from app.services.auth import Principal
from app.services.reads import get_owned
from app.services.runtime import Runtime
from app.services.validation import (
    KEEP,
    Keep,
    check_fraction,
    check_identifier_text,
    check_string_list,
    check_text,
)

MAX_KEY_CHARS = 255
MAX_TAGS = 32
MAX_TAG_CHARS = 64
DEFAULT_IMPORTANCE = 0.5


class RevisionAction(enum.StrEnum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryDraft:
    key: str
    value: str
    tags: list[str] | None = None
    importance: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPatch:
    key: str | Keep = KEEP
    value: str | Keep = KEEP
    tags: list[str] | Keep = KEEP
    importance: float | Keep = KEEP


@dataclass(frozen=True, slots=True)
class Written:
    memory: orm.Memory
    created: bool


# -- checks ----------------------------------------------------------------------------------


def check_key(key: str) -> str:
    key = check_text(key, field="key", max_chars=MAX_KEY_CHARS, allow_empty=False)
    return check_identifier_text(key, field="key")


def check_value(value: str, *, max_chars: int) -> str:
    return check_text(value, field="value", max_chars=max_chars, allow_empty=False)


def check_tags(tags: list[str]) -> list[str]:
    checked = check_string_list(tags, field="tags", max_items=MAX_TAGS, max_chars=MAX_TAG_CHARS)
    return [check_identifier_text(tag, field="tags") for tag in checked]


def check_importance(importance: float) -> float:
    return check_fraction(importance, field="importance")


def screen(key: str, value: str | None, tags: list[str]) -> None:
    """The credential guard, for every write path: CREDENTIAL_REJECTED naming the rule and the
    field, never the text. ``value`` None: the value is not being changed."""
    rejection = check_credentials(key, value, tags)
    if rejection is not None:
        raise CredentialRejected(rejection.message, field=rejection.field)


# -- cores (an open session; no transaction handling) ---------------------------------------


async def remember(
    session: AsyncSession,
    *,
    workspace_id: int,
    agent_id: int,
    key: str,
    value: str,
    tags: list[str] | None,
    importance: float | None,
    now: datetime,
    max_value_chars: int,
    source_run_id: int | None = None,
    token_id: int | None = None,
) -> Written:
    """Upsert the agent's memory under ``key`` (exact, case-sensitive). Omitted tags and
    importance keep the stored ones on an update. The caller owns the transaction."""
    key = check_key(key)
    value = check_value(value, max_chars=max_value_chars)
    checked_tags = None if tags is None else check_tags(tags)
    checked_importance = None if importance is None else check_importance(importance)
    screen(key, value, checked_tags or [])
    # Lock order: an existing memory's row; a new key's writers queue on the agent's row
    # instead. Inserting and letting the unique index settle a race would not do on MariaDB:
    # each loser keeps a shared lock on the winner's index entry, and their locking reads
    # to update it then deadlock with one another.
    existing_id = await session.scalar(
        select(orm.Memory.id).where(orm.Memory.agent_id == agent_id, orm.Memory.key == key)
    )
    memory = None if existing_id is None else await _lock_by_key(session, agent_id=agent_id, key=key)
    if memory is None:
        await _lock_agent(session, agent_id)
        # A locking read sees what the writer before us committed (a plain one would not).
        memory = await _lock_by_key(session, agent_id=agent_id, key=key)
    if memory is None:
        memory = orm.Memory(
            workspace_id=workspace_id,
            agent_id=agent_id,
            key=key,
            value=value,
            tags=checked_tags or [],
            importance=DEFAULT_IMPORTANCE if checked_importance is None else checked_importance,
            source_run_id=source_run_id,
            created_at=now,
            updated_at=now,
            last_used_at=None,
        )
        session.add(memory)
        await _flush_unique_key(session, key)
        record_revision(
            session,
            memory=memory,
            action=RevisionAction.CREATE,
            old_value=None,
            at=now,
            run_id=source_run_id,
            token_id=token_id,
        )
        return Written(memory=memory, created=True)
    old_value = memory.value
    before = facets(memory)
    memory.value = value
    if checked_tags is not None:
        memory.tags = checked_tags
    if checked_importance is not None:
        memory.importance = checked_importance
    memory.source_run_id = source_run_id  # the run that last updated it; null for operators
    memory.updated_at = now
    record_revision(
        session,
        memory=memory,
        action=RevisionAction.UPDATE,
        old_value=old_value,
        before=before,
        at=now,
        run_id=source_run_id,
        token_id=token_id,
    )
    return Written(memory=memory, created=False)


async def forget(
    session: AsyncSession,
    *,
    agent_id: int,
    key: str,
    now: datetime,
    source_run_id: int | None = None,
    token_id: int | None = None,
) -> bool:
    """Delete the agent's memory under ``key``; False when there is none."""
    key = check_key(key)
    row = await _lock_by_key(session, agent_id=agent_id, key=key)
    if row is None:
        return False
    await _delete(session, row, now=now, run_id=source_run_id, token_id=token_id)
    return True


# -- operator use cases ----------------------------------------------------------------------


async def create_memory(
    rt: Runtime, principal: Principal, *, agent_id: int, draft: MemoryDraft
) -> orm.Memory:
    """A new memory; CONFLICT when the agent already has the key (operators edit by id)."""
    principal.require(Role.OPERATOR)
    key = check_key(draft.key)
    value = check_value(draft.value, max_chars=rt.settings.max_memory_chars)
    tags = check_tags(draft.tags or [])
    importance = check_importance(DEFAULT_IMPORTANCE if draft.importance is None else draft.importance)
    screen(key, value, tags)
    now = utcnow()

    async def write() -> orm.Memory:
        async with rt.sessionmaker() as session, session.begin():
            agent = await get_owned(session, orm.Agent, workspace_id=principal.workspace_id, pk=agent_id)
            await _lock_agent(session, agent.id)
            await _ensure_key_free(session, agent_id=agent.id, key=key, memory_id=None)
            row = orm.Memory(
                workspace_id=principal.workspace_id,
                agent_id=agent.id,
                key=key,
                value=value,
                tags=tags,
                importance=importance,
                source_run_id=None,
                created_at=now,
                updated_at=now,
                last_used_at=None,
            )
            session.add(row)
            await _flush_unique_key(session, key)
            record_revision(
                session,
                memory=row,
                action=RevisionAction.CREATE,
                old_value=None,
                token_id=principal.token_id,
                at=now,
            )
            await _audit(session, principal, row, "memory.create", {}, at=now)
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


async def update_memory(
    rt: Runtime, principal: Principal, *, memory_id: int, patch: MemoryPatch
) -> orm.Memory:
    principal.require(Role.OPERATOR)
    key = None if isinstance(patch.key, Keep) else check_key(patch.key)
    value = (
        None
        if isinstance(patch.value, Keep)
        else check_value(patch.value, max_chars=rt.settings.max_memory_chars)
    )
    tags = None if isinstance(patch.tags, Keep) else check_tags(patch.tags)
    importance = None if isinstance(patch.importance, Keep) else check_importance(patch.importance)
    now = utcnow()

    async def write() -> orm.Memory:
        async with rt.sessionmaker() as session, session.begin():
            row = await _lock_memory(session, workspace_id=principal.workspace_id, memory_id=memory_id)
            # The guard sees the memory as it would be stored: a new key next to the old value
            # can make a credential-named key meet a one-word value.
            screen(
                row.key if key is None else key,
                row.value if value is None else value,
                list(row.tags or []) if tags is None else tags,
            )
            old_value = row.value
            before = _audited(row)
            old_facets = facets(row)
            if key is not None and key != row.key:
                await _ensure_key_free(session, agent_id=row.agent_id, key=key, memory_id=row.id)
                row.key = key
            if value is not None:
                row.value = value
            if tags is not None:
                row.tags = tags
            if importance is not None:
                row.importance = importance
            # An operator wrote it last: sourceRun is then null (docs/concepts/memory.md).
            row.source_run_id = None
            row.updated_at = now
            await _flush_unique_key(session, row.key)
            record_revision(
                session,
                memory=row,
                action=RevisionAction.UPDATE,
                old_value=old_value,
                before=old_facets,
                token_id=principal.token_id,
                at=now,
            )
            await _audit(session, principal, row, "memory.update", before, at=now)
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


async def delete_memory(rt: Runtime, principal: Principal, *, memory_id: int) -> orm.Memory:
    """Deletes the memory; returns the row as it was (its ``agent_id`` for the answer)."""
    principal.require(Role.OPERATOR)
    now = utcnow()

    async def write() -> orm.Memory:
        async with rt.sessionmaker() as session, session.begin():
            row = await _lock_memory(session, workspace_id=principal.workspace_id, memory_id=memory_id)
            before = _audited(row)
            await _delete(session, row, now=now, run_id=None, token_id=principal.token_id)
            await audit.append(
                session, workspace_id=principal.workspace_id, actor=principal.actor, action="memory.delete",
                object_type="Memory", object_id=memory_id, summary=f"deleted memory {before['key']!r}",
                diff=audit_diff(before, {}), at=now,
            )  # fmt: skip
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


def _audited(row: orm.Memory) -> dict[str, Any]:
    return {"agent_id": row.agent_id, "key": row.key, "value": row.value, "tags": list(row.tags or []),
            "importance": row.importance}  # fmt: skip


async def _audit(
    session: AsyncSession,
    principal: Principal,
    row: orm.Memory,
    action: str,
    before: dict[str, Any],
    *,
    at: datetime,
) -> None:
    verb = "created" if action == "memory.create" else "updated"
    await audit.append(
        session, workspace_id=row.workspace_id, actor=principal.actor, action=action, object_type="Memory",
        object_id=row.id, summary=f"{verb} memory {row.key!r}", diff=audit_diff(before, _audited(row)), at=at,
    )  # fmt: skip


# -- helpers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Facets:
    """What a revision records of a memory besides its value."""

    key: str
    tags: tuple[str, ...]
    importance: float


def facets(memory: orm.Memory) -> Facets:
    return Facets(memory.key, tuple(str(t) for t in memory.tags or ()), memory.importance)


def record_revision(
    session: AsyncSession,
    *,
    memory: orm.Memory,
    action: RevisionAction,
    old_value: str | None,
    at: datetime,
    new_value: str | Keep | None = KEEP,
    before: Facets | None = None,
    token_id: int | None = None,
    run_id: int | None = None,
) -> orm.MemoryRevision:
    """Append one revision; ``new_value`` defaults to the memory's current value. Call it in
    the transaction that changes the memory (after the memory has its id). ``before``: the
    key, tags and importance before an update or delete; after it, they are the memory's
    own (none for a delete)."""
    deleted = action is RevisionAction.DELETE
    if deleted:
        before = facets(memory)
    revision = orm.MemoryRevision(
        workspace_id=memory.workspace_id,
        memory_id=memory.id,
        agent_id=memory.agent_id,
        key=memory.key,
        action=action.value,
        run_id=run_id,
        token_id=token_id,
        old_value=old_value,
        new_value=memory.value if isinstance(new_value, Keep) else new_value,
        old_key=None if before is None else before.key,
        old_tags=None if before is None else list(before.tags),
        new_tags=None if deleted else list(memory.tags or []),
        old_importance=None if before is None else before.importance,
        new_importance=None if deleted else memory.importance,
        at=at,
    )
    session.add(revision)
    return revision


async def _delete(
    session: AsyncSession, row: orm.Memory, *, now: datetime, run_id: int | None, token_id: int | None
) -> None:
    # The revision outlives the row (no foreign key), so the deletion stays auditable.
    record_revision(
        session,
        memory=row,
        action=RevisionAction.DELETE,
        old_value=row.value,
        new_value=None,
        run_id=run_id,
        token_id=token_id,
        at=now,
    )
    await session.delete(row)
    await session.flush()


async def _lock_agent(session: AsyncSession, agent_id: int) -> None:
    """Serialise the creation of an agent's memories (see ``remember``; operators' creates
    take it too). Held to the end of the caller's transaction."""
    await session.execute(select(orm.Agent.id).where(orm.Agent.id == agent_id).with_for_update())


async def _lock_by_key(session: AsyncSession, *, agent_id: int, key: str) -> orm.Memory | None:
    # FOR UPDATE: a concurrent writer of the same key waits, so each revision's old value is
    # the value the previous revision left (no branching history).
    return await session.scalar(
        select(orm.Memory)
        .where(orm.Memory.agent_id == agent_id, orm.Memory.key == key)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def _lock_memory(session: AsyncSession, *, workspace_id: int, memory_id: int) -> orm.Memory:
    # FOR UPDATE: two concurrent edits must not both read the same old value, or the
    # history would show two revisions branching from one state (a lost update).
    row = await session.scalar(
        select(orm.Memory)
        .where(orm.Memory.id == memory_id, orm.Memory.workspace_id == workspace_id)
        .with_for_update()
    )
    if row is None:
        raise NotFound("no memory with this id")
    return row


async def _ensure_key_free(session: AsyncSession, *, agent_id: int, key: str, memory_id: int | None) -> None:
    existing = await session.scalar(
        select(orm.Memory.id).where(orm.Memory.agent_id == agent_id, orm.Memory.key == key)
    )
    if existing is not None and existing != memory_id:
        raise Conflict(f"this agent already has a memory with key {key!r}", field="key")


async def _flush_unique_key(session: AsyncSession, key: str) -> None:
    # The unique index on (agent_id, key) settles a race between two writers of one key.
    try:
        await session.flush()
    except IntegrityError:
        raise Conflict(f"this agent already has a memory with key {key!r}", field="key") from None
