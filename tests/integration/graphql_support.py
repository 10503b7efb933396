"""Helpers for the GraphQL tests: create things through the API like a client would, and
insert run trees straight into the database (the run loop is not under test here)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import orm
from app.graphql.ids import parse_global_id, to_global_id

SCRIPTED = {"provider": "scripted", "steps": [{"final": "done"}]}

CREATE_AGENT = """
mutation($input: CreateAgentInput!) {
  createAgent(input: $input) {
    id name description instructions status model tools
    policy { default rules { tool decision } }
    memoryBudget { maxItems maxChars }
    createdAt updatedAt
  }
}
"""

CREATE_MEMORY = """
mutation($agentId: ID!, $input: MemoryInput!) {
  createMemory(agentId: $agentId, input: $input) { id key value tags importance sourceRun { id } }
}
"""


def unique(prefix: str = "a") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pk(global_id: str) -> int:
    parsed = parse_global_id(global_id)
    assert parsed is not None, global_id
    return parsed[1]


async def create_agent(gql: Any, token: str, **fields: Any) -> dict[str, Any]:
    agent_input = {"name": unique("agent"), "model": SCRIPTED, **fields}
    data = await gql.ok(CREATE_AGENT, {"input": agent_input}, token=token)
    agent: dict[str, Any] = data["createAgent"]
    return agent


async def create_memory(gql: Any, token: str, agent_id: str, **fields: Any) -> dict[str, Any]:
    memory_input = {"key": unique("key"), "value": "some value", **fields}
    data = await gql.ok(CREATE_MEMORY, {"agentId": agent_id, "input": memory_input}, token=token)
    memory: dict[str, Any] = data["createMemory"]
    return memory


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


def gid(type_name: str, row_id: int) -> str:
    return to_global_id(type_name, row_id)
