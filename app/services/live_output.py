"""``runOutput``: a run's live model output, the text so far first (docs/graphql/guide.md).

The pieces come from the process's ``OutputHub`` (``app.events.output``); this use case puts
them in order for one subscription: the current turn's text so far, then what follows,
each turn closed by a ``done`` chunk, until the run is terminal. A run is checked for its
end when a turn ends and after every quiet spell, so a subscription to a finished run (or
one whose worker died mid-turn) completes rather than waiting forever.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import orm
from app.domain.errors import NotFound
from app.domain.runs import TERMINAL_RUN, RunStatus
from app.events.output import WATCH_RENEW_S, OutputHub

# How long a subscription waits in silence before it checks whether the run has ended.
IDLE_CHECK_S = 2.0


@dataclass(frozen=True, slots=True)
class OutputChunk:
    run_id: int
    step_seq: int
    text: str
    done: bool


async def check_run(session: AsyncSession, *, workspace_id: int, run_id: int) -> None:
    """``NotFound`` unless the run is in the workspace (other workspaces' runs included)."""
    found = await session.scalar(
        select(orm.Run.id).where(orm.Run.id == run_id, orm.Run.workspace_id == workspace_id)
    )
    if found is None:
        raise NotFound("run not found", field="runId")


async def _ended(sessionmaker: async_sessionmaker[AsyncSession], run_id: int) -> bool:
    async with sessionmaker() as session:
        status = await session.scalar(select(orm.Run.status).where(orm.Run.id == run_id))
    return status is None or RunStatus(status) in TERMINAL_RUN


async def output_chunks(
    hub: OutputHub,
    sessionmaker: async_sessionmaker[AsyncSession],
    *,
    run_id: int,
    idle_s: float = IDLE_CHECK_S,
) -> AsyncIterator[OutputChunk]:
    with hub.watch(run_id) as watch:  # watching first: nothing said after the read below is lost
        # Then marked as watched (before the first read): the run's worker writes from here on.
        await hub.announce(run_id)
        announced_at = time.monotonic()
        seq: int | None = None
        sent = 0
        while True:
            if time.monotonic() - announced_at >= WATCH_RENEW_S:
                await hub.announce(run_id)
                announced_at = time.monotonic()
            if watch.stale:
                watch.stale = False
                so_far = await hub.so_far(run_id)
                if so_far is not None:
                    if so_far[0] != seq:
                        seq, sent = so_far[0], 0
                    if len(so_far[1]) > sent:
                        yield OutputChunk(run_id, seq, so_far[1][sent:], False)
                        sent = len(so_far[1])
                elif await _ended(sessionmaker, run_id):
                    return
            piece = await watch.get(idle_s)
            if piece is None:
                if not watch.stale and await _ended(sessionmaker, run_id):
                    return
                continue
            if piece.step_seq != seq:
                seq, sent = piece.step_seq, 0
            if piece.done:
                yield OutputChunk(run_id, piece.step_seq, "", True)
                seq, sent = None, 0
                if await _ended(sessionmaker, run_id):
                    return
                continue
            if piece.start > sent:  # a piece went missing: read the text so far instead
                watch.stale = True
                continue
            if piece.end > sent:
                yield OutputChunk(run_id, piece.step_seq, piece.text[sent - piece.start :], False)
                sent = piece.end
