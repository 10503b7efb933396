"""Run trees written straight to the database: for tests of the chokepoint over trees, and
for GraphQL tests that read runs, steps and approvals (the run loop is not under test there).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.clock import utcnow
from app.db import orm
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


class Rows:
    """Direct inserts of runs, steps and approvals for one workspace."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], workspace_id: int) -> None:
        self.sessionmaker = sessionmaker
        self.workspace_id = workspace_id
        self._clock = datetime(2030, 1, 1, tzinfo=UTC)

    def _now(self) -> datetime:
        self._clock += timedelta(seconds=1)
        return self._clock

    async def run(
        self,
        agent_id: int,
        *,
        parent: orm.Run | None = None,
        status: str = "SUCCEEDED",
        trigger: str | None = None,
        task: str | None = None,
        parent_step_id: int | None = None,
        injected: list[int] | None = None,
    ) -> orm.Run:
        now = self._now()
        async with self.sessionmaker() as session, session.begin():
            row = orm.Run(
                workspace_id=self.workspace_id,
                agent_id=agent_id,
                status=status,
                trigger=trigger or ("DELEGATION" if parent else "API"),
                input={"n": 1},
                result={"ok": True} if status == "SUCCEEDED" else None,
                parent_run_id=None if parent is None else parent.id,
                root_run_id=None if parent is None else (parent.root_run_id or parent.id),
                depth=0 if parent is None else parent.depth + 1,
                delegation_task=task,
                parent_step_id=parent_step_id,
                policy_chain=[],
                injected_memory_ids=injected,
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            await session.flush()
            if parent is None:
                row.root_run_id = row.id
        return row

    async def step(
        self, run: orm.Run, *, seq: int, tool: str | None = "memory.search", **extra: Any
    ) -> orm.RunStep:
        now = self._now()
        async with self.sessionmaker() as session, session.begin():
            row = orm.RunStep(
                workspace_id=self.workspace_id,
                run_id=run.id,
                seq=seq,
                turn=seq,
                tool=tool,
                arguments={"query": "x"},
                status=extra.pop("status", "SUCCEEDED"),
                decision=extra.pop("decision", "ALLOW"),
                decision_reason="agent 'x' risk default for READ -> ALLOW",
                result={"memories": []},
                created_at=now,
                started_at=now,
                finished_at=now,
                **extra,
            )
            session.add(row)
        return row

    async def approval(self, run: orm.Run, step: orm.RunStep, *, status: str = "PENDING") -> orm.Approval:
        async with self.sessionmaker() as session, session.begin():
            row = orm.Approval(
                workspace_id=self.workspace_id,
                run_id=run.id,
                root_run_id=run.root_run_id or run.id,
                step_id=step.id,
                tool=step.tool or "webhook.post",
                arguments={"url": "http://127.0.0.1:9/hook"},
                status=status,
                requested_at=self._now(),
            )
            session.add(row)
            await session.flush()
            step_row = await session.get_one(orm.RunStep, step.id)
            step_row.approval_id = row.id
        return row


async def overwrite_agent_config(sessionmaker: Any, agent_id: int, **columns: Any) -> None:
    """Rewrite an agent's stored configuration around the API (an old row, one written by a
    process with other plugins or settings): the agent row and its current version alike, so
    the runs pinned to that version run with it."""
    async with sessionmaker() as session, session.begin():
        agent = await session.get_one(Agent, agent_id)
        version = await session.scalar(
            select(orm.AgentVersion).where(
                orm.AgentVersion.agent_id == agent_id, orm.AgentVersion.version == agent.version
            )
        )
        assert version is not None
        for name, value in columns.items():
            setattr(agent, name, value)
        version.config = {**version.config, **columns}
