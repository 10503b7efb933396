"""The run loop (DESIGN §3): claim, ask the model, decide, execute, record, repeat.

Durability rules this module keeps:
- A step row exists (RUNNING, with its id) before its tool runs, so a side-effecting tool
  always gets the same idempotency key, whichever worker (re)executes it. The exception:
  with a fast provider, consecutive turns of allowed READ calls run first and are recorded
  together with the next write (``_batchable``). They have no side effects, so a crash
  before that write only means they run again.
- A result is recorded once: the write is fenced by the claimed attempt and only moves a
  RUNNING step to a terminal state. A step whose result was recorded is never run again.
- A crash between running a tool and recording its result leaves the step RUNNING; the
  next claim re-executes it (at-least-once, same idempotency key).
- Model turns are asked outside transactions; for providers marked ``fast`` (scripted) the
  next turn is computed before the previous result is committed, so recording a result and
  starting the next call share one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from app.clock import utcnow
from app.db.orm import Approval, Run, RunStep
from app.domain.errors import EnverifError
from app.domain.events import EventType
from app.domain.policy import Decision, RiskClass, effective_decision, parse_chain
from app.domain.runs import TERMINAL_STEP, WAITING_STEP, RunStatus, StepStatus, waiting_status_for
from app.engine.base import (
    FinalAnswer,
    HistoryItem,
    Provider,
    ProviderError,
    Tool,
    ToolCall,
    ToolCalls,
    ToolContext,
    ToolError,
    Turn,
    TurnContext,
)
from app.engine.providers import Providers
from app.engine.tools.registry import ToolRegistry
from app.services import runs
from app.services.runtime import Runtime
from app.services.transitions import LeaseLost, TreeTx, tree_tx

log = logging.getLogger(__name__)

OPEN = frozenset({StepStatus.PENDING, StepStatus.RUNNING})


# Bounds of a batch of READ calls recorded together (see RunExecutor._batchable).
READ_BATCH_MAX = 16
READ_BATCH_S = 0.25


@dataclass
class Outcome:
    status: StepStatus
    result: Any
    error: str | None = None


@dataclass
class ReadCall:
    """A READ call that ran but is not recorded yet (it will be, with the next write)."""

    turn: int
    call: ToolCall
    reason: str
    outcome: Outcome
    started_at: datetime
    finished_at: datetime


async def execute_run(
    rt: Runtime,
    registry: ToolRegistry,
    run_id: int,
    *,
    owner: str,
    root_id: int | None = None,
    providers: Providers | None = None,
) -> None:
    """Entry point of the ``execute_run`` job. Safe to call any number of times.

    ``providers`` is the worker's factory (workers/main.py); callers without one (tests)
    get a private one for this call.
    """
    if providers is None:
        async with Providers(rt.settings) as own:
            return await execute_run(rt, registry, run_id, owner=owner, root_id=root_id, providers=own)
    claimed = await runs.claim(rt, run_id, owner=owner, root_id=root_id)
    if claimed is None:
        return  # duplicate delivery, or the run was cancelled / taken meanwhile
    attempt = claimed.attempt
    executor = RunExecutor(rt, registry, claimed, providers)
    current = asyncio.current_task()
    assert current is not None
    renewer = asyncio.create_task(executor.keep_lease(current))
    try:
        await executor.drive()
    except LeaseLost:
        log.info("run %s: lease lost at attempt %s; stopping without writing", run_id, attempt)
    except Exception:
        # Infrastructure trouble (the database went away mid-run) or a bug: hand the run back
        # so it is tried again soon; the claim fails it once its attempts are used up.
        log.exception("run %s: attempt %s broke off", run_id, attempt)
        with contextlib.suppress(Exception):
            await runs.release(rt, run_id, attempt=attempt, reason="the worker hit an internal error")
    except asyncio.CancelledError:
        if executor.lease_lost:
            # Our own renewer cancelled us (the run was cancelled or taken over): absorb
            # exactly that cancellation, leaving any other pending one in force.
            current.uncancel()
            log.info("run %s: cancelled or taken over; stopped", run_id)
            return
        # Worker shutdown: hand the run back now rather than after the lease expires.
        with contextlib.suppress(Exception):
            await asyncio.shield(runs.release(rt, run_id, attempt=attempt, reason="worker shutting down"))
        raise
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer


class RunExecutor:
    def __init__(
        self, rt: Runtime, registry: ToolRegistry, claimed: runs.Claim, providers: Providers
    ) -> None:
        self.rt = rt
        self.registry = registry
        self.providers = providers
        self.run_id = claimed.run.id
        self.attempt = claimed.attempt
        self.run = claimed.run
        self.root_id = claimed.run.root_run_id or claimed.run.id
        self.agent = claimed.agent
        self.memories = claimed.memories
        # This worker's view of the run's steps. While we hold the fence, nobody else adds
        # or finishes our steps except by deciding an approval or ending a child (both only
        # touch WAITING steps), so the view is only re-read after waiting.
        self.steps = claimed.steps
        # Done but not yet written: one step's result, and batched READ calls.
        self.recorded: tuple[RunStep, Outcome] | None = None
        self.reads: list[ReadCall] = []
        self.asked_turn = 0
        self.lease_lost = False

    async def keep_lease(self, worker_task: asyncio.Task[Any]) -> None:
        """Renew the lease every third of its length; stop the work when it is gone."""
        interval = self.rt.settings.lease_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                ours = await runs.renew_lease(self.rt, self.run_id, attempt=self.attempt)
            except Exception:
                log.warning("run %s: lease renewal failed", self.run_id, exc_info=True)
                continue
            if not ours:
                self.lease_lost = True
                worker_task.cancel()
                return

    # -- the loop ------------------------------------------------------------------------

    async def drive(self) -> None:
        agent = self.agent
        try:
            self.provider: Provider = self.providers.for_model(agent.model)
            self.chain = parse_chain(self.run.policy_chain)
        except EnverifError as exc:
            await self._fail(f"agent configuration: {exc.message}")
            return
        self.fast = self.provider.fast
        self.offered = self.registry.specs(list(agent.tools or []))

        while True:
            calls = [s for s in self.steps if s.tool is not None]
            runnable = [s for s in calls if StepStatus(s.status) in OPEN]
            if runnable:
                step = runnable[0]
                if step.status == StepStatus.PENDING:
                    await self._mark_running(step)
                outcome = await self._execute(step)
                others_open = any(StepStatus(s.status) not in TERMINAL_STEP for s in calls if s.id != step.id)
                if others_open or not self.fast:
                    await self._record(step, outcome)
                    continue
                # The result is committed together with whatever the model asks next.
                self.recorded = (step, outcome)
            elif any(StepStatus(s.status) in WAITING_STEP for s in calls):
                if await self._park():
                    return
                async with self.rt.read_sessionmaker() as session:
                    self.steps = await _load_steps(session, self.run_id)
                continue
            turn = await self._ask()
            batch_started = time.monotonic()
            while turn is not None and self._batchable(turn, batch_started):
                assert isinstance(turn, ToolCalls)
                for call in turn.calls:
                    self.reads.append(await self._execute_read(call))
                turn = await self._ask()
            if turn is None or await self._apply(turn):
                return

    def _batchable(self, turn: Turn, batch_started: float) -> bool:
        """Whether to run this turn's calls right away and record them with the next write.

        Only for a fast (local) provider, and only when every call is an allowed READ tool:
        those have no side effects, so running one again after a crash is harmless and no
        step row (idempotency key) has to exist first. Everything else is persisted before
        it runs. The batch is bounded so live watchers still see progress promptly.
        """
        if not self.fast or not isinstance(turn, ToolCalls) or not turn.calls:
            return False
        if len(self.reads) >= READ_BATCH_MAX or time.monotonic() - batch_started > READ_BATCH_S:
            return False
        patterns = list(self.agent.tools or [])
        for call in turn.calls:
            tool = self.registry.get(call.tool)
            if (
                tool is None
                or tool.risk is not RiskClass.READ
                or not self.registry.offered(patterns, call.tool)
            ):
                return False
            if effective_decision(self.chain, call.tool, tool.risk).decision is not Decision.ALLOW:
                return False
        return True

    # -- model ---------------------------------------------------------------------------

    async def _ask(self) -> Turn | None:
        """The next turn, or None when the run was failed instead (provider gave up)."""
        history = []
        turn_index = 0
        for s in self.steps:
            if s.tool is None:
                continue
            status, result = (s.status, s.result)
            if self.recorded is not None and s.id == self.recorded[0].id:
                status, result = self.recorded[1].status.value, self.recorded[1].result
            history.append(HistoryItem(tool=s.tool, args=s.arguments or {}, status=status, result=result))
            turn_index = max(turn_index, s.turn + 1)
        for read in self.reads:
            history.append(HistoryItem(tool=read.call.tool, args=read.call.args, status=read.outcome.status.value,
                                       result=read.outcome.result))  # fmt: skip
            turn_index = max(turn_index, read.turn + 1)
        if turn_index >= self.rt.settings.max_turns:
            await self._fail(f"the run used its {self.rt.settings.max_turns} model turns")
            return None
        ctx = TurnContext(
            run_id=self.run.id,
            depth=self.run.depth,
            instructions=self.agent.instructions or "",
            input=self.run.input,
            memories=self.memories,
            tools=self.offered,
            history=history,
            turn=turn_index,
        )
        self.asked_turn = turn_index
        try:
            return await self.provider.next_turn(ctx)
        except ProviderError as exc:
            await self._fail(f"model provider failed: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("run %s: provider crashed", self.run_id)
            await self._fail(f"model provider crashed: {type(exc).__name__}: {exc}")
        return None

    # -- writes (all fenced) -------------------------------------------------------------

    async def _apply(self, turn: Turn) -> bool:
        """Persist the pending results and the turn. True when the run ended."""
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            if isinstance(turn, FinalAnswer):
                final = {
                    "tool": None,
                    "arguments": None,
                    "status": StepStatus.SUCCEEDED,
                    "result": turn.value,
                }
                await self._write_pending(tx, run, final=final)
                # Every step is finished (we only ask the model then), so there is no open
                # work to close: skip those queries.
                await tx.set_run_status(run, RunStatus.SUCCEEDED, result=turn.value, quiet=True)
                return True
            await self._write_pending(tx, run)
            seq = max((s.seq for s in self.steps), default=0) + 1
            added = await self._add_calls(tx, run, turn, seq)
        self.steps.extend(added)
        return False

    async def _write_pending(self, tx: TreeTx, run: Run, *, final: dict[str, Any] | None = None) -> None:
        """Record what ran since the last write: the result of a persisted step, and the
        batched READ calls (as finished steps, started and finished events together); with
        ``final``, the final answer's step too. The new steps go in one INSERT."""
        if self.recorded is not None:
            await self._finish(tx, run, *self.recorded)
            self.recorded = None
        seq = max((s.seq for s in self.steps), default=0) + 1
        rows = [
            tx.step_row(run, seq=seq + i, turn=read.turn, tool=read.call.tool, arguments=read.call.args,
                        status=read.outcome.status, decision=Decision.ALLOW.value, decision_reason=read.reason,
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

    async def _add_calls(self, tx: TreeTx, run: Run, turn: ToolCalls, seq: int) -> list[RunStep]:
        added: list[RunStep] = []
        turn_index = run.turns
        run.turns += 1
        started_one = False
        for offset, call in enumerate(turn.calls):
            common: dict[str, Any] = {
                "seq": seq + offset,
                "turn": turn_index,
                "tool": call.tool,
                "arguments": call.args,
            }
            tool = self.registry.get(call.tool)
            if tool is None or not self.registry.offered(list(self.agent.tools or []), call.tool):
                why = "unknown tool" if tool is None else "tool not offered to this agent"
                refusal = {"error": {"code": "UNKNOWN_TOOL", "message": f"{why}: {call.tool}"}}
                step = await tx.add_step(run, **common, status=StepStatus.FAILED, error=why, result=refusal)
                tx.step_started(run, step)
                tx.step_finished(run, step)
                added.append(step)
                continue
            decision = effective_decision(self.chain, call.tool, tool.risk)
            common |= {"decision": decision.decision.value, "decision_reason": decision.reason}
            if decision.decision is Decision.DENY:
                denial = {"error": {"code": "DENIED", "message": decision.reason}}
                step = await tx.add_step(run, **common, status=StepStatus.DENIED, result=denial)
                tx.step_started(run, step)
                tx.step_finished(run, step)
            elif decision.decision is Decision.REQUIRE_APPROVAL:
                step = await tx.add_step(run, **common, status=StepStatus.WAITING_APPROVAL)
                await self._request_approval(tx, run, step, decision.reason)
            else:
                # The first allowed call starts right away (one transaction saved); the rest
                # wait their turn as PENDING and are executed in seq order.
                status = StepStatus.PENDING if started_one else StepStatus.RUNNING
                started_one = True
                step = await tx.add_step(run, **common, status=status, attempt=self.attempt)
                tx.step_started(run, step)
            added.append(step)
        return added

    async def _request_approval(self, tx: TreeTx, run: Run, step: RunStep, reason: str) -> None:
        approval = Approval(workspace_id=run.workspace_id, run_id=run.id, root_run_id=tx.root.id, step_id=step.id,
                            tool=step.tool, arguments=step.arguments, status="PENDING", requested_at=tx.now)  # fmt: skip
        tx.session.add(approval)
        await tx.session.flush()
        await tx.session.execute(update(RunStep).where(RunStep.id == step.id).values(approval_id=approval.id))
        step.approval_id = approval.id
        tx.step_started(run, step)
        tx.emit(run, EventType.APPROVAL_REQUESTED, status="PENDING", step_id=step.id,
                payload={"approvalId": approval.id, "tool": step.tool, "reason": reason})  # fmt: skip

    async def _mark_running(self, step: RunStep) -> None:
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            row = await tx.session.get_one(RunStep, step.id, with_for_update=True)
            if row.status != StepStatus.PENDING:
                raise LeaseLost(f"step {step.id} is {row.status}; someone else moved it")
            row.status = StepStatus.RUNNING.value
            row.started_at = tx.now
            row.executed_attempt = self.attempt
            tx.step_started(run, row)
        step.status = StepStatus.RUNNING.value

    async def _record(self, step: RunStep, outcome: Outcome) -> None:
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            await self._finish(tx, run, step, outcome)

    async def _finish(self, tx: TreeTx, run: Run, step: RunStep, outcome: Outcome) -> None:
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
        async with tree_tx(self.rt, self.run_id, root_id=self.root_id) as tx:
            run = await tx.fenced_run(self.run_id, self.attempt)
            await self._write_pending(tx, run)
            await tx.set_run_status(run, RunStatus.FAILED, error=error)

    # -- tools ---------------------------------------------------------------------------

    async def _execute_read(self, call: ToolCall) -> ReadCall:
        tool = self.registry.get(call.tool)
        assert tool is not None  # checked by _batchable
        started_at = utcnow()
        outcome = await self._run_tool(tool, call.tool, call.args, step_id=None)
        reason = effective_decision(self.chain, call.tool, tool.risk).reason
        return ReadCall(self.asked_turn, call, reason, outcome, started_at, utcnow())

    async def _execute(self, step: RunStep) -> Outcome:
        tool = self.registry.get(step.tool or "")
        if tool is None:  # the tool was unregistered since the step was created
            return Outcome(
                StepStatus.FAILED, {"error": {"code": "UNKNOWN_TOOL", "message": step.tool}}, "unknown tool"
            )
        return await self._run_tool(tool, step.tool or "", dict(step.arguments or {}), step_id=step.id)

    async def _run_tool(self, tool: Tool, name: str, args: dict[str, Any], *, step_id: int | None) -> Outcome:
        ctx = ToolContext(
            workspace_id=self.run.workspace_id,
            agent_id=self.run.agent_id,
            run_id=self.run_id,
            step_id=step_id,
            settings=self.rt.settings,
        )
        try:
            result = await tool.run(ctx, args)
        except ToolError as exc:
            return Outcome(StepStatus.FAILED, exc.as_result(), f"{exc.code}: {exc.message}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("run %s step %s: tool %s raised", self.run_id, step_id, name, exc_info=True)
            message = f"{type(exc).__name__}: {exc}"
            return Outcome(StepStatus.FAILED, {"error": {"code": "TOOL_FAILED", "message": message}}, message)
        return Outcome(StepStatus.SUCCEEDED, result)


async def _load_steps(session: Any, run_id: int) -> list[RunStep]:
    return list(await session.scalars(select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq)))
