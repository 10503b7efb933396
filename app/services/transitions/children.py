"""Child runs (docs/concepts/delegation.md): created inside the parent's fenced tree transaction, together
with the result of the parent's ``agents.delegate`` step. Part of ``TreeTx``.

Because the whole tree is locked by its root row, a child can only be created while the
parent is still RUNNING under the delegating worker's fence: a parent (or any ancestor)
cancelled at the same moment either commits first, and the delegation is refused by the
fence, or commits after, and its cascade ends the new child too.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Agent, Run
from app.domain.run_events import EventType
from app.domain.runs import RunStatus, RunTrigger
from app.services.transitions.outbox import Emit, WakeUp


class ChildWrites:
    """Mixed into ``TreeTx``; relies on its session, clock, locks and event log."""

    session: AsyncSession
    now: datetime
    root: Run
    wakeups: list[WakeUp]

    if TYPE_CHECKING:  # provided by TreeTx; declared for type checkers only
        emit: Emit

    async def create_child(
        self, parent: Run, *, agent: Agent, task: str, input: dict[str, Any], parent_step_id: int
    ) -> int:
        """A QUEUED child of ``parent`` (locked, fenced by the caller), enqueued after commit;
        returns its id. Its policy chain is the parent's plus the child agent's own policy,
        snapshotted now.

        One INSERT and nothing else touches the database: a failed INSERT leaves nothing
        behind and the transaction goes on (statements are atomic on both databases, and a
        Core statement that fails does not end the session's transaction the way a failed
        ORM flush does), so the delegating tool needs no savepoint around it."""
        link = {"agent_id": agent.id, "agent_name": agent.name, "policy": agent.policy}
        row = {
            "workspace_id": parent.workspace_id,
            "agent_id": agent.id,
            "status": RunStatus.QUEUED.value,
            "trigger": RunTrigger.DELEGATION.value,
            "input": input,
            "depth": parent.depth + 1,
            "parent_run_id": parent.id,
            "root_run_id": self.root.id,
            "parent_step_id": parent_step_id,
            "delegation_task": task,
            "policy_chain": [*parent.policy_chain, link],
            "attempt": 0,
            "abandoned_claims": 0,
            "wake_count": 1,
            "turns": 0,
            "last_event_seq": 0,
            "created_at": self.now,
            "updated_at": self.now,
            "queued_at": self.now,
        }
        # A Core INSERT returns a CursorResult; AsyncSession.execute is typed as the wider Result.
        done = await self.session.execute(_INSERT_RUN, row)
        # Detached (like the steps of ``add_steps``): a later lock in this transaction reads
        # the row itself (``TreeTx.run``).
        child = Run(id=done.inserted_primary_key[0], **row)  # type: ignore[attr-defined]
        self.emit(child, EventType.RUN_CREATED, status=child.status,
                  payload={"agentId": agent.id, "agent": agent.name, "trigger": child.trigger, "depth": child.depth,
                           "parentStepId": parent_step_id, "task": task})  # fmt: skip
        self.wakeups.append(WakeUp(child.id, child.wake_count, self.root.id))
        return child.id


# Built once, compiled once (a tree's hot path).
_INSERT_RUN = insert(Run.__table__)
