"""The audit trail (docs/concepts/audit.md): ``append`` in the transaction of each change,
``list_events`` for GraphQL and the CLI, ``verify`` over a workspace's chain.

``append`` locks the workspace's ``audit_heads`` row, numbers the event after it, chains its
hash and moves the head, all in the caller's transaction: the event commits with the change
or not at all, and events are numbered in commit order. The head is the last row such a
transaction locks (callers append last), so it never waits on a lock while holding it, and
no lock cycle can form through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.orm import AuditEvent, AuditHead
from app.domain import audit
from app.domain.actors import Actor, ActorKind
from app.domain.audit import GENESIS, Break
from app.services.reads import Page, PageRequest, fetch_page


async def append(
    session: AsyncSession,
    *,
    workspace_id: int,
    actor: Actor,
    action: str,
    object_type: str,
    object_id: int | None,
    summary: str,
    diff: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> AuditEvent:
    head = await session.scalar(
        select(AuditHead).where(AuditHead.workspace_id == workspace_id).with_for_update()
    )
    if head is None:  # a workspace's first event; creating it with the workspace would need
        head = AuditHead(workspace_id=workspace_id, seq=0, hash=GENESIS)  # every creator to
        session.add(head)  # remember it, and the primary key settles two first appends.
    row = AuditEvent(
        workspace_id=workspace_id,
        seq=head.seq + 1,
        at=at or utcnow(),
        actor_kind=actor.kind.value,
        actor_id=actor.id,
        actor_name=actor.name,
        action=action,
        object_type=object_type,
        object_id=object_id,
        summary=summary[:2_000],
        diff=diff or None,
        prev_hash=head.hash,
    )
    row.hash = audit.chain_hash(row.prev_hash, hashed_fields(row))
    session.add(row)
    head.seq, head.hash = row.seq, row.hash
    return row


def hashed_fields(row: AuditEvent) -> dict[str, Any]:
    """What an event's hash covers: everything but the hashes."""
    return {
        "workspaceId": row.workspace_id,
        "seq": row.seq,
        "at": row.at.isoformat(),
        "actor": {"kind": row.actor_kind, "id": row.actor_id, "name": row.actor_name},
        "action": row.action,
        "objectType": row.object_type,
        "objectId": row.object_id,
        "summary": row.summary,
        "diff": row.diff,
    }


@dataclass(frozen=True, slots=True)
class AuditFilter:
    action: str | None = None
    object_type: str | None = None
    object_id: int | None = None
    actor_kind: ActorKind | None = None
    since: datetime | None = None


def events_query(workspace_id: int, f: AuditFilter) -> Select[AuditEvent]:
    stmt = select(AuditEvent).where(AuditEvent.workspace_id == workspace_id)
    if f.action is not None:
        stmt = stmt.where(AuditEvent.action == f.action)
    if f.object_type is not None:
        stmt = stmt.where(AuditEvent.object_type == f.object_type)
    if f.object_id is not None:
        stmt = stmt.where(AuditEvent.object_id == f.object_id)
    if f.actor_kind is not None:
        stmt = stmt.where(AuditEvent.actor_kind == f.actor_kind.value)
    if f.since is not None:
        stmt = stmt.where(AuditEvent.at >= f.since)
    return stmt


async def list_events(
    session: AsyncSession, *, workspace_id: int, filter: AuditFilter, page: PageRequest
) -> Page[AuditEvent]:
    """Newest first."""
    return await fetch_page(session, events_query(workspace_id, filter), id_column=AuditEvent.id, page=page)


@dataclass(frozen=True, slots=True)
class Verified:
    events: int
    broken: Break | None


VERIFY_BATCH = 1_000


async def verify(session: AsyncSession, *, workspace_id: int) -> Verified:
    """Walk the workspace's chain from its first event (in batches) and check every link,
    and that the head names the last event."""
    rows: Sequence[AuditEvent]
    after, checked, expected_prev, expected_seq = 0, 0, GENESIS, 1
    first = await session.scalar(
        select(AuditEvent.seq)
        .where(AuditEvent.workspace_id == workspace_id)
        .order_by(AuditEvent.seq)
        .limit(1)
    )
    if first is not None and first != 1:
        return Verified(0, Break(1, f"events before seq {first} are missing"))
    while True:
        rows = list(
            await session.scalars(
                select(AuditEvent)
                .where(AuditEvent.workspace_id == workspace_id, AuditEvent.seq > after)
                .order_by(AuditEvent.seq)
                .limit(VERIFY_BATCH)
            )
        )
        broken = audit.first_break(
            ((r.seq, r.prev_hash, r.hash, hashed_fields(r)) for r in rows),
            start_hash=expected_prev,
            start_seq=expected_seq,
        )
        if broken is not None:
            return Verified(checked, broken)
        if not rows:
            break
        checked += len(rows)
        after, expected_prev, expected_seq = rows[-1].seq, rows[-1].hash, rows[-1].seq + 1
    head = await session.get(AuditHead, workspace_id)
    last = expected_seq - 1
    if head is not None and (head.seq != last or head.hash != expected_prev):
        return Verified(checked, Break(last + 1, f"the chain ends at seq {last}, its head says {head.seq}"))
    return Verified(checked, None)
