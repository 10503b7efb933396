"""THE chokepoint for run state: every status change of a run, step or approval happens
inside a ``TreeTx``.

A ``TreeTx`` is one database transaction over one run tree. It locks the tree's root row
first (``SELECT ... FOR UPDATE``; on SQLite the whole database is locked by ``BEGIN
IMMEDIATE``), then the rows it changes. Because every writer of a tree takes the root lock
first, there is one lock order (no deadlocks) and event ``seq`` numbers, allocated from the
root row, are handed out in commit order with no gaps (DESIGN §6).

Nothing leaves the process before commit: events are published and jobs enqueued only after
the transaction committed, so a subscriber never sees a change that was rolled back and a
worker never picks up a run whose state is not yet visible.

Workers write with a *fence*: the attempt number they claimed. Once the sweeper handed the
run to another worker, or an operator cancelled it, the row no longer carries that attempt
(or is no longer RUNNING) and the late write is refused with ``LeaseLost``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.orm import Approval, Run, RunEvent, RunStep
from app.domain.errors import NotFound
from app.domain.events import EventType
from app.domain.runs import (
    TERMINAL_RUN,
    TERMINAL_STEP,
    WAITING_RUN,
    ApprovalStatus,
    RunStatus,
    StepStatus,
    check_run_transition,
    check_step_transition,
    waiting_status_for,
)
from app.services.runtime import Runtime

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The worker no longer owns the run (cancelled, or claimed by another worker)."""


