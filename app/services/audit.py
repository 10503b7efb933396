"""The audit trail (docs/concepts/audit.md): ``append`` in the transaction of each change,
``seal`` to chain what was appended, ``list_events`` for GraphQL and the CLI, ``verify``
over a workspace's chain, ``prune`` for retention.

``append`` is one INSERT in the caller's transaction: the event commits with the change or
not at all, and no change ever waits on another workspace change's audit record. It is
inserted *unsealed* (no ``seq``, no hashes). ``seal`` then numbers the workspace's unsealed
events in id order after its chain head and chains their hashes, under the head's row lock:
only sealers take turns there. A sealed event is never updated again.

Who seals: every reader first (``auditEvents``, ``enverif audit list|verify|prune``), so
what they show is sealed and complete up to that moment, and the sweeper every interval
(``seal_pending``), so an unsealed event lives a few seconds at most. Readers list sealed
events only. The price: an event deleted in SQL before it is sealed leaves no trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.clock import utcnow
from app.db.orm import AuditEvent, AuditHead
from app.domain import audit
from app.domain.actors import Actor, ActorKind
from app.domain.audit import GENESIS, Break
from app.services.reads import Page, PageRequest, fetch_page

PRUNE_ACTION = "audit.prune"
SEAL_BATCH = 500


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
    row = AuditEvent(
        workspace_id=workspace_id,
        at=at or utcnow(),
        actor_kind=actor.kind.value,
        actor_id=actor.id,
        actor_name=actor.name,
        action=action,
        object_type=object_type,
        object_id=object_id,
        summary=summary[:2_000],
        diff=diff or None,
    )
    session.add(row)
    return row


async def seal(sessionmaker: async_sessionmaker[AsyncSession], *, workspace_id: int) -> int:
    """Chain every event of the workspace committed unsealed so far; how many were sealed.
    Each batch is its own transaction under the head's lock."""
    sealed = 0
    while True:
        try:
            batch = await _seal_batch(sessionmaker, workspace_id)
        except IntegrityError:  # two first sealers created the head at once: the other won
            batch = await _seal_batch(sessionmaker, workspace_id)
        sealed += batch
        if batch < SEAL_BATCH:
            return sealed


async def _seal_batch(sessionmaker: async_sessionmaker[AsyncSession], workspace_id: int) -> int:
    async with sessionmaker() as session, session.begin():
        pending = _unsealed(workspace_id)
        if await session.scalar(pending.with_only_columns(AuditEvent.id).limit(1)) is None:
            return 0  # the common case for readers: nothing to seal, no lock taken
        head = await session.scalar(
            select(AuditHead).where(AuditHead.workspace_id == workspace_id).with_for_update()
        )
        if head is None:  # the workspace's first seal; the primary key settles two at once
            head = AuditHead(workspace_id=workspace_id, seq=0, hash=GENESIS)
            session.add(head)
            await session.flush()
        # Read after the lock, so a sealer that waited sees what the one before it sealed.
        rows = list(await session.scalars(pending.order_by(AuditEvent.id).limit(SEAL_BATCH)))
        values = []
        for row in rows:
            row.seq, row.prev_hash = head.seq + 1, head.hash
            row.hash = audit.chain_hash(head.hash, hashed_fields(row))
            head.seq, head.hash = row.seq, row.hash
            values.append({"id": row.id, "seq": row.seq, "prev_hash": row.prev_hash, "hash": row.hash})
        session.expunge_all()  # written below in one executemany, not row by row
        if values:
            await session.execute(update(AuditEvent), values)
        await session.execute(
            update(AuditHead)
            .where(AuditHead.workspace_id == workspace_id)
            .values(seq=head.seq, hash=head.hash)
        )
        return len(rows)


def _unsealed(workspace_id: int) -> Select[AuditEvent]:
    return select(AuditEvent).where(AuditEvent.workspace_id == workspace_id, AuditEvent.seq.is_(None))


async def seal_pending(sessionmaker: async_sessionmaker[AsyncSession], *, workspaces: int = 100) -> int:
    """The sweeper's part: seal the workspaces that have unsealed events (up to
    ``workspaces`` of them per call)."""
    async with sessionmaker() as session:
        found = list(
            await session.scalars(
                select(AuditEvent.workspace_id).where(AuditEvent.seq.is_(None)).distinct().limit(workspaces)
            )
        )
    return sum([await seal(sessionmaker, workspace_id=w) for w in found])


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
    """The workspace's sealed events that pass ``f`` (callers ``seal`` first)."""
    stmt = select(AuditEvent).where(AuditEvent.workspace_id == workspace_id, AuditEvent.seq.is_not(None))
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
    """Sealed events, newest first (callers ``seal`` first)."""
    return await fetch_page(session, events_query(workspace_id, filter), id_column=AuditEvent.id, page=page)


