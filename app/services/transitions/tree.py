"""The tree transaction: locking, events, run states, and what happens after commit.

A ``TreeTx`` is one database transaction over one run tree. It locks the tree's root row
first (``SELECT ... FOR UPDATE``; on SQLite the whole database is locked by ``BEGIN
IMMEDIATE``), then the rows it changes. Because every writer of a tree takes the root lock
first, there is one lock order (no deadlocks) and event ``seq`` numbers, allocated from the
root row, are handed out in commit order with no gaps (docs/architecture.md).

``now`` is the database server's clock, read with the root lock: leases are set and
compared on one clock whatever host a worker runs on (``app.db.clock``).

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
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, bindparam, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from app.db.clock import db_now, now_sql
from app.db.orm import Agent, Run, RunEvent, RunStep
from app.domain.budgets import concurrency_limit
from app.domain.errors import NotFound
from app.domain.global_ids import to_global_id
from app.domain.run_events import EventType
from app.domain.runs import (
    CANCELLABLE_RUN,
    OPEN_STEP,
    TERMINAL_RUN,
    WAITING_RUN,
    RunStatus,
    StepStatus,
    check_run_transition,
    waiting_status_for,
)
from app.events.publish import EventMessage
from app.services.approval_webhooks import deliver_requested
from app.services.runtime import Runtime
from app.services.transitions.creation import NewRun, RunCreation, insert_run
from app.services.transitions.holds import release_quota
from app.services.transitions.outbox import WakeUp, after_commit
from app.services.transitions.steps import StepWrites
from app.services.transitions.usage import UsageWrites

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The worker no longer owns the run (cancelled, or claimed by another worker)."""


