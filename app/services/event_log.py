"""Reading the run event log: the replay source for ``runTree`` subscriptions (docs/graphql/guide.md).

Events are committed in seq order with no gaps (the chokepoint allocates ``seq`` under the
root row's lock), so "every event after seq N" read from the database is complete up to
the newest commit: a subscriber can always resume from its last delivered seq.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import orm
from app.domain.errors import NotFound
from app.domain.run_events import EventType
from app.domain.runs import TERMINAL_RUN
from app.events.hub import Subscription
from app.events.publish import EventMessage, event_to_message

REPLAY_PAGE_SIZE = 500
# Pub/sub can lose a message silently (e.g. a half-open connection the hub has not noticed
# yet), so a quiet subscription re-reads the log this often: one indexed query per idle
# subscription, and the worst-case delay for an event whose message was lost.
IDLE_POLL_S = 5.0


async def events_after(
    session: AsyncSession,
    *,
    workspace_id: int,
    root_run_id: int,
    after_seq: int,
    limit: int = REPLAY_PAGE_SIZE,
) -> list[orm.RunEvent]:
    """Up to ``limit`` events of one tree with ``seq > after_seq``, in seq order."""
    rows = await session.scalars(
        select(orm.RunEvent)
        .where(
            orm.RunEvent.workspace_id == workspace_id,
            orm.RunEvent.root_run_id == root_run_id,
            orm.RunEvent.seq > after_seq,
        )
        .order_by(orm.RunEvent.seq)
        .limit(limit)
    )
    return list(rows)


async def latest_seq(session: AsyncSession, *, workspace_id: int, root_run_id: int) -> int:
    """The newest seq of a tree's log (0 when empty): one probe of the (root, seq) index."""
    newest = await session.scalar(
        select(func.max(orm.RunEvent.seq)).where(
            orm.RunEvent.workspace_id == workspace_id, orm.RunEvent.root_run_id == root_run_id
        )
    )
    return int(newest or 0)


async def root_run_for_subscription(session: AsyncSession, *, workspace_id: int, run_id: int) -> orm.Run:
    """The root of the tree that ``run_id`` belongs to, if the run is in the workspace.

    Any run of a tree is accepted and resolved to its root: a client watching a child it
    found (say, from a delegation step) gets the whole tree's stream, whose events carry
    ``runId`` to tell the runs apart. Unknown runs and other workspaces' runs are both
    ``NotFound``, so a caller cannot probe for ids that exist elsewhere.
    """
    run = await _run_in_workspace(session, run_id=run_id, workspace_id=workspace_id)
    if run is None:
        raise NotFound("run not found", field="rootRunId")
    root_id = run.root_run_id if run.root_run_id is not None else run.id
    if root_id == run.id:
        return run
    root = await _run_in_workspace(session, run_id=root_id, workspace_id=workspace_id)
    if root is None:  # a tree never spans workspaces; a missing root means a broken row
        raise NotFound("run not found", field="rootRunId")
    return root


async def _run_in_workspace(session: AsyncSession, *, run_id: int, workspace_id: int) -> orm.Run | None:
    query = select(orm.Run).where(orm.Run.id == run_id, orm.Run.workspace_id == workspace_id)
    return await session.scalar(query)


async def tree_finished(session: AsyncSession, *, workspace_id: int, root_run_id: int) -> bool:
    """True once every run of the tree is terminal (the root included).

    A root's terminal transition ends its live descendants in the same transaction (the
    chokepoint's cascade), so after this is true no run of the tree writes events again.
    """
    active = await session.scalar(
        select(orm.Run.id)
        .where(
            orm.Run.workspace_id == workspace_id,
            orm.Run.root_run_id == root_run_id,
            orm.Run.status.not_in([s.value for s in TERMINAL_RUN]),
        )
        .limit(1)
    )
    return active is None


def ends_a_run(message: EventMessage) -> bool:
    return message.type == EventType.RUN_STATUS_CHANGED.value and message.status in _TERMINAL_VALUES


_TERMINAL_VALUES = frozenset(s.value for s in TERMINAL_RUN)


async def tree_events(
    sessionmaker: async_sessionmaker[AsyncSession],
    live: Subscription,
    *,
    workspace_id: int,
    root_run_id: int,
    after_seq: int = 0,
    idle_poll_s: float = IDLE_POLL_S,
) -> AsyncIterator[EventMessage]:
    """Every event of the tree after ``after_seq``, in seq order, without gaps or repeats;
    it ends once the tree is finished and every event of it has been yielded.

    ``live`` must be subscribed BEFORE this starts reading: anything committed after the
    replay's read then reaches ``live``, so replay + live leaves no hole. Live messages are
    only a fast path; whenever they cannot be trusted to be complete (a seq gap, a hub
    resync, an omitted payload, or a quiet spell in which a message may have been lost
    silently) the database is read from the last delivered seq.

    The end: whether the tree is finished is read BEFORE a database catch-up, never after.
    A finished tree writes no more events, so the catch-up that follows "finished" holds
    the rest of the log, late events of the transaction that ended the root included.
    It is asked at the start and after every delivered event that ends a run.
    """
    last = after_seq

    async def catch_up() -> AsyncIterator[EventMessage]:
        nonlocal last
        while True:
            # Read a page and close the session before yielding: a slow client must not hold
            # a connection (on SQLite every transaction holds the database's write lock).
            async with sessionmaker() as session:
                rows = await events_after(
                    session, workspace_id=workspace_id, root_run_id=root_run_id, after_seq=last
                )
                page = [event_to_message(row) for row in rows]
            for message in page:
                last = message.seq
                yield message
            if len(page) < REPLAY_PAGE_SIZE:
                return

    async def newest() -> int:
        async with sessionmaker() as session:
            return await latest_seq(session, workspace_id=workspace_id, root_run_id=root_run_id)

    async def finished() -> bool:
        async with sessionmaker() as session:
            return await tree_finished(session, workspace_id=workspace_id, root_run_id=root_run_id)

    done = await finished()
    check = False
    async for message in catch_up():
        check = check or ends_a_run(message)
        yield message
    while not done:
        if check:
            done, check = await finished(), False
            async for message in catch_up():
                check = check or ends_a_run(message)
                yield message
            continue
        item = await live.get(timeout_s=idle_poll_s)
        if isinstance(item, EventMessage):
            if item.seq <= last:
                continue  # already delivered by a database read
            if item.seq == last + 1 and not item.payload_omitted:
                last = item.seq
                check = ends_a_run(item)
                yield item
                continue
        elif item is None and await live.shared_read(newest, "newest-seq") <= last:
            # Silence, and the log has nothing newer: no message was lost. The newest seq is
            # read once for all of this process's subscribers to the tree.
            continue
        # A gap, a resync, an omitted payload, or a lost message: the database has the truth.
        async for message in catch_up():
            check = check or ends_a_run(message)
            yield message