class TreeTx:
    def __init__(self, session: AsyncSession, root: Run, now: datetime) -> None:
        self.session = session
        self.root = root
        self.now = now
        # Events are numbered here and written in one multi-row INSERT just before commit.
        self.events: list[RunEvent] = []
        self._seq = root.last_event_seq
        # (run id, wake count, root id) to enqueue after commit.
        self.wakeups: list[tuple[int, int, int]] = []
        self._runs: dict[int, Run] = {root.id: root}

    # -- locking -------------------------------------------------------------------------

    async def run(self, run_id: int) -> Run:
        """The run, locked for this transaction. It must belong to this tree."""
        if run_id in self._runs:
            return self._runs[run_id]
        run = await self.session.scalar(
            select(Run).where(Run.id == run_id, Run.root_run_id == self.root.id).with_for_update()
        )
        if run is None:
            raise NotFound(f"run {run_id} is not part of tree {self.root.id}")
        self._runs[run_id] = run
        return run

    async def fenced_run(self, run_id: int, attempt: int) -> Run:
        run = await self.run(run_id)
        if run.status != RunStatus.RUNNING or run.attempt != attempt:
            raise LeaseLost(f"run {run_id} is {run.status} at attempt {run.attempt}, not ours ({attempt})")
        return run

    async def steps(self, run_id: int) -> list[RunStep]:
        result = await self.session.scalars(
            select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq).with_for_update()
        )
        return list(result)

    # -- events --------------------------------------------------------------------------

    def emit(
        self,
        run: Run,
        type: EventType,
        *,
        status: str | None = None,
        step_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> RunEvent:
        self._seq += 1
        event = RunEvent(
            workspace_id=run.workspace_id,
            root_run_id=self.root.id,
            seq=self._seq,
            run_id=run.id,
            parent_run_id=run.parent_run_id,
            type=type.value,
            status=status,
            step_id=step_id,
            payload=payload,
            at=self.now,
        )
        self.events.append(event)
        return event

    async def write_events(self) -> None:
        """Append this transaction's events (called once, right before commit)."""
        if not self.events:
            return
        self.root.last_event_seq = self._seq
        # Core executemany on the table (not the ORM bulk path, which splits the batch by
        # which columns are null): one multi-row INSERT.
        await self.session.execute(insert(RunEvent.__table__), [_event_row(e) for e in self.events])

    # -- runs ----------------------------------------------------------------------------

    async def set_run_status(
        self,
        run: Run,
        to: RunStatus,
        *,
        result: Any = None,
        error: str | None = None,
        reason: str | None = None,
        quiet: bool = False,
    ) -> None:
        """Move a (locked) run to ``to``, with everything that goes with it.

        Terminal: open steps are cancelled and pending approvals closed (``quiet``: the
        caller knows there are none, e.g. the worker finishing after its last step); a
        child's outcome is handed to its parent's delegation step. QUEUED: a fresh wake-up
        is enqueued.
        """
        current = RunStatus(run.status)
        check_run_transition(current, to)
        run.status = to.value
        run.updated_at = self.now
        payload: dict[str, Any] = {"from": current.value, "to": to.value}
        if to is RunStatus.RUNNING:
            run.started_at = run.started_at or self.now
        elif to is RunStatus.QUEUED:
            run.wake_count += 1
            run.queued_at = self.now
            run.lease_owner = None
            run.lease_expires_at = None
            self.wakeups.append((run.id, run.wake_count, self.root.id))
        elif to in TERMINAL_RUN:
            run.finished_at = self.now
            run.lease_owner = None
            run.lease_expires_at = None
            if to is RunStatus.SUCCEEDED:
                run.result = result
            if error is not None:
                run.error = error
                payload["error"] = error
            if to is RunStatus.CANCELLED:
                run.cancel_reason = reason
                payload["reason"] = reason
        if to in (RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CHILD, RunStatus.QUEUED):
            run.lease_owner = None
            run.lease_expires_at = None
        if reason is not None and "reason" not in payload:
            payload["reason"] = reason
        self.emit(run, EventType.RUN_STATUS_CHANGED, status=to.value, payload=payload)
        if to in TERMINAL_RUN:
            if not quiet:
                await self._close_open_work(run, to, reason or error)
            if run.parent_step_id is not None:
                await self._deliver_to_parent(run)

    def reissue_job(self, run: Run) -> None:
        """A fresh wake-up (job id) for a QUEUED run whose job is stuck; no state change."""
        run.wake_count += 1
        run.queued_at = self.now
        run.updated_at = self.now
        self.wakeups.append((run.id, run.wake_count, self.root.id))

    async def _close_open_work(self, run: Run, to: RunStatus, why: str | None) -> None:
        for step in await self.steps(run.id):
            if StepStatus(step.status) in TERMINAL_STEP:
                continue
            await self.finish_step(
                run,
                step,
                StepStatus.CANCELLED,
                result={
                    "error": {"code": "RUN_ENDED", "message": f"run {to.value.lower()}: {why or ''}".strip()}
                },
            )
        approvals = await self.session.scalars(
            select(Approval)
            .where(Approval.run_id == run.id, Approval.status == ApprovalStatus.PENDING.value)
            .with_for_update()
        )
        for approval in approvals:
            # Closed, so it can no longer be decided; the reason says why it was not approved.
            approval.status = ApprovalStatus.REJECTED.value
            approval.reason = f"run {to.value.lower()}" + (f": {why}" if why else "")
            approval.decided_at = self.now
            self.emit(
                run,
                EventType.APPROVAL_DECIDED,
                step_id=approval.step_id,
                payload={"approvalId": approval.id, "status": approval.status, "reason": approval.reason},
            )

    async def _deliver_to_parent(self, child: Run) -> None:
        """A delegated child ended: its outcome is the result of the parent's tool call."""
        assert child.parent_run_id is not None and child.parent_step_id is not None
        parent = await self.run(child.parent_run_id)
        step = await self.session.scalar(
            select(RunStep).where(RunStep.id == child.parent_step_id).with_for_update()
        )
        if step is None or StepStatus(step.status) is not StepStatus.WAITING_CHILD:
            return  # the parent already moved on (e.g. it was cancelled first)
        outcome = {"status": child.status, "result": child.result, "error": child.error, "runId": child.id}
        await self.finish_step(parent, step, StepStatus.SUCCEEDED, result=outcome)
        await self.wake_if_unblocked(parent)

    async def wake_if_unblocked(self, run: Run) -> None:
        """Requeue a parked run once none of its steps waits any more."""
        status = RunStatus(run.status)
        if status not in WAITING_RUN:
            return

        # Woken when what it parked for is resolved; if it must wait for something else
        # (a child, after its approval), the worker re-parks it after running what it can.
        still = waiting_status_for([StepStatus(s.status) for s in await self.steps(run.id)])
        if still is not status:
            await self.set_run_status(run, RunStatus.QUEUED)

    # -- steps ---------------------------------------------------------------------------

    def step_row(
        self,
        run: Run,
        *,
        seq: int,
        turn: int,
        tool: str | None,
        arguments: Any,
        status: StepStatus,
        decision: str | None = None,
        decision_reason: str | None = None,
        result: Any = None,
        error: str | None = None,
        attempt: int | None = None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
    ) -> dict[str, Any]:
        """The column values of a new step (see ``add_steps``)."""
        started = status is not StepStatus.PENDING
        finished = status in TERMINAL_STEP
        return {
            "workspace_id": run.workspace_id,
            "run_id": run.id,
            "seq": seq,
            "turn": turn,
            "tool": tool,
            "arguments": arguments,
            "status": status.value,
            "decision": decision,
            "decision_reason": decision_reason,
            "result": result,
            "error": error,
            "executed_attempt": attempt if status is StepStatus.RUNNING or started_at else None,
            "created_at": self.now,
            "started_at": started_at or (self.now if started else None),
            "finished_at": finished_at or (self.now if finished else None),
        }

    async def add_step(self, run: Run, **columns: Any) -> RunStep:
        [step] = await self.add_steps([self.step_row(run, **columns)])
        return step

    async def add_steps(self, rows: list[dict[str, Any]]) -> list[RunStep]:
        """Insert steps without ORM flushes and return them detached, with their ids: one
        multi-row INSERT ... RETURNING where the database has it (MariaDB, SQLite), one
        INSERT per row elsewhere (MySQL)."""
        if not rows:
            return []
        if len(rows) > 1 and self.session.get_bind().dialect.insert_returning:
            ids = (await self.session.execute(_INSERT_STEPS_RETURNING, rows)).scalars().all()
        else:
            ids = [(await self.session.execute(_INSERT_STEP, row)).inserted_primary_key[0] for row in rows]
        return [RunStep(id=step_id, **row) for step_id, row in zip(ids, rows, strict=True)]

    def step_finished(self, run: Run, step: RunStep, *, final: bool = False) -> None:
        payload: dict[str, Any] = {"seq": step.seq, "tool": step.tool, "status": step.status}
        if final:
            payload["final"] = True
        self.emit(run, EventType.STEP_FINISHED, status=step.status, step_id=step.id, payload=payload)

    def step_started(self, run: Run, step: RunStep) -> None:
        self.emit(
            run,
            EventType.STEP_STARTED,
            status=step.status,
            step_id=step.id,
            payload={"seq": step.seq, "tool": step.tool, "decision": step.decision},
        )

    async def finish_running_step(
        self, run: Run, step: RunStep, to: StepStatus, *, result: Any = None, error: str | None = None
    ) -> bool:
        """Record the result of a step the caller is executing, in one conditional UPDATE
        (``step`` is the caller's detached copy; it is updated to match). False when the step
        is not RUNNING any more (its result was recorded already)."""
        check_step_transition(StepStatus.RUNNING, to)
        done = await self.session.execute(
            _FINISH_RUNNING_STEP,
            {"b_id": step.id, "b_status": to.value, "b_result": result, "b_error": error, "b_at": self.now},
        )
        if not done.rowcount:  # type: ignore[attr-defined]
            return False
        step.status, step.result, step.error, step.finished_at = to.value, result, error, self.now
        self.step_finished(run, step)
        return True

    async def finish_step(
        self, run: Run, step: RunStep, to: StepStatus, *, result: Any = None, error: str | None = None
    ) -> None:
        check_step_transition(StepStatus(step.status), to)
        step.status = to.value
        step.result = result
        step.error = error
        step.finished_at = self.now
        step.started_at = step.started_at or self.now
        self.step_finished(run, step)


@asynccontextmanager
async def tree_tx(rt: Runtime, run_id: int, *, root_id: int | None = None) -> AsyncIterator[TreeTx]:
    """One write transaction over the tree that ``run_id`` belongs to (callers that already
    know the root pass it: a run's root never changes).

    Commits on normal exit, then publishes the events and enqueues the wake-ups.
    """
    now = utcnow()
    async with rt.sessionmaker() as session:
        async with session.begin():
            if root_id is None:
                root_id = await session.scalar(select(Run.root_run_id).where(Run.id == run_id))
            if root_id is None:
                raise NotFound(f"run {run_id} not found")
            root = await session.scalar(select(Run).where(Run.id == root_id).with_for_update())
            assert root is not None  # a root row is never deleted while its tree exists
            tx = TreeTx(session, root, now)
            yield tx
            await tx.write_events()
        await after_commit(rt, tx.events, tx.wakeups)


async def after_commit(rt: Runtime, events: list[RunEvent], wakeups: list[tuple[int, int, int]]) -> None:
    """Publish and enqueue. Redis failures are logged, never raised: the database already
    holds the truth, subscribers re-read it on gaps and the sweeper re-enqueues lost jobs."""
    if events:
        from app.events.publish import publish_events

        await publish_events(rt.redis, rt.settings.redis_prefix, events)
    for run_id, wake, root_id in wakeups:
        await enqueue_run(rt, run_id, wake, root_id)


# Built once: statements with bound parameters are compiled once and cached, where values
# inlined with .values(...) would be traversed for a cache key on every execution.
_steps = RunStep.__table__
_INSERT_STEP = insert(_steps)
_INSERT_STEPS_RETURNING = insert(_steps).returning(_steps.c.id, sort_by_parameter_order=True)
_FINISH_RUNNING_STEP = (
    update(_steps)
    .where(_steps.c.id == bindparam("b_id"), _steps.c.status == StepStatus.RUNNING.value)
    .values(
        status=bindparam("b_status"),
        result=bindparam("b_result"),
        error=bindparam("b_error"),
        finished_at=bindparam("b_at"),
    )
)


def _event_row(event: RunEvent) -> dict[str, Any]:
    return {c: getattr(event, c) for c in _EVENT_COLUMNS}


_EVENT_COLUMNS = (
    "workspace_id",
    "root_run_id",
    "seq",
    "run_id",
    "parent_run_id",
    "type",
    "status",
    "step_id",
    "payload",
    "at",
)


async def enqueue_run(rt: Runtime, run_id: int, wake: int, root_id: int | None = None) -> None:
    from app.keys import queue_name, run_job_id

    try:
        await rt.redis.enqueue_job(
            "execute_run",
            run_id,
            wake,
            root_id,
            _job_id=run_job_id(rt.settings.redis_prefix, run_id, wake),
            _queue_name=queue_name(rt.settings.redis_prefix),
        )
    except Exception:
        log.warning("could not enqueue run %s (wake %s); the sweeper will retry", run_id, wake, exc_info=True)
