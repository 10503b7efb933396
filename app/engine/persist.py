"""The run loop's writes: each one fenced tree transaction (``app.services.transitions``).

Mixed into ``engine.loop.RunExecutor``. A worker that lost its lease (cancelled, taken over)
gets ``LeaseLost`` from the fence and writes nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DataError, IntegrityError

from app.db.orm import Agent, Run, RunStep
from app.domain.model_errors import ModelErrorCode
from app.domain.planner import Action, Calls, Fail, Finish, TurnPlan
from app.domain.policy import Decision
from app.domain.runs import TERMINAL_STEP, WAITING_STEP, RunStatus, StepStatus, waiting_status_for
from app.engine.base import Tool, ToolContext
from app.engine.calls import Outcome, call_state_tool, failed
from app.engine.tools.agents import read_targets
from app.services.transitions import LeaseLost, TreeTx, tree_tx

if TYPE_CHECKING:
    from app.engine.loop import ReadCall
    from app.engine.tools.registry import ToolRegistry
    from app.services.runtime import Runtime

log = logging.getLogger(__name__)

# Storing these again would fail again: the step fails instead of the run being retried.
DETERMINISTIC_DB_ERRORS = (DataError, IntegrityError)


class RunWrites:
    rt: Runtime
    registry: ToolRegistry
    run: Run
    run_id: int
    root_id: int
    attempt: int
    steps: list[RunStep]
    recorded: tuple[RunStep, Outcome] | None
    reads: list[ReadCall]
    asked_turn: int

    if TYPE_CHECKING:  # provided by RunExecutor; declared for type checkers only

        def _ctx(self, step_id: int | None) -> ToolContext: ...

    async def _apply(self, plan: TurnPlan) -> bool:
        """Persist the pending results and the planned turn. True when this worker is done
        with the run: it ended, or it parked waiting for children or approvals."""
        if isinstance(plan, Fail):
            await self._fail(plan.error)
            return True
        try:
            return await self._apply_plan(plan)
        except DETERMINISTIC_DB_ERRORS as exc:
            if await self._refuse_pending(exc):
                return False  # the model is asked again, now seeing the failure
            await self._fail(f"could not store the model's turn: {_db_reason(exc)}")
            return True

    async def _apply_plan(self, plan: Calls | Finish) -> bool:
        # A child that ends hands its outcome to its parent's step: its parent is locked up
        # front, with the root and the run, in the first statement.
        parent_id = self.run.parent_run_id if isinstance(plan, Finish) else None
        targets = await self._delegation_targets(plan) if isinstance(plan, Calls) else {}
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id, parent_id=parent_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            if isinstance(plan, Finish):
                final = {
                    "tool": None,
                    "arguments": None,
                    "status": StepStatus.SUCCEEDED,
                    "result": plan.value,
                }
                await self._write_pending(tx, run, final=final)
                # Every step is finished (we only ask the model then), so there is no open
                # work and no live child to end: skip those queries.
                await tx.set_run_status(run, RunStatus.SUCCEEDED, result=plan.value, quiet=True)
                return True
            await self._write_pending(tx, run)
            added = await self._add_calls(tx, run, plan, targets)
            parked = await self._park_with_turn(tx, run, added)
        self.steps.extend(added)
        return parked

    async def _park_with_turn(self, tx: TreeTx, run: Run, added: list[RunStep]) -> bool:
        """Park in the transaction that recorded the turn when nothing of it can run now (it
        only started children or asked for approvals): what ``_park`` would do next, one
        transaction earlier. The view is exact here: the model was asked only once every
        earlier step had finished, and nobody can have moved this turn's steps yet (this
        transaction holds the tree's lock)."""
        statuses = [StepStatus(s.status) for s in (*self.steps, *added) if s.tool is not None]
        if any(s not in TERMINAL_STEP and s not in WAITING_STEP for s in statuses):
            return False
        status = waiting_status_for(statuses)
        if status is None:
            return False
        await tx.set_run_status(run, status)
        return True

    async def _write_pending(self, tx: TreeTx, run: Run, *, final: dict[str, Any] | None = None) -> None:
        """Record what ran since the last write: the result of a persisted step, and the
        batched READ calls (as finished steps, started and finished events together); with
        ``final``, the final answer's step too. The new steps go in one INSERT."""
        if self.recorded is not None:
            await self._finish(tx, run, *self.recorded)
            self.recorded = None
        seq = max((s.seq for s in self.steps), default=0) + 1
        rows = [
            tx.step_row(run, seq=seq + i, turn=read.turn, tool=read.plan.tool, arguments=read.plan.args,
                        status=read.outcome.status, decision=Decision.ALLOW.value, decision_reason=read.plan.reason,
                        result=read.outcome.result, error=read.outcome.error, attempt=self.attempt,
                        started_at=read.started_at, finished_at=read.finished_at)
            for i, read in enumerate(self.reads)
        ]  # fmt: skip
        if final is not None:
            # The final answer is the turn after the last recorded one.
            final_turn = max([run.turns] + [read.turn + 1 for read in self.reads])
            rows.append(tx.step_row(run, seq=seq + len(rows), turn=final_turn, **final))
        for step in await tx.add_steps(rows):
            if step.tool is None:
                tx.step_finished(run, step, final=True)
            else:
                tx.step_started(run, step)
                tx.step_finished(run, step)
                run.turns = max(run.turns, step.turn + 1)
            self.steps.append(step)
        self.reads = []

    async def _delegation_targets(self, plan: Calls) -> dict[str, Agent]:
        """The agents this turn delegates to, read before its transaction (one query)."""
        delegations = [call.args for call in plan.plans if call.action is Action.START_CHILD]
        if not delegations:
            return {}
        return await read_targets(self.rt.read_sessionmaker, self.run.workspace_id, delegations)

    async def _add_calls(self, tx: TreeTx, run: Run, plan: Calls, targets: dict[str, Agent]) -> list[RunStep]:
        """The turn's steps, inserted together (one statement), then each call's follow-up
        in order: its events, its approval request, or its child run."""
        seq = max((s.seq for s in self.steps), default=0) + 1
        turn_index = run.turns
        run.turns += 1
        started_one = False
        rows: list[dict[str, Any]] = []
        for offset, call in enumerate(plan.plans):
            common: dict[str, Any] = {"seq": seq + offset, "turn": turn_index, "tool": call.tool,
                                      "arguments": call.args, "decision_reason": call.reason or None,
                                      "decision": call.decision.value if call.decision else None}  # fmt: skip
            if call.action is Action.REFUSE:
                common["decision_reason"] = None
                row = tx.step_row(
                    run, **common, status=StepStatus.FAILED, error=call.reason, result=call.result
                )
            elif call.action is Action.DENY:
                row = tx.step_row(run, **common, status=StepStatus.DENIED, result=call.result)
            elif call.action is Action.AWAIT_APPROVAL:
                row = tx.step_row(run, **common, status=StepStatus.WAITING_APPROVAL)
            elif call.action is Action.START_CHILD:
                # The delegating tool runs right here (below): every child of this turn is
                # created in the transaction that records the turn, its step WAITING_CHILD
                # (or FAILED with the refusal the model sees).
                row = tx.step_row(run, **common, status=StepStatus.RUNNING, attempt=self.attempt)
            else:
                # The first allowed call starts right away (one transaction saved); the rest
                # wait their turn as PENDING and are executed in seq order.
                status = StepStatus.PENDING if started_one else StepStatus.RUNNING
                started_one = True
                row = tx.step_row(run, **common, status=status, attempt=self.attempt)
            rows.append(row)
        added = await tx.add_steps(rows)
        for call, step in zip(plan.plans, added, strict=True):
            if call.action in (Action.REFUSE, Action.DENY):
                tx.step_started(run, step)
                tx.step_finished(run, step)
            elif call.action is Action.AWAIT_APPROVAL:
                await tx.request_approval(run, step, reason=call.reason)
            elif call.action is Action.START_CHILD:
                tx.step_started(run, step)
                await self._start_child(tx, run, step, targets)
            else:
                tx.step_started(run, step)
        return added

    async def _start_child(self, tx: TreeTx, run: Run, step: RunStep, targets: dict[str, Agent]) -> None:
        tool = self.registry.get(step.tool or "")
        assert tool is not None  # the planner only starts children through a registered tool
        outcome = await call_state_tool(
            tool, tx, run, step, self._ctx(step.id), settings=self.rt.settings, agents=targets
        )
        await self._finish(tx, run, step, outcome)

    async def _mark_running(self, step: RunStep) -> None:
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            if not await tx.start_step(run, step, attempt=self.attempt):
                raise LeaseLost(f"step {step.id} is no longer PENDING; someone else moved it")

    async def _run_state_step(self, step: RunStep, tool: Tool) -> None:
        """A STATE tool: started (if PENDING), executed and recorded in one transaction, so
        its writes commit with its result or not at all."""
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            if step.status == StepStatus.PENDING and not await tx.start_step(run, step, attempt=self.attempt):
                raise LeaseLost(f"step {step.id} is no longer PENDING; someone else moved it")
            outcome = await call_state_tool(
                tool, tx, run, step, self._ctx(step.id), settings=self.rt.settings
            )
            await self._finish(tx, run, step, outcome)

    async def _record(self, step: RunStep, outcome: Outcome) -> None:
        self.recorded = (step, outcome)
        try:
            await self._write_recorded()
        except DETERMINISTIC_DB_ERRORS as exc:
            if not await self._refuse_pending(exc):
                raise

    async def _write_recorded(self) -> None:
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            await self._write_pending(tx, await tx.fenced_run(self.run_id, self.attempt))

    async def _refuse_pending(self, exc: Exception) -> bool:
        """The database refused what ran since the last write (a value too long for a column,
        a constraint): storing it again would fail again, and running the tools again could
        repeat side effects. So their steps fail, recorded as such; nothing is re-run.
        False when nothing was pending (the refusal was about something else)."""
        if self.recorded is None and not self.reads:
            return False
        log.warning("run %s: the database refused a result", self.run_id, exc_info=exc)
        refusal = failed(
            ModelErrorCode.RESULT_NOT_STORED, f"the database refused the result: {_db_reason(exc)}"
        )
        if self.recorded is not None:
            self.recorded = (self.recorded[0], refusal)
        for read in self.reads:
            read.outcome = refusal
        await self._write_recorded()
        return True

    async def _finish(self, tx: TreeTx, run: Run, step: RunStep, outcome: Outcome) -> None:
        if outcome.child_run_id is not None:
            tx.await_child(run, step, child_id=outcome.child_run_id)  # checked before commit
            return
        # Never write a result twice: the update only moves a RUNNING step.
        if not await tx.finish_running_step(
            run, step, outcome.status, result=outcome.result, error=outcome.error
        ):
            raise LeaseLost(f"step {step.id} is no longer running")

    async def _park(self) -> bool:
        """Wait for an operator or a child. Re-checked under the lock: a decision that landed
        while we were working means there is more to do now, so we do not park."""
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            status = waiting_status_for([StepStatus(s.status) for s in await tx.steps(run.id)])
            if status is None:
                return False
            await tx.set_run_status(run, status)
            return True

    async def _fail(self, error: str) -> None:
        try:
            await self._fail_once(error)
        except DETERMINISTIC_DB_ERRORS as exc:
            if not await self._refuse_pending(exc):
                raise
            await self._fail_once(error)

    async def _fail_once(self, error: str) -> None:
        async with tree_tx(
            self.rt, self.run_id, root_id=self.root_id, parent_id=self.run.parent_run_id
        ) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            await self._write_pending(tx, run)
            await tx.set_run_status(run, RunStatus.FAILED, error=error)


def _db_reason(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    return f"{type(orig).__name__}: {str(orig)[:200]}"
