"""The run loop (docs/architecture.md): claim, ask the model, plan, persist, execute, record, repeat.

This module only sequences I/O. What happens next is decided by pure functions: the loop's
own moves (``app.domain.engine_rules``: which step runs next, when to park, which reads
batch, what history the model sees) and the model's turn (``app.domain.planner``). The run's
state is one object (``state.RunState``); its writes are fenced tree transactions
(``persist.py`` over ``app.services.transitions``, the only writer of run, step and approval
states); the model is asked through ``turns.py``; tools only execute (``calls.py``). This
module holds no SQL.

Durability rules this module keeps:
- A step row exists (RUNNING, with its id) before an I/O tool runs, so a side-effecting tool
  always gets the same idempotency key, whichever worker (re)executes it. The exception:
  with a fast provider, consecutive turns of allowed READ I/O calls run first and are
  recorded together with the next write (``engine_rules.batches``). They have no side effects, so a
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
import time
from collections.abc import Iterator
from typing import Any

from app.clock import utcnow
from app.db.orm import RunStep
from app.domain.engine_rules import MoveKind, Outcome, ReadCall, batches, failed, model_history, next_move
from app.domain.errors import EnverifError
from app.domain.model_errors import ModelErrorCode
from app.domain.planner import CallPlan, Calls, Fail, ToolInfo, TurnPlan
from app.domain.policy import PolicyLink, chain_agent_ids, live_chain, parse_chain
from app.domain.runs import StepStatus
from app.engine import turns
from app.engine.base import Model, Tool, ToolKind
from app.engine.calls import call_tool
from app.engine.mcp_client import McpConnections
from app.engine.persist import RunWrites
from app.engine.providers import Providers
from app.engine.state import RunState
from app.engine.tools.agents import DELEGATE
from app.engine.tools.mcp import might_offer_mcp, workspace_tools
from app.engine.tools.registry import ToolRegistry, tool_kind
from app.events.output import OutputWriter
from app.events.stops import LiveRun, LiveRuns
from app.outages import OUTAGE_WARNINGS, is_outage, outage_of
from app.services import runs
from app.services.runtime import Runtime
from app.services.transitions import LeaseLost, read_steps

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "worker shutting down"
# How long a cancelled run waits for its hand-back write before giving it up.
RELEASE_WAIT_S = 10.0


async def execute_run(
    rt: Runtime,
    registry: ToolRegistry,
    run_id: int,
    *,
    owner: str,
    root_id: int | None = None,
    providers: Providers | None = None,
    stopping: asyncio.Event | None = None,
    mcp: McpConnections | None = None,
    live: LiveRuns | None = None,
) -> None:
    """Entry point of the ``execute_run`` job. Safe to call any number of times.

    ``providers`` and ``mcp`` (MCP sessions) are the worker's (workers/main.py); callers
    without them (tests) get private ones for this call. ``stopping`` is set when the worker
    stops: the run is then handed back at its next step boundary. ``live``: the worker's
    registry of the runs it executes, through which stop notices (a cancel, a pause) reach
    this run at once.
    """
    if providers is None or mcp is None:
        async with contextlib.AsyncExitStack() as stack:
            if providers is None:
                providers = await stack.enter_async_context(Providers(rt.settings))
            if mcp is None:
                mcp = McpConnections(rt.settings)
                stack.push_async_callback(mcp.aclose)
            return await execute_run(
                rt,
                registry,
                run_id,
                owner=owner,
                root_id=root_id,
                providers=providers,
                stopping=stopping,
                mcp=mcp,
                live=live,
            )
    generation = None if live is None else live.generation
    watched = rt.output_watch
    if watched is not None:
        # The claim's commit asks Redis whether a runOutput subscription watches the run.
        watched.setdefault(run_id, False)
    try:
        claimed = await runs.claim(rt, run_id, owner=owner, root_id=root_id)
    except BaseException:
        if watched is not None:
            watched.pop(run_id, None)
        raise
    if claimed is None:
        if watched is not None:
            watched.pop(run_id, None)
        return  # duplicate delivery, held, or the run was cancelled / taken meanwhile
    attempt = claimed.attempt
    executor = RunExecutor(rt, registry, claimed, providers, stopping, mcp=mcp)
    current = asyncio.current_task()
    assert current is not None
    if live is not None:
        run = claimed.run
        chain_agents = frozenset(chain_agent_ids(run.policy_chain))
        live.add(
            LiveRun(
                run.id, run.root_run_id or run.id, run.agent_id, run.workspace_id, executor.poke, chain_agents
            )
        )
        if live.generation != generation:
            executor.poke()  # a notice went by while the claim ran: it may have been ours
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
        if live is not None:
            live.discard(run_id)
        if watched is not None:
            watched.pop(run_id, None)
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


class RunExecutor:
    """Executes one claimed run: sequences its I/O (the model, tools, writes) as the pure
    rules say, over one ``RunState``. ``lease_lost`` and ``interruptible`` are how the lease
    renewer (``keep_lease``, a task of its own) and the loop tell each other what is going on."""

    def __init__(
        self,
        rt: Runtime,
        registry: ToolRegistry,
        claimed: runs.Claim,
        providers: Providers,
        stopping: asyncio.Event | None = None,
        *,
        mcp: McpConnections | None = None,
    ) -> None:
        self.rt = rt
        self.stopping = stopping
        self.mcp = mcp
        self.registry = registry
        self.providers = providers
        self.state = RunState.of_claim(claimed, rt.settings)
        self.writes = RunWrites(rt, registry, self.state)
        self.lease_lost = False
        self.job_ended = False
        self.interruptible = False
        # Why the run must stop at its next step boundary (its agent or workspace paused).
        self.held: str | None = None
        self._poked = asyncio.Event()
        self._snapshot: list[PolicyLink] | None = None
        self._current_policies = claimed.current_policies

    @property
    def run_id(self) -> int:
        return self.state.run_id

    @property
    def attempt(self) -> int:
        return self.state.attempt

    def poke(self) -> None:
        """A stop notice concerns this run: check the database now, not at the next renewal."""
        self._poked.set()

    async def keep_lease(self, worker_task: asyncio.Task[Any]) -> None:
        """Renew the lease every third of its length, and at once when poked by a stop
        notice. When it is gone (the run was cancelled or taken over), interrupt the run's
        I/O: a call in flight is cut off, and a write in progress is refused by its fence.
        When a pause holds the run, the loop stops at its next step boundary."""
        interval = self.rt.settings.lease_s / 3
        # Checked every turn, not only trusted to the cancel of the job's end: a renewer that
        # outlived its job would extend a RUNNING run's lease forever, and the sweeper would
        # never requeue it.
        while not (self.job_ended or worker_task.done()):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._poked.wait()
            self._poked.clear()
            if self.job_ended or worker_task.done():
                return
            try:
                check = await runs.renew_lease(
                    self.rt, self.run_id, attempt=self.attempt, chain=self.state.run.policy_chain
                )
            except Exception as exc:
                if is_outage(exc):
                    OUTAGE_WARNINGS.warn(
                        log, "lease renewals failed: %s unavailable (%s)", outage_of(exc), type(exc).__name__
                    )
                else:
                    log.warning("run %s: lease renewal failed", self.run_id, exc_info=True)
                continue
            self.held = check.held
            if check.current_policies is not None and self._snapshot is not None:
                # A policy tightened since the last read applies from the next decision on.
                self.state.chain = live_chain(self._snapshot, check.current_policies)
            if not check.ours:
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
        state = self.state
        try:
            model = self.providers.for_model(state.agent.model)
            self._snapshot = parse_chain(state.run.policy_chain)
            state.chain = live_chain(self._snapshot, self._current_policies)
        except EnverifError as exc:
            await self.writes.fail(f"agent configuration: {exc.message}")
            return
        state.fast = model.fast
        patterns = list(state.agent.tools or [])
        if self.mcp is not None and might_offer_mcp(patterns):
            # The workspace's MCP tools join the registry for this run: from here on they are
            # tools like the built-ins, under the same rules (app/engine/tools/mcp.py).
            async with self.rt.read_sessionmaker() as session:
                mcp_tools = await workspace_tools(
                    session, workspace_id=state.run.workspace_id, connections=self.mcp
                )
            if mcp_tools:
                self.registry = self.writes.registry = self.registry.with_tools(mcp_tools)
        state.offered = self.registry.specs(patterns)
        state.tools = {
            name: ToolInfo(
                risk=tool.risk,
                offered=self.registry.offered(patterns, name),
                delegates=name == DELEGATE,
                state=tool_kind(tool) is ToolKind.STATE,
            )
            for name in self.registry.names()
            if (tool := self.registry.get(name)) is not None
        }

        while True:
            if self.held is not None:
                await self.writes.hold(self.held)
                log.info("run %s: held at a step boundary (%s)", self.run_id, self.held)
                return
            if self._stop_here():
                await runs.release(
                    self.rt, self.run_id, attempt=self.attempt, reason=SHUTDOWN_REASON, abandoned=False
                )
                log.info("run %s: handed back at a step boundary (worker stopping)", self.run_id)
                return
            unrecorded = None if state.unrecorded is None else state.unrecorded[0].id
            move = next_move(state.steps, tools=state.tools, fast=state.fast, unrecorded=unrecorded)
            if move.kind is MoveKind.RUN_STATE_STEP:
                assert move.step is not None
                tool = self.registry.get(move.step.tool or "")
                assert tool is not None  # the rules only say so for a registered STATE tool
                await self.writes.run_state_step(move.step, tool)
            elif move.kind is MoveKind.RUN_STEP:
                step = move.step
                assert step is not None
                if step.status == StepStatus.PENDING:
                    await self.writes.start(step)
                outcome = await self._execute(step, self.registry.get(step.tool or ""))
                if move.record_now:
                    await self.writes.record(step, outcome)
                else:
                    # The result is committed together with whatever the model asks next.
                    state.unrecorded = (step, outcome)
            elif move.kind is MoveKind.PARK:
                if await self.writes.park():
                    return
                state.steps = await read_steps(self.rt.read_sessionmaker, self.run_id)
            else:
                plan = await self._next_plan(model)
                if await self.writes.apply(plan):
                    return

    def _stop_here(self) -> bool:
        """The worker is stopping and nothing done is waiting to be recorded with a later
        write (a fast provider's last result, batched READ calls)."""
        return self.stopping is not None and self.stopping.is_set() and not self.state.has_unrecorded

    async def _next_plan(self, model: Model) -> TurnPlan:
        """Ask the model and plan its turn; batchable READ turns are run on the spot and the
        model asked again (``engine_rules.batches``)."""
        state = self.state
        batch_started = time.monotonic()
        while True:
            unrecorded = None if state.unrecorded is None else (state.unrecorded[0].id, state.unrecorded[1])
            history, state.asked_turn = model_history(state.steps, unrecorded=unrecorded, reads=state.reads)
            if state.asked_turn >= state.limits.max_turns:
                return turns.out_of_turns(state)  # the model is not asked again
            # Live output (runOutput): the text belongs to the step this turn will write,
            # after the batched reads that are recorded with it.
            watch = self.rt.output_watch
            output = OutputWriter(
                self.rt.redis,
                self.rt.settings.redis_prefix,
                run_id=self.run_id,
                step_seq=state.next_seq() + len(state.reads),
                watched=None if watch is None else watch.get(self.run_id, False),
            )
            ctx = turns.turn_context(state, history, state.asked_turn, on_text=output.on_text)
            asked_at = utcnow()
            turn = await turns.ask(model, ctx, io=self._io(), run_id=self.run_id)
            answered_at = utcnow()
            await output.finish()
            if isinstance(turn, Fail):
                return turn  # the provider failed: so does the run
            plan = turns.plan(state, turn, max_identical=self.rt.settings.max_identical_calls)
            state.time_turn(state.asked_turn, asked_at, answered_at)
            elapsed_s = time.monotonic() - batch_started
            if not batches(
                plan, fast=state.fast, batched=len(state.reads), elapsed_s=elapsed_s, tools=state.tools
            ):
                return plan
            assert isinstance(plan, Calls)  # what batches() says yes to
            for call in plan.plans:
                state.reads.append(await self._execute_read(call))

    # -- tools ---------------------------------------------------------------------------

    async def _execute_read(self, plan: CallPlan) -> ReadCall:
        tool = self.registry.get(plan.tool)
        assert tool is not None  # the planner only runs registered tools
        settings = self.rt.settings
        started_at = utcnow()
        with self._io():
            outcome = await call_tool(
                tool, self.state.tool_context(None, settings), plan.args, settings=settings
            )
        return ReadCall(self.state.asked_turn, plan, outcome, started_at, utcnow())

    async def _execute(self, step: RunStep, tool: Tool | None) -> Outcome:
        if tool is None:  # the tool was unregistered since the step was created
            return failed(ModelErrorCode.UNKNOWN_TOOL, f"unknown tool: {step.tool}")
        settings = self.rt.settings
        ctx = self.state.tool_context(step.id, settings)
        with self._io():
            return await call_tool(tool, ctx, dict(step.arguments or {}), settings=settings)