@dataclass(frozen=True, slots=True)
class Verified:
    events: int
    broken: Break | None


VERIFY_BATCH = 1_000


async def verify(session: AsyncSession, *, workspace_id: int) -> Verified:
    """Walk the workspace's sealed chain from its first event (in batches) and check every
    link, and that the head names the last event. After a prune the chain starts where the
    latest checkpoint says, continuing from the hash it carries."""
    rows: Sequence[AuditEvent]
    checked = 0
    first = await session.scalar(
        select(func.min(AuditEvent.seq)).where(AuditEvent.workspace_id == workspace_id)
    )
    start = await _chain_start(session, workspace_id, first)
    if isinstance(start, Break):
        return Verified(0, start)
    expected_seq, expected_prev = start
    after = expected_seq - 1
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
            ((seq, prev, hash_, hashed_fields(r)) for seq, prev, hash_, r in _sealed(rows)),
            start_hash=expected_prev,
            start_seq=expected_seq,
        )
        if broken is not None:
            return Verified(checked, broken)
        if not rows:
            break
        checked += len(rows)
        last = _sealed(rows)[-1]
        after, expected_prev, expected_seq = last[0], last[2], last[0] + 1
    head = await session.get(AuditHead, workspace_id)
    last_seq = expected_seq - 1
    if head is not None and (head.seq != last_seq or head.hash != expected_prev):
        return Verified(
            checked, Break(last_seq + 1, f"the chain ends at seq {last_seq}, its head says {head.seq}")
        )
    return Verified(checked, None)


def _sealed(rows: Sequence[AuditEvent]) -> list[tuple[int, str, str, AuditEvent]]:
    return [(r.seq, r.prev_hash, r.hash, r) for r in rows if r.seq is not None and r.prev_hash and r.hash]


async def _chain_start(
    session: AsyncSession, workspace_id: int, first: int | None
) -> tuple[int, str] | Break:
    """(first seq, the hash it continues from): (1, GENESIS), or after a prune what the
    newest checkpoint carries. The checkpoint itself is checked by the walk like any event."""
    if first is None or first == 1:
        return 1, GENESIS
    checkpoint = await session.scalar(
        select(AuditEvent)
        .where(AuditEvent.workspace_id == workspace_id, AuditEvent.action == PRUNE_ACTION)
        .where(AuditEvent.seq.is_not(None))
        .order_by(AuditEvent.seq.desc())
        .limit(1)
    )
    kept = (checkpoint.diff or {}).get("checkpoint") if checkpoint is not None else None
    if (
        not isinstance(kept, dict)
        or not isinstance(kept.get("seq"), int)
        or not isinstance(kept.get("hash"), str)
    ):
        return Break(1, f"events before seq {first} are missing")
    if kept["seq"] + 1 != first:
        return Break(
            kept["seq"] + 1,
            f"events {kept['seq'] + 1} to {first - 1} are missing (pruned up to {kept['seq']})",
        )
    return first, kept["hash"]


@dataclass(frozen=True, slots=True)
class Pruned:
    events: int
    through_seq: int | None


async def prune(
    sessionmaker: async_sessionmaker[AsyncSession], *, workspace_id: int, before: datetime, actor: Actor
) -> Pruned:
    """Remove the oldest events, those of the chain's start that are all older than
    ``before``, and record a checkpoint event carrying the seq and hash the chain goes on
    from, so ``verify`` still passes. Nothing older: nothing removed, nothing recorded."""
    await seal(sessionmaker, workspace_id=workspace_id)
    async with sessionmaker() as session, session.begin():
        head = await session.scalar(
            select(AuditHead).where(AuditHead.workspace_id == workspace_id).with_for_update()
        )
        if head is None:
            return Pruned(0, None)
        sealed = (AuditEvent.workspace_id == workspace_id, AuditEvent.seq.is_not(None))
        newer = await session.scalar(select(func.min(AuditEvent.seq)).where(*sealed, AuditEvent.at >= before))
        through = head.seq if newer is None else newer - 1
        last = await session.scalar(select(AuditEvent).where(*sealed, AuditEvent.seq <= through)
                                    .order_by(AuditEvent.seq.desc()).limit(1))  # fmt: skip
        if last is None or last.seq is None:
            return Pruned(0, None)
        deleted = await session.execute(delete(AuditEvent).where(*sealed, AuditEvent.seq <= through))
        removed: int = deleted.rowcount  # type: ignore[attr-defined]
        await append(
            session, workspace_id=workspace_id, actor=actor, action=PRUNE_ACTION, object_type="Workspace",
            object_id=workspace_id, diff={"checkpoint": {"seq": last.seq, "hash": last.hash}},
            summary=f"pruned {removed} audit events older than {before.isoformat()} (up to seq {last.seq})",
        )  # fmt: skip
    await seal(sessionmaker, workspace_id=workspace_id)
    return Pruned(removed, last.seq)
