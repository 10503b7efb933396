"""What a live view needs to draw a run tree from its event stream alone (docs/graphql/guide.md).

Every ``runTree`` event carries the run's agent name, and a step event its tool, policy
decision and approval id, so a client never has to query the runs and steps it watches.

The publishers put these in the events' payloads (``RUN_CREATED`` names the agent; step and
approval events name the tool, the decision and the approval), so one subscription learns
them as the events pass and remembers them per run and per step. Only what it has not seen
(a subscriber that starts with ``afterSeq`` in the middle of a tree, or an event written
before these fields were published) is read from the database, once per run or step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import orm
from app.domain.run_events import EventType
from app.events.hub import Subscription
from app.events.publish import EventMessage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StepLabel:
    tool: str | None = None
    decision: str | None = None
    approval_id: int | None = None


@dataclass(frozen=True, slots=True)
class EventLabels:
    agent_name: str | None
    step: StepLabel | None


class TreeLabels:
    """Agent names and step labels of one tree, for one subscription (not shared: a cache
    that lives as long as the subscription and holds only its tree)."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        workspace_id: int,
        shared: Subscription | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._workspace_id = workspace_id
        # Misses are read once for all of the process's subscribers to the tree (a thousand
        # joining mid-run would otherwise each read the same run at the same moment).
        self._shared = shared
        self._agents: dict[int, str | None] = {}
        self._steps: dict[int, StepLabel] = {}

    async def label(self, message: EventMessage) -> EventLabels:
        payload: dict[str, Any] = message.payload if isinstance(message.payload, dict) else {}
        if message.type == EventType.RUN_CREATED.value and isinstance(payload.get("agent"), str):
            self._agents[message.run_id] = payload["agent"]
        if message.run_id not in self._agents:
            self._agents[message.run_id] = await self._read(self._load_agent_name, "agent", message.run_id)
        step = None
        if message.step_id is not None:
            step = await self._step(message.step_id, payload)
        return EventLabels(agent_name=self._agents[message.run_id], step=step)

    async def _step(self, step_id: int, payload: dict[str, Any]) -> StepLabel:
        known = self._steps.get(step_id)
        # A final answer is a step without a tool (``"tool": null``): nothing to look up.
        if known is None and "tool" not in payload:
            known = await self._read(self._load_step, "step", step_id)
        label = known or StepLabel()
        # A step's tool and decision never change; its approval id is set once, when the
        # approval is requested. So whatever an event adds only fills gaps.
        label = replace(
            label,
            tool=label.tool or _str(payload.get("tool")),
            decision=label.decision or _str(payload.get("decision")),
            approval_id=label.approval_id or _int(payload.get("approvalId")),
        )
        self._steps[step_id] = label
        return label

    async def _read(self, load: Callable[[int], Awaitable[T]], kind: str, pk: int) -> T:
        if self._shared is None:
            return await load(pk)
        return await self._shared.shared_read(lambda: load(pk), kind, pk)

    async def _load_agent_name(self, run_id: int) -> str | None:
        async with self._sessionmaker() as session:
            row = (
                await session.execute(
                    select(orm.Run.policy_chain, orm.Agent.name)
                    .join(orm.Agent, orm.Agent.id == orm.Run.agent_id)
                    .where(orm.Run.id == run_id, orm.Run.workspace_id == self._workspace_id)
                )
            ).first()
        if row is None:
            return None
        chain, current_name = row
        # The name the run was created under (the last link of its policy chain), like the
        # RUN_CREATED payload says; the agent may have been renamed since.
        if isinstance(chain, list) and chain and isinstance(chain[-1], dict):
            name = chain[-1].get("agent_name")
            if isinstance(name, str):
                return name
        return str(current_name)

    async def _load_step(self, step_id: int) -> StepLabel | None:
        async with self._sessionmaker() as session:
            row = (
                await session.execute(
                    select(orm.RunStep.tool, orm.RunStep.decision, orm.RunStep.approval_id).where(
                        orm.RunStep.id == step_id, orm.RunStep.workspace_id == self._workspace_id
                    )
                )
            ).first()
        if row is None:
            return None
        return StepLabel(tool=row.tool, decision=row.decision, approval_id=row.approval_id)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
