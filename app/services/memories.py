"""Memory use cases for operators: create, update, delete. Every change writes a
``MemoryRevision`` (who, old value, new value, when) in the same transaction as the change,
so history and state can never disagree.

Values pass through ``screen_value`` before they are stored. That is the one place a stored
value is checked, so the credential guard (a later issue) is a single call added there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.domain.agents import Role
from app.domain.errors import Conflict, NotFound
from app.services.auth import Principal
from app.services.queries import get_owned
from app.services.runtime import Runtime
from app.services.validation import KEEP, Keep, check_fraction, check_string_list, check_text

MAX_KEY_CHARS = 200
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


def check_key(key: str) -> str:
    return check_text(key, field="key", max_chars=MAX_KEY_CHARS, allow_empty=False)


def check_tags(tags: list[str]) -> list[str]:
    return check_string_list(tags, field="tags", max_items=MAX_TAGS, max_chars=MAX_TAG_CHARS)


def check_importance(importance: float) -> float:
    return check_fraction(importance, field="importance")


def screen_value(value: str, *, max_chars: int) -> str:
    """Every value a memory is about to hold comes through here (operators and, later, the
    run loop's memory tools). The credential guard plugs in as ``guard(value)`` below."""
    return check_text(value, field="value", max_chars=max_chars, allow_empty=False)


async def create_memory(
    rt: Runtime, principal: Principal, *, agent_id: int, draft: MemoryDraft
) -> orm.Memory:
    principal.require(Role.OPERATOR)
    key = check_key(draft.key)
    value = screen_value(draft.value, max_chars=rt.settings.max_text_chars)
    tags = check_tags(draft.tags or [])
    importance = check_importance(DEFAULT_IMPORTANCE if draft.importance is None else draft.importance)
    now = utcnow()
    async with rt.sessionmaker() as session, session.begin():
        agent = await get_owned(session, orm.Agent, workspace_id=principal.workspace_id, pk=agent_id)
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
    return row


async def update_memory(
    rt: Runtime, principal: Principal, *, memory_id: int, patch: MemoryPatch
) -> orm.Memory:
    principal.require(Role.OPERATOR)
    key = None if isinstance(patch.key, Keep) else check_key(patch.key)
    value = (
        None
        if isinstance(patch.value, Keep)
        else screen_value(patch.value, max_chars=rt.settings.max_text_chars)
    )
    tags = None if isinstance(patch.tags, Keep) else check_tags(patch.tags)
    importance = None if isinstance(patch.importance, Keep) else check_importance(patch.importance)
    now = utcnow()
    async with rt.sessionmaker() as session, session.begin():
        row = await _lock_memory(session, workspace_id=principal.workspace_id, memory_id=memory_id)
        old_value = row.value
        if key is not None and key != row.key:
            await _ensure_key_free(session, agent_id=row.agent_id, key=key, memory_id=row.id)
            row.key = key
        if value is not None:
            row.value = value
        if tags is not None:
            row.tags = tags
        if importance is not None:
            row.importance = importance
        # An operator wrote it last: DESIGN §2 says sourceRun is then null.
        row.source_run_id = None
        row.updated_at = now
        await _flush_unique_key(session, row.key)
        record_revision(
            session,
            memory=row,
            action=RevisionAction.UPDATE,
            old_value=old_value,
            token_id=principal.token_id,
            at=now,
        )
    return row


async def delete_memory(rt: Runtime, principal: Principal, *, memory_id: int) -> int:
    principal.require(Role.OPERATOR)
    now = utcnow()
    async with rt.sessionmaker() as session, session.begin():
        row = await _lock_memory(session, workspace_id=principal.workspace_id, memory_id=memory_id)
        # The revision outlives the row (no foreign key), so the deletion stays auditable.
        record_revision(
            session,
            memory=row,
            action=RevisionAction.DELETE,
            old_value=row.value,
            new_value=None,
            token_id=principal.token_id,
            at=now,
        )
        await session.delete(row)
    return memory_id


def record_revision(
    session: AsyncSession,
    *,
    memory: orm.Memory,
    action: RevisionAction,
    old_value: str | None,
    at: datetime,
    new_value: str | Keep | None = KEEP,
    token_id: int | None = None,
    run_id: int | None = None,
) -> orm.MemoryRevision:
    """Append one revision; ``new_value`` defaults to the memory's current value. Call it in
    the transaction that changes the memory (after the memory has its id)."""
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
        at=at,
    )
    session.add(revision)
    return revision


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
