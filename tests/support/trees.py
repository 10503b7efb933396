"""Run trees written straight to the database, for tests of the chokepoint over trees."""

from __future__ import annotations

from typing import Any

from app.clock import utcnow
from app.db.orm import Agent, Run, RunStep


async def waiting_parent_with_child(sessionmaker: Any, agent_id: int) -> tuple[int, int, int]:
    """A parent WAITING_CHILD on step 1, whose child run is QUEUED. Returns ids."""
    now = utcnow()
    async with sessionmaker() as session, session.begin():
        agent = await session.get_one(Agent, agent_id)
        link = {"agent_id": agent.id, "agent_name": agent.name, "policy": agent.policy}
        common = {
            "workspace_id": agent.workspace_id,
            "agent_id": agent.id,
            "created_at": now,
            "updated_at": now,
        }
        parent = Run(**common, status="WAITING_CHILD", trigger="API", depth=0, policy_chain=[link],
                     injected_memory_ids=[], turns=1, attempt=1, wake_count=1, last_event_seq=0, started_at=now)  # fmt: skip
        session.add(parent)
        await session.flush()
        parent.root_run_id = parent.id
        step = RunStep(workspace_id=agent.workspace_id, run_id=parent.id, seq=1, turn=0, tool="agents.delegate",
                       arguments={"agent": agent.name, "task": "t"}, status="WAITING_CHILD", created_at=now,
                       started_at=now)  # fmt: skip
        session.add(step)
        await session.flush()
        child = Run(**common, status="QUEUED", trigger="DELEGATION", depth=1, parent_run_id=parent.id,
                    root_run_id=parent.id, parent_step_id=step.id, delegation_task="t", policy_chain=[link, link],
                    attempt=0, wake_count=1, turns=0, last_event_seq=0, queued_at=now)  # fmt: skip
        session.add(child)
        await session.flush()
        step.child_run_id = child.id
        return parent.id, step.id, child.id