class TreeTx(StepWrites, RunCreation, UsageWrites):
    def __init__(
        self, session: AsyncSession, root: Run, now: datetime, *, without_start: bool = False
    ) -> None:
        self.session = session
        self.root = root
        self.now = now
        # The runs it locks leave out ``START_COLUMNS`` (``tree_tx``'s ``without_start``).
        self._lock_run = _LOCK_RUN_WITHOUT_START if without_start else _LOCK_RUN
        # Events are numbered here and written in one multi-row INSERT just before commit;
        # after commit the same objects are published (plain messages, not ORM rows: a run
        # emits a dozen, and an ORM object costs its instrumentation for nothing here).
        self.events: list[EventMessage] = []
        self._seq = root.last_event_seq
        self.wakeups: list[WakeUp] = []
        self._runs: dict[int, Run] = {root.id: root}
        # Runs this transaction is ending. A child that ends inside the cascade still hands
        # its outcome to its parent's step, but wakes nobody in this set: no run is ever
        # seen resuming during its own end (docs/concepts/runs.md).
        self._ending: set[int] = set()
        self._awaiting = []
        self.notify_approvals = []
        # Agents with a concurrency quota whose quota-held runs are released, as far as they
        # fit, after commit (docs/concepts/budgets.md#quotas): one of their runs stopped
        # RUNNING here, or a claim here held one of their runs for a slot (``hold_for_quota``).
        self.quota_release: set[int] = set()

    # -- locking -------------------------------------------------------------------------

    async def run(self, run_id: int) -> Run:
        """The run, locked for this transaction. It must belong to this tree."""
        if run_id in self._runs:
            return self._runs[run_id]
        run = await self.session.scalar(self._lock_run, {"b_run": run_id, "b_root": self.root.id})
        if run is None:
            raise NotFound(f"run {run_id} is not part of tree {self.root.id}")
        self._runs[run_id] = run
        return run

    async def fenced_run(self, run_id: int, attempt: int, *, progress: bool = True) -> Run:
        """The run, if the worker that claimed ``attempt`` still owns it. A fenced write is
        progress (unless the worker is giving the run up), so the count of abandoned claims
        starts over."""
        run = await self.run(run_id)
        if run.status != RunStatus.RUNNING or run.attempt != attempt:
            raise LeaseLost(f"run {run_id} is {run.status} at attempt {run.attempt}, not ours ({attempt})")
        if progress and run.abandoned_claims:
            run.abandoned_claims = 0
        return run

    async def open_steps(self, run_id: int) -> list[RunStep]:
        """The run's steps that are not finished, locked, in order: what is to run, runs or
        waits, all that decides whether the run waits and what its end closes. A finished
        step never changes, and a wide run has many, each with its result: a fan-out's child
        that ends would otherwise read every sibling's outcome again (docs/performance.md)."""
        await self._settle_awaits()
        steps = await self.session.scalars(LOCK_OPEN_STEPS, {"b_run": run_id})
        # A step this transaction finished is still open in the database until the flush.
        return [step for step in steps if step.status in OPEN_STEP]

    async def _settle_awaits(self) -> None:
        if not await self.settle_awaits():
            raise LeaseLost("a step that started a child run is no longer RUNNING")

    # -- events --------------------------------------------------------------------------

    def emit(
        self,
        run: Run,
        type: EventType,
        *,
        status: str | None = None,
        step_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> EventMessage:
        self._seq += 1
        event = EventMessage(
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

    def event_mark(self) -> tuple[int, int, int]:
        """Where the event log and wake-ups stand, to undo what a rolled-back savepoint added."""
        return (len(self.events), self._seq, len(self.wakeups))

    def drop_events_after(self, mark: tuple[int, int, int]) -> None:
        events, seq, wakeups = mark
        del self.events[events:]
        del self.wakeups[wakeups:]
        self._seq = seq

    async def write_events(self) -> None:
        """Append this transaction's events (called once, right before commit)."""
        await self._settle_awaits()
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
        error_code: str | None = None,
    ) -> None:
        """Move a (locked) run to ``to``, with everything that goes with it.

        Terminal: the run's live descendants end first (CANCELLED, the reason naming this
        end), then its open steps are cancelled and pending approvals closed (``quiet``: the
        caller knows no step is open — the worker finishing after its last step); a child's
        outcome is handed to its parent's delegation step. QUEUED: a fresh wake-up is
        enqueued.
        """
        current = RunStatus(run.status)
        check_run_transition(current, to)
        if to in TERMINAL_RUN:
            self._ending.add(run.id)
            await self._end_children(run, to, reason if to is RunStatus.CANCELLED else None)
        run.status = to.value
        run.updated_at = self.now
        payload: dict[str, Any] = {"from": current.value, "to": to.value}
        if to is RunStatus.RUNNING:
            run.started_at = run.started_at or self.now
        elif to is RunStatus.QUEUED:
            run.wake_count += 1
            run.queued_at = self.now
            self.wakeups.append(WakeUp(run.id, run.wake_count, self.root.id))
        elif to in TERMINAL_RUN:
            run.finished_at = self.now
            if to is RunStatus.SUCCEEDED:
                run.result = result
            if error is not None:
                run.error = error
                payload["error"] = error
            if error_code is not None:
                run.error_code = error_code
                payload["errorCode"] = error_code
            if to is RunStatus.CANCELLED:
                run.cancel_reason = reason
                payload["reason"] = reason
        if to is not RunStatus.RUNNING:
            run.lease_owner = None
            run.lease_expires_at = None
            if current is RunStatus.RUNNING and concurrency_limit(run.budget) is not None:
                self.quota_release.add(run.agent_id)
        if reason is not None and "reason" not in payload:
            payload["reason"] = reason
        self.emit(run, EventType.RUN_STATUS_CHANGED, status=to.value, payload=payload)
        if error_code == EventType.BUDGET_EXCEEDED.value:
            # The run ran out (docs/concepts/budgets.md): said on its own, for live views.
            self.emit(run, EventType.BUDGET_EXCEEDED, payload={"ended": True, "message": error})
        if to in TERMINAL_RUN:
            if not quiet:
                await self.close_open_work(run, to, reason or error)
            if run.parent_step_id is not None:
                await self._deliver_to_parent(run)

    async def requeue_abandoned(self, run: Run, *, reason: str) -> None:
        """A claim was abandoned (its lease expired, or the worker broke off with an internal
        error): back to QUEUED, and it counts toward ``ENVERIF_MAX_ATTEMPTS``. Wake-ups after
        an approval or a child never count: only claims that made no progress do."""
        run.abandoned_claims += 1
        await self.set_run_status(run, RunStatus.QUEUED, reason=reason)

    async def hold(self, run: Run, *, reason: str) -> None:
        """RUNNING -> QUEUED, held (docs/concepts/holds.md): like any hand-back, except that
        no job is enqueued. A held run gets one when it is released (``release_held``)."""
        wakeups = len(self.wakeups)
        await self.set_run_status(run, RunStatus.QUEUED, reason=f"held: {reason}")
        del self.wakeups[wakeups:]
        run.held_reason = reason

    def reissue_job(self, run: Run) -> None:
        """A fresh wake-up (job id) for a QUEUED run whose job is stuck; no state change."""
        run.wake_count += 1
        run.queued_at = self.now
        run.updated_at = self.now
        self.wakeups.append(WakeUp(run.id, run.wake_count, self.root.id))

    async def _end_children(self, run: Run, to: RunStatus, cancel_reason: str | None) -> None:
        why = cancel_reason or f"ancestor run {run.id} {to.value.lower()}"
        children = await self.session.scalars(_LIVE_CHILDREN, {"b_parent": run.id})
        for child_id in list(children):
            child = await self.run(child_id)
            if RunStatus(child.status) in CANCELLABLE_RUN:
                await self.set_run_status(child, RunStatus.CANCELLED, reason=why)

    async def _deliver_to_parent(self, child: Run) -> None:
        """A delegated child ended: its outcome is the result of the parent's tool call."""
        assert child.parent_run_id is not None and child.parent_step_id is not None
        parent = await self.run(child.parent_run_id)
        # The parent's open steps, locked in one read: the delegation step among them while
        # it waits, and what decides whether the parent can wake.
        steps = await self.open_steps(parent.id)
        step = next((s for s in steps if s.id == child.parent_step_id), None)
        if step is None or StepStatus(step.status) is not StepStatus.WAITING_CHILD:
            return  # the parent already moved on
        # The model and clients both read this outcome: the child as its global id.
        run_id = to_global_id("Run", child.id)
        outcome = {"status": child.status, "result": child.result, "error": child.error, "runId": run_id}
        if child.error_code is not None:
            outcome["errorCode"] = child.error_code
        await self.finish_step(parent, step, StepStatus.SUCCEEDED, result=outcome)
        await self.wake_if_unblocked(parent, steps)

    async def wake_if_unblocked(self, run: Run, steps: list[RunStep] | None = None) -> None:
        """Requeue a parked run once none of its steps waits any more (``steps``: the run's
        open steps, when the caller already holds them locked)."""
        status = RunStatus(run.status)
        if status not in WAITING_RUN or run.id in self._ending:
            return
        # Woken when what it parked for is resolved; if it must wait for something else
        # (a child, after its approval), the worker re-parks it after running what it can.
        if steps is None:
            steps = await self.open_steps(run.id)
        still = waiting_status_for([StepStatus(s.status) for s in steps])
        if still is not status:
            await self.set_run_status(run, RunStatus.QUEUED)


@asynccontextmanager
async def tree_tx(
    rt: Runtime,
    run_id: int,
    *,
    root_id: int | None = None,
    parent_id: int | None = None,
    without_start: bool = False,
) -> AsyncIterator[TreeTx]:
    """One write transaction over the tree that ``run_id`` belongs to (callers that already
    know the root pass it: a run's root never changes). ``parent_id``: the run's parent, for
    a transaction that ends a child run (its outcome goes to the parent's step) or reads the
    run's chain (a claim's or a turn's budget check): locked with the root and the run, in
    the same statement. ``without_start``: the rows it locks leave out what their runs
    started with (``START_COLUMNS``), for the executing worker's writes, which hold it from
    their claim.

    Commits on normal exit, then publishes the events and enqueues the wake-ups.
    """
    async with rt.sessionmaker() as session:
        async with session.begin():
            if root_id is None:
                root_id = await session.scalar(select(Run.root_run_id).where(Run.id == run_id))
            if root_id is None:
                raise NotFound(f"run {run_id} not found")
            # The root and the run are locked by one statement: almost every transaction
            # goes on to lock the run it is about, and each statement under the root's lock
            # is time the rest of the tree waits. Rows lock in primary-key order, and a root
            # is always older than its descendants, so the root is still locked first.
            rows = (
                await session.execute(
                    _lock_root_and_run(session.get_bind().dialect.name, without_start=without_start),
                    {"b_root": root_id, "b_run": run_id, "b_parent": parent_id or run_id},
                )
            ).all()
            locked = {row[0].id: row[0] for row in rows}
            root = locked.get(root_id)
            assert root is not None  # a root row is never deleted while its tree exists
            tx = TreeTx(session, root, _utc(rows[0][1]), without_start=without_start)
            tx._runs.update(locked)
            yield tx
            await tx.write_events()
        # After commit, and never cut short: the renewer of a worker whose run just ended
        # must not cancel what tells the world it ended (engine.loop keeps it from trying).
        await after_commit(rt, tx.events, tx.wakeups)
        if tx.notify_approvals:
            # Not awaited: the POST goes through a remote receiver, and a worker's run must
            # not wait for it (docs/concepts/approvals.md, "Notifications").
            rt.spawn(deliver_requested(rt, tx.notify_approvals), name="enverif-approval-webhook")
        if tx.quota_release:
            await release_quota(rt, agent_ids=tx.quota_release)


class NewTree:
    """Creates a new tree in the caller's transaction: its root run (``create_run``), with
    the root's ``RUN_CREATED`` event as seq 1 of the tree's log, and its first job.

    Nobody can see the new rows before commit, so nothing is locked; ``now`` is the
    database's clock, read with the caller's first statement where it can be
    (``read_agent``), else on its own (``clock``). ``finish`` writes the events before
    commit; ``events`` and ``wakeups`` go out after it. ``new_tree_tx`` does all of that.
    """

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.tx: TreeTx | None = None  # the new tree's, once its root exists
        self._now: datetime | None = None

    async def clock(self) -> datetime:
        """The database's clock, read once per transaction."""
        if self._now is None:
            self._now = await db_now(self.session)
        return self._now

    async def read_agent(self, *, workspace_id: int, agent_id: int) -> Agent | None:
        """The workspace's agent, read together with the database's clock (one statement)."""
        dialect = self.session.get_bind().dialect.name
        row = (
            await self.session.execute(
                select(Agent, now_sql(dialect)).where(
                    Agent.id == agent_id, Agent.workspace_id == workspace_id
                )
            )
        ).first()
        if row is None:
            return None
        agent, now = row
        self._now = self._now or _utc(now)
        return agent

    async def create_run(self, new: NewRun) -> Run:
        """The tree's root: QUEUED, its own root, enqueued after commit."""
        assert new.parent is None, "a child is created in its parent's tree: TreeTx.create_run"
        assert self.tx is None, "one root per tree"
        now = await self.clock()
        run = await insert_run(self.session, new, now=now, root_id=None)
        run.root_run_id = run.id
        self.tx = TreeTx(self.session, run, now)
        self.tx.run_created(run, new)
        return run

    async def finish(self) -> None:
        """Before commit: the tree's events, then the root made its own root with the last
        seq of its log (one UPDATE: the row is detached, as every inserted run is)."""
        if self.tx is None:
            return
        await self.tx.write_events()
        root = self.tx.root
        await self.session.execute(_ROOT_OF_ITSELF, {"b_id": root.id, "b_seq": root.last_event_seq})

    @property
    def events(self) -> list[EventMessage]:
        return [] if self.tx is None else self.tx.events

    @property
    def wakeups(self) -> list[WakeUp]:
        return [] if self.tx is None else self.tx.wakeups


@asynccontextmanager
async def new_tree_tx(rt: Runtime) -> AsyncIterator[NewTree]:
    """One write transaction that may create a new tree (``NewTree.create_run``); commits on
    normal exit, then publishes the tree's events and enqueues its first job."""
    async with rt.sessionmaker() as session:
        async with session.begin():
            tree = NewTree(session)
            yield tree
            await tree.finish()
        await after_commit(rt, tree.events, tree.wakeups)


# Statements of every run's path, built once so each is compiled once and cached: one built
# per call costs its construction and cache key every time, and an IN over a list is
# re-rendered at each execution (measured: about 1.6 ms of CPU per run end, profiled). The
# locking reads of a run and of a run's steps come once per child claim and child end.
_LIVE_CHILDREN = select(Run.id).where(
    Run.parent_run_id == bindparam("b_parent"),
    or_(*(Run.status == s.value for s in sorted(CANCELLABLE_RUN, key=lambda s: s.value))),
)
# What a run started with and who started or cancelled it: read by its claim (the worker's
# copy of the run) and by clients, never by the worker's writes that follow. An input can be
# 256 KB, decoded again for every step if each of them loaded it (docs/performance.md). Left
# out with ``raiseload``: a read of one of them on such a row fails loudly, never a lazy load.
START_COLUMNS = (
    Run.input,
    Run.delegation_task,
    Run.injected_memory_ids,
    Run.injected_memories,
    Run.started_by,
    Run.cancelled_by,
)
_WITHOUT_START = tuple(defer(column, raiseload=True) for column in START_COLUMNS)
_LOCK_RUN = (
    select(Run).where(Run.id == bindparam("b_run"), Run.root_run_id == bindparam("b_root")).with_for_update()
)
_LOCK_RUN_WITHOUT_START = _LOCK_RUN.options(*_WITHOUT_START)
LOCK_OPEN_STEPS = (
    select(RunStep)
    .where(
        RunStep.run_id == bindparam("b_run"),
        or_(*(RunStep.status == s.value for s in sorted(OPEN_STEP, key=lambda s: s.value))),
    )
    .order_by(RunStep.seq)
    .with_for_update()
)
_LOCK_ROOTS: dict[tuple[str, bool], Select[Run, datetime]] = {}
_runs = Run.__table__
_ROOT_OF_ITSELF = (
    update(_runs)
    .where(_runs.c.id == bindparam("b_id"))
    .values(root_run_id=bindparam("b_id"), last_event_seq=bindparam("b_seq"))
)


def _lock_root_and_run(dialect: str, *, without_start: bool) -> Select[Run, datetime]:
    """The root row, the run's and its parent's (the same row for a root; the parent is the
    run itself when not asked for), locked in primary-key order, with the database's clock
    (one statement per dialect, and one more without ``START_COLUMNS``)."""
    statement = _LOCK_ROOTS.get((dialect, without_start))
    if statement is None:
        statement = (
            select(Run, now_sql(dialect))
            .where(
                Run.id.in_([bindparam("b_root"), bindparam("b_run"), bindparam("b_parent")]),
                Run.root_run_id == bindparam("b_root"),
            )
            .order_by(Run.id)
            .with_for_update()
        )
        if without_start:
            statement = statement.options(*_WITHOUT_START)
        _LOCK_ROOTS[(dialect, without_start)] = statement
    return statement


def _utc(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite returns text
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC)


def _event_row(event: EventMessage) -> dict[str, Any]:
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
