"""Creating runs: every run starts here, whichever way it starts.

    startRun, a schedule's firing  -> a new tree: ``new_tree_tx`` / ``NewTree`` (tree.py)
    agents.delegate                -> a child in its parent's tree: ``TreeTx.create_run``

Both write the row that ``NewRun`` describes with one INSERT (``insert_run``), on the
database's clock (the tree transaction's ``now``), and announce it the same way
(``run_created``): a ``RUN_CREATED`` event on the tree's log and a wake-up enqueued after
commit. What a run carries from its creation on (its agent, trigger, input, policy chain
snapshot, its pinned agent version, who started it, its place in a tree) is decided by ``NewRun`` alone, so a new fact about every
run (its effective budget, say) is one field there and
one column in ``columns``.

A child can only be created while its parent is RUNNING under the delegating worker's fence:
the whole tree is locked by its root row, so a parent (or any ancestor) cancelled at the same
moment either commits first, and the delegation is refused by the fence, or commits after,
and its cascade ends the new child too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Agent, Run
from app.domain.actors import Actor, ActorKind
from app.domain.budgets import CALLER, limits_json, own_limits
from app.domain.run_events import EventType
from app.domain.runs import RunStatus, RunTrigger
from app.services.transitions.outbox import WakeUp

if TYPE_CHECKING:
    from app.services.transitions.outbox import Emit


@dataclass(frozen=True, slots=True)
class NewRun:
    """What a run is created with."""

    agent: Agent  # of the workspace the run belongs to
    trigger: RunTrigger
    input: Any = None
    schedule_id: int | None = None  # SCHEDULE: the schedule that fired it
    # DELEGATION: the parent (locked and fenced by the caller), its step and the task.
    parent: Run | None = None
    parent_step_id: int | None = None
    task: str | None = None
    # What the caller tightens the agent's budget with (startRun(budget:), a schedule's).
    budget: Mapping[str, float] | None = None
    budget_by: str = CALLER
    # Who started it (a token, the CLI); a child is started by its parent run, a schedule's
    # run by its schedule, whatever is given here.
    started_by: Actor | None = None

    @classmethod
    def child(cls, parent: Run, *, agent: Agent, task: str, input: Any, parent_step_id: int) -> NewRun:
        return cls(agent=agent, trigger=RunTrigger.DELEGATION, input=input, parent=parent,
                   parent_step_id=parent_step_id, task=task)  # fmt: skip

    def starter(self) -> Actor | None:
        if self.parent is not None:
            return Actor(ActorKind.RUN, self.parent.id)
        if self.schedule_id is not None:
            return Actor(ActorKind.SCHEDULE, self.schedule_id)
        return self.started_by

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def policy_chain(self) -> list[Any]:
        """The policies the run answers to, snapshotted now: every ancestor's, then its own
        agent's (a child can never loosen what is above it)."""
        link = {"agent_id": self.agent.id, "agent_name": self.agent.name, "policy": self.agent.policy}
        return [*(self.parent.policy_chain if self.parent is not None else []), link]

    def own_limits(self) -> dict[str, Any]:
        """The run's own budget limits, fixed now: its agent's, tightened by its caller
        (the deployment's defaults apply where neither says anything; docs/concepts/budgets.md)."""
        tighter = [(self.budget, self.budget_by)] if self.budget else []
        limits = own_limits(defaults={}, agent_name=self.agent.name, agent_budget=self.agent.budget or {},
                            tighter=tighter)  # fmt: skip
        return limits_json(limits)

    def deadline(self, now: datetime, limits: dict[str, Any]) -> datetime | None:
        """When the run's wall clock runs out: its own ``maxWallS`` from now, or its
        parent's deadline if that comes first (docs/concepts/budgets.md)."""
        wall = limits.get("maxWallS")
        own = None if wall is None else now + timedelta(seconds=float(wall["limit"]))
        inherited = None if self.parent is None else self.parent.deadline_at
        return min((d for d in (own, inherited) if d is not None), default=None)

    def columns(self, *, now: datetime, root_id: int | None) -> dict[str, Any]:
        """The new row: QUEUED, woken once (its first job), no attempt yet. ``root_id`` None:
        a root, which becomes its own root once it has an id (``NewTree``)."""
        parent = self.parent
        limits = self.own_limits()
        return {
            "workspace_id": self.agent.workspace_id,
            "agent_id": self.agent.id,
            # Pinned: the version current now is the one every turn of the run uses.
            "agent_version": self.agent.version,
            "started_by": None if (starter := self.starter()) is None else starter.to_json(),
            "status": RunStatus.QUEUED.value,
            "trigger": self.trigger.value,
            "input": self.input,
            "depth": self.depth,
            "parent_run_id": None if parent is None else parent.id,
            "root_run_id": root_id,
            "parent_step_id": self.parent_step_id,
            "delegation_task": self.task,
            "schedule_id": self.schedule_id,
            "policy_chain": self.policy_chain(),
            "budget": limits,
            "deadline_at": self.deadline(now, limits),
            "usage": {},
            "tree_usage": {"runs": 1},
            "attempt": 0,
            "abandoned_claims": 0,
            "wake_count": 1,
            "turns": 0,
            "last_event_seq": 0,
            "created_at": now,
            "updated_at": now,
            "queued_at": now,
        }

    def created_payload(self) -> dict[str, Any]:
        """The ``RUN_CREATED`` event's payload: enough for a live view to draw the run."""
        payload: dict[str, Any] = {"agentId": self.agent.id, "agent": self.agent.name,
                                   "trigger": self.trigger.value, "depth": self.depth}  # fmt: skip
        if self.parent is not None:
            payload |= {"parentStepId": self.parent_step_id, "task": self.task}
        return payload


