"""The run loop's writes: each one fenced tree transaction (``app.services.transitions``).

A worker that lost its lease (cancelled, taken over) gets ``LeaseLost`` from the fence and
writes nothing. What each write records is decided by pure rules (``app.domain.engine_rules``);
this module builds the rows and sends them.

Where a step starts (becomes RUNNING), in the same transaction as the fence's check that the
run is still this worker's (``TreeTx.fenced_run``, under the tree's lock):

- ``start_step``: a PENDING step, before an I/O tool runs it (``start``) or inside a STATE
  tool's transaction (``run_state_step``);
- ``_add_calls``: the turn's first allowed call and every delegation, inserted RUNNING by the
  transaction that records the turn (``engine_rules.new_step_statuses``).
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DataError, IntegrityError

from app.domain.approvals import expires_at
from app.domain.budgets import SPENDABLE, admit, refusal_message, spent
from app.domain.engine_rules import Outcome, failed, final_answer_turn, new_step_statuses, parks_with_turn
from app.domain.model_errors import ModelErrorCode
from app.domain.planner import Action, CallPlan, Calls, Fail, Finish, TurnPlan, refuse_beyond
from app.domain.policy import Decision
from app.domain.runs import ApprovalStatus, RunStatus, StepStatus, waiting_status_for
from app.engine.base import Tool
from app.engine.calls import call_state_tool
from app.engine.state import RunState
from app.engine.tools.agents import read_targets
from app.services.approvals import audit_approved_for_run
from app.services.transitions import LeaseLost, TreeTx, tree_tx

if TYPE_CHECKING:
    from app.db.orm import Agent, Approval, Run, RunStep
    from app.engine.tools.registry import ToolRegistry
    from app.services.runtime import Runtime

log = logging.getLogger(__name__)

# Storing these again would fail again: the step fails instead of the run being retried.
DETERMINISTIC_DB_ERRORS = (DataError, IntegrityError)


class RunWrites:
    def __init__(self, rt: Runtime, registry: ToolRegistry, state: RunState) -> None:
        self.rt = rt
        self.registry = registry
        self.state = state

    def _tx(self, *, with_parent: bool = False) -> AbstractAsyncContextManager[TreeTx]:
        """The run's fenced tree transaction. One that ends a child hands its outcome to the
        parent's step, and a turn's checks the chain's budgets: those lock the parent up front,
        with the root and the run (one statement fewer under the root's lock). The rows come
        without what the runs started with: this worker holds it from the claim."""
        state = self.state
        parent_id = state.run.parent_run_id if with_parent else None
        return tree_tx(self.rt, state.run_id, root_id=state.root_id, parent_id=parent_id, without_start=True)

    # -- a model turn --------------------------------------------------------------------

    async def apply(self, plan: TurnPlan) -> bool:
        """Persist what ran since the last write and the planned turn. True when this worker
        is done with the run: it ended, or it parked waiting for children or approvals."""
        if isinstance(plan, Fail):
            await self.fail(plan.error, code=plan.code)
            return True
        try:
            return await self._apply_plan(plan)
        except DETERMINISTIC_DB_ERRORS as exc:
            if await self._refuse_pending(exc):
                return False  # the model is asked again, now seeing the failure
            await self.fail(f"could not store the model's turn: {_db_reason(exc)}")
            return True

    async def _apply_plan(self, plan: Calls | Finish) -> bool:
        state = self.state
        targets = await self._delegation_targets(plan) if isinstance(plan, Calls) else {}
        async with self._tx(with_parent=True) as tx:
            run = await tx.fenced_run(state.run_id, state.attempt)
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
            # Tokens, cost or wall time of the run's chain spent (this turn's usage is charged
            # now, under the root lock): the run ends instead of executing the turn.
            exhausted = spent(await tx.chain_ledgers(self.rt.settings, run))
            if exhausted is not None:
                await tx.set_run_status(run, RunStatus.FAILED, error=refusal_message(exhausted),
                                        error_code=ModelErrorCode.BUDGET_EXCEEDED)  # fmt: skip
                return True
            added = await self._add_calls(tx, run, plan, targets)
            # Park in the transaction that recorded the turn when nothing of it can run now:
            # what ``park`` would do next, one transaction earlier.
            status = parks_with_turn(
                [StepStatus(s.status) for s in (*state.steps, *added) if s.tool is not None]
            )
            if status is not None:
                await tx.set_run_status(run, status)
        state.steps.extend(added)
        return status is not None

    async def _write_pending(self, tx: TreeTx, run: Run, *, final: dict[str, Any] | None = None) -> None:
        """Record what ran since the last write: the result of a persisted step, and the
        batched READ calls (as finished steps, started and finished events together); with
        ``final``, the final answer's step too. The new steps go in one INSERT."""
        state = self.state
        if state.unrecorded is not None:
            await self._finish(tx, run, *state.unrecorded)
            state.unrecorded = None
        usage = state.take_usage()
        if usage:
            await tx.charge(run, usage)
        seq = state.next_seq()
        rows = [
            tx.step_row(run, seq=seq + i, turn=read.turn, tool=read.plan.tool, arguments=read.plan.args,
                        status=read.outcome.status, decision=Decision.ALLOW.value, decision_reason=read.plan.reason,
                        result=read.outcome.result, error=read.outcome.error, attempt=state.attempt,
                        started_at=read.started_at, finished_at=read.finished_at,
                        usage=state.turn_usage.pop(read.turn, None))
            for i, read in enumerate(state.reads)
        ]  # fmt: skip
        if final is not None:
            turn = final_answer_turn(run.turns, state.reads)
            rows.append(tx.step_row(run, seq=seq + len(rows), turn=turn, usage=self._turn_usage(), **final))
        for step in await tx.add_steps(rows):
            if step.tool is None:
                tx.step_finished(run, step, final=True)
            else:
                tx.step_started(run, step)
                tx.step_finished(run, step)
                run.turns = max(run.turns, step.turn + 1)
            state.steps.append(step)
        state.reads = []

    async def _delegation_targets(self, plan: Calls) -> dict[str, Agent]:
        """The agents this turn delegates to, read before its transaction (one query)."""
        delegations = [call.args for call in plan.plans if call.action is Action.START_CHILD]
        if not delegations:
            return {}
        return await read_targets(self.rt.read_sessionmaker, self.state.run.workspace_id, delegations)

    async def _add_calls(self, tx: TreeTx, run: Run, plan: Calls, targets: dict[str, Agent]) -> list[RunStep]:
        """The turn's steps, inserted together (one statement), then each call's follow-up
        in order: its events, its approval request, or its child run."""
        plans = await self._admit_children(tx, run, plan.plans)
        plan = Calls(plans)
        seq = self.state.next_seq()
        turn_index = run.turns
        run.turns += 1
        rows: list[dict[str, Any]] = []
        statuses = new_step_statuses(plan.plans)
        usage = self._turn_usage()
        for offset, (call, status) in enumerate(zip(plan.plans, statuses, strict=True)):
            refused = call.action is Action.REFUSE
            row = tx.step_row(
                run,
                seq=seq + offset,
                turn=turn_index,
                tool=call.tool,
                arguments=call.args,
                decision=call.decision.value if call.decision else None,
                # A refusal's reason is its error, not a policy decision.
                decision_reason=None if refused else call.reason or None,
                status=status,
                result=call.result if call.action in (Action.REFUSE, Action.DENY) else None,
                error=call.reason if refused else None,
                attempt=self.state.attempt if status in (StepStatus.RUNNING, StepStatus.PENDING) else None,
                usage=usage if offset == 0 else None,
            )
            rows.append(row)
        added = await tx.add_steps(rows)
        approved_for_run: list[Approval] = []
        for call, step in zip(plan.plans, added, strict=True):
            if call.action in (Action.REFUSE, Action.DENY):
                tx.step_started(run, step)
                tx.step_finished(run, step)
            elif call.action is Action.AWAIT_APPROVAL:
                deadline = expires_at(tx.now, rule_timeout_s=call.timeout_s,
                                      default_timeout_s=self.rt.settings.approval_timeout_s)  # fmt: skip
                approval = await tx.request_approval(run, step, reason=call.reason, expires_at=deadline)
                if approval.status == ApprovalStatus.APPROVED:
                    approved_for_run.append(approval)
            elif call.action is Action.START_CHILD:
                # The delegating tool runs right here: every child of this turn is created in
                # the transaction that records the turn, its step WAITING_CHILD (or FAILED
                # with the refusal the model sees).
                tx.step_started(run, step)
                await self._start_child(tx, run, step, targets)
            else:
                tx.step_started(run, step)
        for approval in approved_for_run:  # audited last: the audit head is the last lock taken
            await audit_approved_for_run(tx, run, approval)
        return added

    def _turn_usage(self) -> dict[str, Any] | None:
        """The usage of the turn being written now (the latest asked), for its first step."""
        turns = self.state.turn_usage
        if not turns:
            return None
        latest = max(turns)
        usage = turns.pop(latest)
        turns.clear()
        return usage

    async def _admit_children(self, tx: TreeTx, run: Run, plans: list[CallPlan]) -> list[CallPlan]:
        """The turn's delegations within the chain's budget, checked under the root lock (so
        siblings racing for the last of a budget cannot both have it): ``maxChildren`` of
        this run, ``maxTreeRuns`` of it and every ancestor, and no child at all once the
        chain's tokens, cost or wall time are spent. Those over it are refused, not created."""
        asked = sum(1 for p in plans if p.action is Action.START_CHILD)
        if not asked:
            return plans
        chain = await tx.chain_ledgers(self.rt.settings, run)
        for found in (
            spent(chain),
            admit(chain, "maxChildren", asked).refusal,
            admit(chain, "maxTreeRuns", asked).refusal,
        ):
            if found is None:
                continue
            admitted = 0 if found.key in SPENDABLE else int(found.remaining)
            plans = refuse_beyond(plans, admitted=admitted, code=ModelErrorCode.BUDGET_EXCEEDED,
                                  message=refusal_message(found), only=Action.START_CHILD)  # fmt: skip
            asked = min(asked, admitted)
        return plans

    async def _start_child(self, tx: TreeTx, run: Run, step: RunStep, targets: dict[str, Agent]) -> None:
        tool = self.registry.get(step.tool or "")
        assert tool is not None  # the planner only starts children through a registered tool
        ctx = self.state.tool_context(step.id, self.rt.settings)
        outcome = await call_state_tool(tool, tx, run, step, ctx, settings=self.rt.settings, agents=targets)
        await self._finish(tx, run, step, outcome)

    # -- steps ---------------------------------------------------------------------------

    async def start_step(self, tx: TreeTx, run: Run, step: RunStep) -> None:
        """PENDING -> RUNNING, in a transaction fenced by ``run`` (see the module docstring)."""
        if not await tx.start_step(run, step, attempt=self.state.attempt):
            raise LeaseLost(f"step {step.id} is no longer PENDING; someone else moved it")

    async def start(self, step: RunStep) -> None:
        """Start a PENDING step of an I/O tool, which then runs outside any transaction."""
        async with self._tx() as tx:
            await self.start_step(tx, await tx.fenced_run(self.state.run_id, self.state.attempt), step)

    async def run_state_step(self, step: RunStep, tool: Tool) -> None:
        """A STATE tool: started (if PENDING), executed and recorded in one transaction, so
        its writes commit with its result or not at all."""
        state = self.state
        async with self._tx() as tx:
            run = await tx.fenced_run(state.run_id, state.attempt)
            if step.status == StepStatus.PENDING:
                await self.start_step(tx, run, step)
            ctx = state.tool_context(step.id, self.rt.settings)
            outcome = await call_state_tool(tool, tx, run, step, ctx, settings=self.rt.settings)
            await self._finish(tx, run, step, outcome)

    async def record(self, step: RunStep, outcome: Outcome) -> None:
        """Record an I/O step's result now, in its own transaction."""
        self.state.unrecorded = (step, outcome)
        try:
            await self._write_unrecorded()
        except DETERMINISTIC_DB_ERRORS as exc:
            if not await self._refuse_pending(exc):
                raise

    async def _write_unrecorded(self) -> None:
        async with self._tx() as tx:
            await self._write_pending(tx, await tx.fenced_run(self.state.run_id, self.state.attempt))

    async def _refuse_pending(self, exc: Exception) -> bool:
        """The database refused what ran since the last write (a value too long for a column,
        a constraint): storing it again would fail again, and running the tools again could
        repeat side effects. So their steps fail, recorded as such; nothing is re-run.
        False when nothing was pending (the refusal was about something else)."""
        state = self.state
        if not state.has_unrecorded:
            return False
        log.warning("run %s: the database refused a result (%s)", state.run_id, _db_log_detail(exc))
        refusal = failed(
            ModelErrorCode.RESULT_NOT_STORED, f"the database refused the result: {_db_reason(exc)}"
        )
        if state.unrecorded is not None:
            state.unrecorded = (state.unrecorded[0], refusal)
        for read in state.reads:
            read.outcome = refusal
        await self._write_unrecorded()
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

    # -- the run -------------------------------------------------------------------------

    async def hold(self, reason: str) -> None:
        """Stop at this step boundary because a pause holds the run (docs/concepts/holds.md):
        what ran is recorded and the run goes back to QUEUED, held, in one transaction, so
        nothing new starts and nothing that ran is run again on release."""
        async with self._tx() as tx:
            run = await tx.fenced_run(self.state.run_id, self.state.attempt)
            if self.state.has_unrecorded:
                await self._write_pending(tx, run)
            await tx.hold(run, reason=reason)

    async def park(self) -> bool:
        """Wait for an operator or a child. Re-checked under the lock: a decision that landed
        while we were working means there is more to do now, so we do not park."""
        async with self._tx() as tx:
            run = await tx.fenced_run(self.state.run_id, self.state.attempt)
            status = waiting_status_for([StepStatus(s.status) for s in await tx.open_steps(run.id)])
            if status is None:
                return False
            await tx.set_run_status(run, status)
            return True

    async def fail(self, error: str, *, code: str | None = None) -> None:
        try:
            await self._fail_once(error, code)
        except DETERMINISTIC_DB_ERRORS as exc:
            if not await self._refuse_pending(exc):
                raise
            await self._fail_once(error, code)

    async def _fail_once(self, error: str, code: str | None) -> None:
        async with self._tx(with_parent=True) as tx:
            run = await tx.fenced_run(self.state.run_id, self.state.attempt)
            await self._write_pending(tx, run)
            await tx.set_run_status(run, RunStatus.FAILED, error=error, error_code=code)


def _db_reason(exc: Exception) -> str:
    """What the run shows for a value the database refused: our words, never the driver's
    message (which can quote the data, say a duplicate key's value)."""
    if isinstance(exc, DataError):
        return "a value does not fit its column"
    if isinstance(exc, IntegrityError):
        return "a value breaks a constraint of the table"
    return "the value was refused"


def _db_log_detail(exc: Exception) -> str:
    """What the log says: the driver's error class and number, never its message."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    number = args[0] if args and isinstance(args[0], int) else None
    return type(orig).__name__ + (f" {number}" if number is not None else "")
