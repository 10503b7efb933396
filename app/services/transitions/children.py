"""Child runs (DESIGN §7): created inside the parent's fenced tree transaction, together
with the result of the parent's ``agents.delegate`` step. Part of ``TreeTx``.

Because the whole tree is locked by its root row, a child can only be created while the
parent is still RUNNING under the delegating worker's fence: a parent (or any ancestor)
cancelled at the same moment either commits first, and the delegation is refused by the
fence, or commits after, and its cascade ends the new child too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Agent, Run
from app.domain.events import EventType
from app.domain.runs import RunStatus, RunTrigger
from app.services.transitions.outbox import WakeUp


class ChildWrites:
    """Mixed into ``TreeTx``; relies on its session, clock, locks and event log."""

    session: AsyncSession
    now: datetime
    root: Run
    wakeups: list[WakeUp]
    _runs: dict[int, Run]

    def emit(self, run: Run, type: EventType, **kwargs: Any) -> Any: ...  # TreeTx

    async def create_child(
        self, parent: Run, *, agent: Agent, task: str, input: dict[str, Any], parent_step_id: int
    ) -> Run:
        """A QUEUED child of ``parent`` (locked, fenced by the caller), enqueued after commit.
        Its policy chain is the parent's plus the child agent's own policy, snapshotted now."""
        link = {"agent_id": agent.id, "agent_name": agent.name, "policy": agent.policy}
        child = Run(
            workspace_id=parent.workspace_id,
            agent_id=agent.id,
            status=RunStatus.QUEUED.value,
            trigger=RunTrigger.DELEGATION.value,
            input=input,
            depth=parent.depth + 1,
            parent_run_id=parent.id,
            root_run_id=self.root.id,
            parent_step_id=parent_step_id,
            delegation_task=task,
            policy_chain=[*parent.policy_chain, link],
            attempt=0,
            abandoned_claims=0,
            wake_count=1,
            turns=0,
            last_event_seq=0,
            created_at=self.now,
            updated_at=self.now,
            queued_at=self.now,
        )
        self.session.add(child)
        await self.session.flush()
        self._runs[child.id] = child
        self.emit(child, EventType.RUN_CREATED, status=child.status,
                  payload={"agentId": agent.id, "agent": agent.name, "trigger": child.trigger, "depth": child.depth,
                           "parentStepId": parent_step_id, "task": task})  # fmt: skip
        self.wakeups.append(WakeUp(child.id, child.wake_count, self.root.id))
        return child