async def insert_run(session: AsyncSession, new: NewRun, *, now: datetime, root_id: int | None) -> Run:
    """The one INSERT of every new run; returns the row detached (like ``add_steps``'s), so
    a later lock in the same transaction reads the row itself (``TreeTx.run``).

    A Core statement that fails leaves the transaction going (statements are atomic on both
    databases), unlike a failed ORM flush: so the delegating tool needs no savepoint."""
    row = new.columns(now=now, root_id=root_id)
    done = await session.execute(_INSERT_RUN, row)
    # A Core INSERT returns a CursorResult; AsyncSession.execute is typed as the wider Result.
    return Run(id=done.inserted_primary_key[0], **row)  # type: ignore[attr-defined]


class RunCreation:
    """Mixed into ``TreeTx``; relies on its session, clock, root and event log."""

    session: AsyncSession
    now: datetime
    root: Run
    wakeups: list[WakeUp]

    if TYPE_CHECKING:  # provided by TreeTx; declared for type checkers only
        emit: Emit

        async def charge(
            self, run: Run, own: Mapping[str, float], tree: Mapping[str, float] | None = None
        ) -> None: ...

    async def create_run(self, new: NewRun) -> Run:
        """A QUEUED child in this tree (``new.parent`` locked and fenced by the caller),
        enqueued after commit. One INSERT and nothing else touches the database, so a failed
        INSERT leaves nothing behind."""
        assert new.parent is not None, "a root starts a tree of its own: NewTree.create_run"
        run = await insert_run(self.session, new, now=self.now, root_id=self.root.id)
        # A child counts against its parent's maxChildren and every ancestor's maxTreeRuns
        # (admitted under the root lock before this: RunWrites._add_calls).
        await self.charge(new.parent, {"children": 1}, {"runs": 1})
        self.run_created(run, new)
        return run

    def run_created(self, run: Run, new: NewRun) -> None:
        """Announce a new run: its ``RUN_CREATED`` event, and its first job after commit."""
        self.emit(run, EventType.RUN_CREATED, status=run.status, payload=new.created_payload())
        self.wakeups.append(WakeUp(run.id, run.wake_count, self.root.id))


# Built once, compiled once (a tree's hot path).
_INSERT_RUN = insert(Run.__table__)
