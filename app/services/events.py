"""Reading the run event log: the replay source for ``runTree`` subscriptions (DESIGN §6).

Events are committed in seq order with no gaps (the chokepoint allocates ``seq`` under the
root row's lock), so "every event after seq N" read from the database is complete up to
the newest commit: a subscriber can always resume from its last delivered seq.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import orm
from app.domain.errors import NotFound

REPLAY_PAGE_SIZE = 500


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
