"""The run loop (docs/architecture.md): claim, ask the model, plan, persist, execute, record, repeat.

The model's turn is decided by the pure planner (``app.domain.planner``); its plans are
applied in one fenced tree transaction (``app.services.transitions``, the only writer of
run, step and approval states); tools only execute (``app.engine.calls``). This module holds
no SQL.

Durability rules this module keeps:
- A step row exists (RUNNING, with its id) before an I/O tool runs, so a side-effecting tool
  always gets the same idempotency key, whichever worker (re)executes it. The exception:
  with a fast provider, consecutive turns of allowed READ I/O calls run first and are
  recorded together with the next write (``_batchable``). They have no side effects, so a
  crash before that write only means they run again.
- A STATE tool (memory, delegation) runs inside the transaction that records its result.
- A result is recorded once: the write is fenced by the claimed attempt and only moves a
  RUNNING step to a terminal state. A step whose result was recorded is never run again.
- A crash between running an I/O tool and recording its result leaves the step RUNNING; the
  next claim re-executes it (at-least-once, same idempotency key).
- The lease renewer interrupts only I/O (a tool call, a model turn). Writes are fenced
  anyway, and the work after a commit (publishing, enqueueing) is never cut short.
- A worker that is stopping (SIGTERM) sets ``stopping``: the run is handed back to the queue
  at its next step boundary, where nothing done is left unrecorded. A run cancelled instead
  (its worker's grace ran out) is handed back too, and that write is waited for to its end
  even through a further cancellation: abandoned, its transaction would stay open on a
  connection whose engine the worker is about to dispose (on SQLite, the whole database would
  stay write-locked).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import utcnow
from app.db.orm import RunStep
from app.domain.errors import EnverifError
from app.domain.planner import (
    CallPlan,
    Limits,
    ToolInfo,
)
from app.domain.policy import parse_chain
from app.domain.runs import TERMINAL_STEP, WAITING_STEP, StepStatus
from app.engine.base import (
    Provider,
    Tool,
    ToolContext,
    ToolKind,
)
from app.engine.calls import Outcome, call_tool, failed
from app.engine.persist import RunWrites
from app.engine.providers import Providers
from app.engine.tools.agents import DELEGATE
from app.engine.tools.registry import ToolRegistry, tool_kind
from app.engine.turns import ModelTurns
from app.outages import OUTAGE_WARNINGS, is_outage, outage_of
from app.services import runs
from app.services.runtime import Runtime
from app.services.transitions import LeaseLost, read_steps

log = logging.getLogger(__name__)

OPEN = frozenset({StepStatus.PENDING, StepStatus.RUNNING})

# Bounds of a batch of READ calls recorded together (see RunExecutor._batchable).
READ_BATCH_MAX = 16
READ_BATCH_S = 0.25

SHUTDOWN_REASON = "worker shutting down"
# How long a cancelled run waits for its hand-back write before giving it up.
RELEASE_WAIT_S = 10.0


@dataclass
class ReadCall:
    """A READ call that ran but is not recorded yet (it will be, with the next write)."""

    turn: int
    plan: CallPlan
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
    stopping: asyncio.Event | None = None,
) -> None:
    """Entry point of the ``execute_run`` job. Safe to call any number of times.

    ``providers`` is the worker's factory (workers/main.py); callers without one (tests)
    get a private one for this call. ``stopping`` is set when the worker stops: the run is
    then handed back at its next step boundary.
    """
    if providers is None:
        async with Providers(rt.settings) as own:
            return await execute_run(
                rt, registry, run_id, owner=owner, root_id=root_id, providers=own, stopping=stopping
            )
    claimed = await runs.claim(rt, run_id, owner=owner, root_id=root_id)
    if claimed is None:
        return  # duplicate delivery, or the run was cancelled / taken meanwhile
    attempt = claimed.attempt
    executor = RunExecutor(rt, registry, claimed, providers, stopping)
    current = asyncio.current_task()
    assert current is not None
    renewer = asyncio.create_task(executor.keep_lease(current))
    try:
        await executor.drive()
    except LeaseLost:
        log.info("run %s: lease lost at attempt %s; stopping without writing", run_id, attempt)
    except Exception as exc:
        if current.cancelling():
            # A cancellation that an error replaced on its way out (a driver or a pool
            # listener failing while SQLAlchemy cleaned up after it): still a cancellation.
            if executor.lease_lost:
                current.uncancel()
                log.info("run %s: cancelled or taken over; stopped", run_id)
                return
            await _release_to_the_end(rt, run_id, attempt)
            raise asyncio.CancelledError from exc
        # Infrastructure trouble (the database went away mid-run) or a bug: hand the run back
        # so it is tried again soon; it counts as abandoned, and the claim fails the run once
        # too many claims in a row made no progress. An outage is expected: one warning per
        # worker now and then, not a traceback per run.
        if is_outage(exc):
            OUTAGE_WARNINGS.warn(
                log,
                "runs broke off: %s unavailable (%s); handing them back",
                outage_of(exc),
                type(exc).__name__,
            )
        else:
            log.exception("run %s: attempt %s broke off", run_id, attempt)
        with contextlib.suppress(Exception):
            await runs.release(
                rt, run_id, attempt=attempt, reason="the worker hit an internal error", abandoned=True
            )
    except asyncio.CancelledError:
        if executor.lease_lost:
            # Our own renewer cancelled us (the run was cancelled or taken over): absorb
            # exactly that cancellation, leaving any other pending one in force.
            current.uncancel()
            log.info("run %s: cancelled or taken over; stopped", run_id)
            return
        # Worker shutdown: hand the run back now rather than after the lease expires.
        await _release_to_the_end(rt, run_id, attempt)
        raise
    finally:
        executor.job_ended = True  # the renewer stops even if this cancel is lost
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer


async def _release_to_the_end(rt: Runtime, run_id: int, attempt: int) -> None:
    """Hand a cancelled run back, waiting for the write to end even if cancelled again (the
    caller re-raises its cancellation afterwards). The write is one short transaction; should
    the database not answer it within ``RELEASE_WAIT_S``, it is given up (the lease expires
    instead), so a stopping worker never hangs on it."""
    release = asyncio.ensure_future(
        runs.release(rt, run_id, attempt=attempt, reason=SHUTDOWN_REASON, abandoned=False)
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RELEASE_WAIT_S
    while not release.done() and loop.time() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({release}, timeout=deadline - loop.time())
    if not release.done():
        release.cancel()
        log.warning("run %s: handing it back took over %.0f s; its lease will expire", run_id, RELEASE_WAIT_S)
        return
    if release.cancelled() or (exc := release.exception()) is None or isinstance(exc, LeaseLost):
        return  # handed back, or no longer ours to hand back
    log.warning("run %s: could not hand it back (%s); its lease will expire", run_id, type(exc).__name__)


class RunExecutor(ModelTurns, RunWrites):
    def __init__(
        self,
        rt: Runtime,
        registry: ToolRegistry,
        claimed: runs.Claim,
        providers: Providers,
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.rt = rt
        self.stopping = stopping
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
        self.job_ended = False
        self.interruptible = False
        self.limits = Limits(max_turns=rt.settings.max_turns, max_value_bytes=rt.settings.max_result_bytes)

    async def keep_lease(self, worker_task: asyncio.Task[Any]) -> None:
        """Renew the lease every third of its length. When it is gone, interrupt the run's
        I/O; a write in progress is refused by its fence instead."""
        interval = self.rt.settings.lease_s / 3
        # Checked every turn, not only trusted to the cancel of the job's end: a renewer that
        # outlived its job would extend a RUNNING run's lease forever, and the sweeper would
        # never requeue it.
        while not (self.job_ended or worker_task.done()):
            await asyncio.sleep(interval)
            if self.job_ended or worker_task.done():
                return
            try:
                ours = await runs.renew_lease(self.rt, self.run_id, attempt=self.attempt)
            except Exception as exc:
                if is_outage(exc):
                    OUTAGE_WARNINGS.warn(
                        log, "lease renewals failed: %s unavailable (%s)", outage_of(exc), type(exc).__name__
                    )
                else:
                    log.warning("run %s: lease renewal failed", self.run_id, exc_info=True)
                continue
            if not ours:
                self.lease_lost = True
                if self.interruptible:
                    worker_task.cancel()
                return

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """Mark I/O the renewer may interrupt (a tool call, a model turn)."""
        if self.lease_lost:
            raise LeaseLost(f"run {self.run_id}: lease lost")
        self.interruptible = True
        try:
            yield
        finally:
            self.interruptible = False

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
        patterns = list(agent.tools or [])
        self.offered = self.registry.specs(patterns)
        self.tools = {
            name: ToolInfo(
                risk=tool.risk, offered=self.registry.offered(patterns, name), delegates=name == DELEGATE
            )
            for name in self.registry.names()
            if (tool := self.registry.get(name)) is not None
        }

        while True:
            if self._stop_here():
                await runs.release(
                    self.rt, self.run_id, attempt=self.attempt, reason=SHUTDOWN_REASON, abandoned=False
                )
                log.info("run %s: handed back at a step boundary (worker stopping)", self.run_id)
                return
            calls = [s for s in self.steps if s.tool is not None]
            runnable = [s for s in calls if StepStatus(s.status) in OPEN]
            if runnable:
                step = runnable[0]
                tool = self.registry.get(step.tool or "")
                if tool is not None and tool_kind(tool) is ToolKind.STATE:
                    await self._run_state_step(step, tool)
                    continue
                if step.status == StepStatus.PENDING:
                    await self._mark_running(step)
                outcome = await self._execute(step, tool)
                others_open = any(StepStatus(s.status) not in TERMINAL_STEP for s in calls if s.id != step.id)
                if others_open or not self.fast:
                    await self._record(step, outcome)
                    continue
                # The result is committed together with whatever the model asks next.
                self.recorded = (step, outcome)
            elif any(StepStatus(s.status) in WAITING_STEP for s in calls):
                if await self._park():
                    return
                self.steps = await read_steps(self.rt.read_sessionmaker, self.run_id)
                continue
            plan = await self._next_plan()
            if plan is None or await self._apply(plan):
                return

    def _stop_here(self) -> bool:
        """The worker is stopping and nothing done is waiting to be recorded with a later
        write (a fast provider's last result, batched READ calls)."""
        return (
            self.stopping is not None and self.stopping.is_set() and self.recorded is None and not self.reads
        )

    # -- tools ---------------------------------------------------------------------------

    def _ctx(self, step_id: int | None) -> ToolContext:
        return ToolContext(
            workspace_id=self.run.workspace_id,
            agent_id=self.run.agent_id,
            run_id=self.run_id,
            step_id=step_id,
            settings=self.rt.settings,
        )

    async def _execute_read(self, plan: CallPlan) -> ReadCall:
        tool = self.registry.get(plan.tool)
        assert tool is not None  # the planner only runs registered tools
        started_at = utcnow()
        with self._io():
            outcome = await call_tool(tool, self._ctx(None), plan.args, settings=self.rt.settings)
        return ReadCall(self.asked_turn, plan, outcome, started_at, utcnow())

    async def _execute(self, step: RunStep, tool: Tool | None) -> Outcome:
        if tool is None:  # the tool was unregistered since the step was created
            return failed("UNKNOWN_TOOL", f"unknown tool: {step.tool}")
        with self._io():
            return await call_tool(
                tool, self._ctx(step.id), dict(step.arguments or {}), settings=self.rt.settings
            )
