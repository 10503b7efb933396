"""Step and approval states: the only writer, part of ``TreeTx``.

Every step or approval status change happens here, inside a tree transaction, after asking
the pure state machine (``app.domain.runs``), with its event. Steps are written through Core
statements compiled once (a run's hot path); approvals through the ORM (rare, operator-paced).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.orm import Approval, ApprovalNotification, Run, RunStep, Workspace
from app.domain.actors import SYSTEM, Actor, ActorKind
from app.domain.approvals import (
    OUTCOME,
    RUNS_THE_TOOL,
    ApprovalDecision,
    ApprovalScope,
    DecisionRequest,
    NotificationStatus,
)
from app.domain.model_errors import ModelErrorCode, error_code, model_error
from app.domain.run_events import EventType
from app.domain.runs import (
    TERMINAL_STEP,
    ApprovalStatus,
    RunStatus,
    StepStatus,
    check_step_transition,
)

if TYPE_CHECKING:
    from app.services.transitions.outbox import Emit


class StepWrites:
    """Mixed into ``TreeTx``; relies on its session, clock, locks and event log."""

    session: AsyncSession
    now: datetime
    # Steps that started a child: (step id, child id) moves to WAITING_CHILD not yet written.
    _awaiting: list[tuple[int, int]]
    # Approvals whose webhook notification this process sends once the transaction commits.
    notify_approvals: list[int]

    if TYPE_CHECKING:  # provided by TreeTx; declared for type checkers only
        emit: Emit

        async def open_steps(self, run_id: int) -> list[RunStep]: ...

    # -- new steps -----------------------------------------------------------------------

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
        usage: dict[str, Any] | None = None,
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
            "error_code": error_code(result) if error is not None or status in _REFUSED else None,
            "usage": usage or None,
            "executed_attempt": attempt if status is StepStatus.RUNNING or started_at else None,
            "created_at": self.now,
            "started_at": started_at or (self.now if started else None),
            "finished_at": finished_at or (self.now if finished else None),
        }

    async def add_steps(self, rows: list[dict[str, Any]]) -> list[RunStep]:
        """Insert steps without ORM flushes and return them detached, with their ids: one
        multi-row INSERT ... RETURNING where the database has it (MariaDB, SQLite), one
        INSERT per row elsewhere (MySQL)."""
        if not rows:
            return []
        if len(rows) > 1 and self.session.get_bind().dialect.insert_returning:
            ids = (await self.session.execute(_INSERT_STEPS_RETURNING, rows)).scalars().all()
        else:
            # A Core INSERT returns a CursorResult; AsyncSession.execute is typed as the wider Result.
            ids = [
                (await self.session.execute(_INSERT_STEP, row)).inserted_primary_key[0]  # type: ignore[attr-defined]
                for row in rows
            ]
        return [RunStep(id=step_id, **row) for step_id, row in zip(ids, rows, strict=True)]

    # -- events --------------------------------------------------------------------------

    def step_finished(self, run: Run, step: RunStep, *, final: bool = False) -> None:
        payload: dict[str, Any] = {"seq": step.seq, "tool": step.tool, "status": step.status}
        payload["decision"] = step.decision
        if step.approval_id is not None:
            payload["approvalId"] = step.approval_id
        if final:
            payload["final"] = True
        self.emit(run, EventType.STEP_FINISHED, status=step.status, step_id=step.id, payload=payload)
        budget_event = _BUDGET_EVENTS.get(step.error_code or "")
        if budget_event is not None:
            # A refusal a live view shows as such, with what the model read.
            error = step.result.get("error", {}) if isinstance(step.result, dict) else {}
            self.emit(run, budget_event, step_id=step.id, payload={
                "seq": step.seq, "tool": step.tool, "refused": True, "message": error.get("message"),
            })  # fmt: skip

    def step_started(self, run: Run, step: RunStep) -> None:
        # Tool, decision and approval id ride along so a live view can draw the step from its
        # events alone (docs/graphql/guide.md), without querying the step.
        payload: dict[str, Any] = {"seq": step.seq, "tool": step.tool, "decision": step.decision}
        if step.approval_id is not None:
            payload["approvalId"] = step.approval_id
        self.emit(run, EventType.STEP_STARTED, status=step.status, step_id=step.id, payload=payload)

    # -- the executing worker's steps (``step`` is its detached copy, kept in step) -------

    async def start_step(self, run: Run, step: RunStep, *, attempt: int) -> bool:
        """PENDING -> RUNNING for the worker about to execute it. False when somebody else
        moved the step meanwhile."""
        check_step_transition(StepStatus.PENDING, StepStatus.RUNNING)
        done = await self.session.execute(
            _START_PENDING_STEP, {"b_id": step.id, "b_at": self.now, "b_attempt": attempt}
        )
        if not done.rowcount:  # type: ignore[attr-defined]
            return False
        step.status, step.started_at, step.executed_attempt = StepStatus.RUNNING.value, self.now, attempt
        self.step_started(run, step)
        return True

    async def finish_running_step(
        self, run: Run, step: RunStep, to: StepStatus, *, result: Any = None, error: str | None = None
    ) -> bool:
        """Record the result of a step the caller is executing, in one conditional UPDATE.
        False when the step is not RUNNING any more (its result was recorded already)."""
        check_step_transition(StepStatus.RUNNING, to)
        done = await self.session.execute(
            _FINISH_RUNNING_STEP,
            {
                "b_id": step.id,
                "b_status": to.value,
                "b_result": result,
                "b_error": error,
                "b_at": self.now,
                "b_code": error_code(result),
            },
        )
        if not done.rowcount:  # type: ignore[attr-defined]
            return False
        step.status, step.result, step.error, step.finished_at = to.value, result, error, self.now
        step.error_code = error_code(result)
        self.step_finished(run, step)
        return True

    def await_child(self, run: Run, step: RunStep, *, child_id: int) -> None:
        """RUNNING -> WAITING_CHILD: the step started ``child_id`` and waits for its outcome
        (delivered by the child's terminal transition). The UPDATE is held and made together
        with the other steps of this transaction that started children (a turn delegating
        five times: one statement), by ``settle_awaits``."""
        check_step_transition(StepStatus.RUNNING, StepStatus.WAITING_CHILD)
        self._awaiting.append((step.id, child_id))
        step.status, step.child_run_id = StepStatus.WAITING_CHILD.value, child_id
        self.emit(run, EventType.STEP_STARTED, status=step.status, step_id=step.id,
                  payload={"seq": step.seq, "tool": step.tool, "decision": step.decision, "childRunId": child_id})  # fmt: skip

    async def settle_awaits(self) -> bool:
        """Write the held RUNNING -> WAITING_CHILD moves, in one conditional UPDATE. False when
        one of the steps was not RUNNING any more. ``TreeTx`` calls it before it reads steps
        and before commit, so nothing ever reads a step that misses its move."""
        if not self._awaiting:
            return True
        pairs, self._awaiting = self._awaiting, []
        if len(pairs) == 1:
            [(step_id, child_id)] = pairs
            done = await self.session.execute(_AWAIT_CHILD, {"b_id": step_id, "b_child": child_id})
        else:
            children = case(dict(pairs), value=_steps.c.id)
            done = await self.session.execute(
                update(_steps)
                .where(
                    _steps.c.id.in_([step_id for step_id, _ in pairs]),
                    _steps.c.status == StepStatus.RUNNING.value,
                )
                .values(status=StepStatus.WAITING_CHILD.value, child_run_id=children)
            )
        return bool(done.rowcount == len(pairs))  # type: ignore[attr-defined]

    # -- steps of parked runs (locked ORM rows) ------------------------------------------

    async def finish_step(
        self, run: Run, step: RunStep, to: StepStatus, *, result: Any = None, error: str | None = None
    ) -> None:
        check_step_transition(StepStatus(step.status), to)
        step.status = to.value
        step.result = result
        step.error = error
        step.error_code = error_code(result)
        step.finished_at = self.now
        step.started_at = step.started_at or self.now
        self.step_finished(run, step)

    async def redact_arguments(self, step: RunStep, arguments: dict[str, Any]) -> None:
        """Keep ``arguments`` (a redacted copy) instead of what the step was called with, on
        the step and on its approval: a tool refused the call as holding a secret, and a
        secret must not stay readable where the refusal is shown."""
        await self.session.execute(update(RunStep).where(RunStep.id == step.id).values(arguments=arguments))
        if step.approval_id is not None:
            await self.session.execute(
                update(Approval).where(Approval.id == step.approval_id).values(arguments=arguments)
            )
        step.arguments = arguments

    # -- approvals -----------------------------------------------------------------------

    async def request_approval(
        self, run: Run, step: RunStep, *, reason: str, expires_at: datetime | None = None
    ) -> Approval:
        """An operator has to decide ``step`` (just added as WAITING_APPROVAL), by
        ``expires_at`` if given. Unless an earlier call of the same tool in this same run was
        approved with ``scope: RUN``: then the call is approved at once, by that actor."""
        standing = await self.session.scalar(
            select(Approval)
            .where(Approval.run_id == run.id, Approval.tool == step.tool,
                   Approval.scope == ApprovalScope.RUN.value, Approval.status == ApprovalStatus.APPROVED.value)
            .order_by(Approval.id)
            .limit(1)
        )  # fmt: skip
        approval = Approval(workspace_id=run.workspace_id, run_id=run.id, root_run_id=run.root_run_id,
                            step_id=step.id, tool=step.tool, arguments=step.arguments,
                            status=ApprovalStatus.PENDING.value, requested_at=self.now,
                            expires_at=None if standing is not None else expires_at)  # fmt: skip
        self.session.add(approval)
        await self.session.flush()
        await self.session.execute(
            update(RunStep).where(RunStep.id == step.id).values(approval_id=approval.id)
        )
        step.approval_id = approval.id
        self.step_started(run, step)
        self.emit(run, EventType.APPROVAL_REQUESTED, status=ApprovalStatus.PENDING.value, step_id=step.id,
                  payload={"approvalId": approval.id, "tool": step.tool, "reason": reason})  # fmt: skip
        if standing is not None:
            await self.approve_for_run(run, approval, standing, step=step)
            return approval
        hook = await self.session.scalar(
            select(Workspace.approval_webhook).where(Workspace.id == run.workspace_id)
        )
        if isinstance(hook, dict) and hook.get("url") and hook.get("secretEnv"):
            # Committed with the request, so none is lost; sent after commit by this process
            # (``tree_tx``), retried by the sweeper (app/services/approval_webhooks.py).
            self.notify_approvals.append(approval.id)
            self.session.add(ApprovalNotification(workspace_id=run.workspace_id, approval_id=approval.id,
                                                  url=hook["url"], secret_env=hook["secretEnv"],
                                                  status=NotificationStatus.PENDING.value, attempts=0,
                                                  created_at=self.now, next_at=self.now))  # fmt: skip
        return approval

    def _decided(self, run: Run, approval: Approval, *, actor: Actor | None) -> None:
        approval.decided_at = self.now
        if actor is not None:
            approval.decided_by_token_id = actor.id if actor.kind is ActorKind.TOKEN else None
            approval.decided_by = actor.to_json()
        payload: dict[str, Any] = {
            "approvalId": approval.id,
            "status": approval.status,
            "reason": approval.reason,
        }
        if approval.decision is not None:
            payload["decision"], payload["scope"] = approval.decision, approval.scope
        self.emit(run, EventType.APPROVAL_DECIDED, step_id=approval.step_id, payload=payload)

    async def decide_approval(
        self, run: Run, approval: Approval, request: DecisionRequest, *, actor: Actor
    ) -> None:
        """APPROVE, EDIT: the step goes back to PENDING for the next worker to execute (EDIT:
        with ``request.arguments``, already validated and decided again by policy, the model's
        kept as ``original_arguments``). REJECT: the step is REJECTED and the model sees the
        rejection, with the reason, as the call's result. RESPOND: the step SUCCEEDED without
        running, its result ``{"response": ...}`` (docs/concepts/approvals.md)."""
        step = await self.session.get_one(RunStep, approval.step_id, with_for_update=True)
        kind = request.decision
        approval.status = OUTCOME[kind].value
        approval.decision, approval.scope = kind.value, request.scope.value
        approval.reason = request.reason
        if kind is ApprovalDecision.RESPOND:
            approval.response = request.response
        self._decided(run, approval, actor=actor)
        if kind in RUNS_THE_TOOL:
            if kind is ApprovalDecision.EDIT:
                step.original_arguments, step.arguments = step.arguments, request.arguments
                step.edited_by = actor.to_json()
            check_step_transition(StepStatus(step.status), StepStatus.PENDING)
            step.status = StepStatus.PENDING.value
        elif kind is ApprovalDecision.REJECT:
            await self.finish_step(run, step, StepStatus.REJECTED, result=rejection_result(request.reason))
        else:
            await self.finish_step(run, step, StepStatus.SUCCEEDED, result={"response": request.response})

    async def approve_for_run(
        self, run: Run, approval: Approval, standing: Approval, *, step: RunStep | None = None
    ) -> None:
        """Approve ``approval`` (PENDING) because ``standing`` approved its tool for the whole
        run: recorded as decided by the actor who decided ``standing``."""
        if step is None:
            step = await self.session.get_one(RunStep, approval.step_id, with_for_update=True)
        check_step_transition(StepStatus(step.status), StepStatus.PENDING)
        await self.session.execute(
            update(RunStep).where(RunStep.id == step.id).values(status=StepStatus.PENDING.value)
        )
        step.status = StepStatus.PENDING.value
        approval.status = ApprovalStatus.APPROVED.value
        approval.decision, approval.scope = ApprovalDecision.APPROVE.value, ApprovalScope.RUN.value
        approval.reason = f"approved for this run (with approval {standing.id})"
        approval.decided_by_token_id = standing.decided_by_token_id
        approval.decided_by = standing.decided_by
        self._decided(run, approval, actor=None)

    async def expire_approval(self, run: Run, approval: Approval, *, reason: str) -> None:
        """Past its deadline: EXPIRED, and the call rejected with ``reason`` (fail safe)."""
        step = await self.session.get_one(RunStep, approval.step_id, with_for_update=True)
        approval.status = ApprovalStatus.EXPIRED.value
        approval.reason = reason
        self._decided(run, approval, actor=SYSTEM)
        await self.finish_step(run, step, StepStatus.REJECTED, result=rejection_result(reason))

    async def close_open_work(self, run: Run, to: RunStatus, why: str | None) -> None:
        """A run ended: its open steps are cancelled and its pending approvals closed, so they
        can no longer be decided (the reason says why they were not approved)."""
        for step in await self.open_steps(run.id):
            message = f"run {to.value.lower()}: {why or ''}".strip().rstrip(":")
            result: dict[str, Any] = model_error(ModelErrorCode.RUN_ENDED, message)
            # RUNNING: its worker was executing the call when the run ended. The worker is
            # told at once and cuts the call off, but it may have gone out already: say so,
            # rather than let the step read as never sent (docs/graphql/errors.md).
            # A step waiting for its child started that child, which ends with the run.
            if step.status == StepStatus.RUNNING:
                result["sent"] = "unknown"
            elif step.status != StepStatus.WAITING_CHILD:
                result["sent"] = False
            await self.finish_step(run, step, StepStatus.CANCELLED, result=result)
        approvals = await self.session.scalars(
            select(Approval)
            .where(Approval.run_id == run.id, Approval.status == ApprovalStatus.PENDING.value)
            .with_for_update()
        )
        for approval in approvals:
            approval.status = ApprovalStatus.REJECTED.value
            approval.reason = f"run {to.value.lower()}" + (f": {why}" if why else "")
            approval.decided_at = self.now
            self.emit(run, EventType.APPROVAL_DECIDED, step_id=approval.step_id,
                      payload={"approvalId": approval.id, "status": approval.status, "reason": approval.reason})  # fmt: skip


_BUDGET_EVENTS = {
    ModelErrorCode.BUDGET_EXCEEDED.value: EventType.BUDGET_EXCEEDED,
    ModelErrorCode.LOOP_DETECTED.value: EventType.LOOP_DETECTED,
}


def rejection_result(reason: str | None) -> dict[str, object]:
    return model_error(ModelErrorCode.REJECTED, reason or "rejected by an operator")


async def read_steps(read_sessionmaker: async_sessionmaker[AsyncSession], run_id: int) -> list[RunStep]:
    """A run's steps in order, read without locks (a worker refreshing its view after waiting)."""
    async with read_sessionmaker() as session:
        return list(await session.scalars(STEPS, {"b_run": run_id}))


_REFUSED = (StepStatus.FAILED, StepStatus.DENIED, StepStatus.REJECTED)

# Built once: statements with bound parameters are compiled once and cached, where values
# inlined with .values(...) would be traversed for a cache key on every execution.
_steps = RunStep.__table__
# A run's steps in order (``TreeTx.open_steps`` locks those not finished).
STEPS = select(RunStep).where(RunStep.run_id == bindparam("b_run")).order_by(RunStep.seq)
_INSERT_STEP = insert(_steps)
_INSERT_STEPS_RETURNING = insert(_steps).returning(_steps.c.id, sort_by_parameter_order=True)
_FINISH_RUNNING_STEP = (
    update(_steps)
    .where(_steps.c.id == bindparam("b_id"), _steps.c.status == StepStatus.RUNNING.value)
    .values(
        status=bindparam("b_status"),
        result=bindparam("b_result"),
        error=bindparam("b_error"),
        error_code=bindparam("b_code"),
        finished_at=bindparam("b_at"),
    )
)
_START_PENDING_STEP = (
    update(_steps)
    .where(_steps.c.id == bindparam("b_id"), _steps.c.status == StepStatus.PENDING.value)
    .values(
        status=StepStatus.RUNNING.value, started_at=bindparam("b_at"), executed_attempt=bindparam("b_attempt")
    )
)
_AWAIT_CHILD = (
    update(_steps)
    .where(_steps.c.id == bindparam("b_id"), _steps.c.status == StepStatus.RUNNING.value)
    .values(status=StepStatus.WAITING_CHILD.value, child_run_id=bindparam("b_child"))
)
