"""Executing one tool call: under a timeout, with its result reduced to strict JSON.

Whatever a tool does — returns a ``datetime``, NaN or 5 MB, raises, hangs — the call ends
as an ``Outcome`` that can be stored: a tool result is written once, so a value that cannot
be stored must fail its step (the model sees why), never send the run back to be executed
again as if the infrastructure had broken.

STATE tools run here too, inside their step's transaction (``StepWriter``), under a
savepoint (unless a tool's one write cannot leave anything behind): a tool that fails leaves
none of its writes and none of its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.orm import Run, RunStep
from app.domain.engine_rules import Outcome, failed
from app.domain.jsonvalue import NotStorable, strict_json
from app.domain.model_errors import ModelErrorCode
from app.domain.run_events import EventType
from app.domain.runs import StepStatus
from app.engine.base import ChildStarted, Tool, ToolContext, ToolError
from app.engine.tools.registry import tool_timeout_s
from app.services.transitions import NewRun, TreeTx

log = logging.getLogger(__name__)


def stored_outcome(raw: Any, *, max_bytes: int, max_depth: int) -> Outcome:
    try:
        stored = strict_json(raw, max_bytes=max_bytes, max_depth=max_depth, what="the tool result")
        return Outcome(StepStatus.SUCCEEDED, stored)
    except NotStorable as exc:
        return failed(exc.code, exc.message)


async def call_tool(tool: Tool, ctx: ToolContext, args: dict[str, Any], *, settings: Any) -> Outcome:
    """Run ``tool`` and turn whatever happens into an Outcome. Only cancellation escapes."""
    limit_s = tool_timeout_s(tool, settings.tool_timeout_s)
    try:
        async with asyncio.timeout(limit_s) as deadline:
            raw = await tool.run(ctx, args)
    except ToolError as exc:
        outcome = failed(exc.code, exc.message)
        outcome.redacted_arguments = exc.redacted_arguments
        return outcome
    except TimeoutError as exc:
        if deadline.expired():
            return failed(ModelErrorCode.TIMEOUT, f"{tool.name} did not finish within {limit_s:g} s")
        return _crashed(tool, ctx, exc)
    except (asyncio.CancelledError, OperationalError, InterfaceError):
        # The database went away under a STATE tool: infrastructure, not the tool's fault;
        # the run is handed back and the call made again (nothing of it was committed).
        raise
    except Exception as exc:
        return _crashed(tool, ctx, exc)
    if isinstance(raw, ChildStarted) and ctx.writer is not None:
        return Outcome(StepStatus.WAITING_CHILD, None, child_run_id=raw.run_id)
    return stored_outcome(raw, max_bytes=settings.max_result_bytes, max_depth=settings.max_json_depth)


def _crashed(tool: Tool, ctx: ToolContext, exc: Exception) -> Outcome:
    log.warning("run %s step %s: tool %s raised", ctx.run_id, ctx.step_id, tool.name, exc_info=exc)
    return failed(ModelErrorCode.TOOL_FAILED, f"{type(exc).__name__}: {exc}")


@dataclass
class StepWriter:
    """The ``RunWriter`` of one STATE tool call: the step's fenced tree transaction. Events
    are held until the tool succeeded, so a failed call leaves none."""

    tx: TreeTx
    run: Run
    step: RunStep
    events: list[tuple[EventType, dict[str, Any]]] = field(default_factory=list)
    agents: Mapping[str, Any] = field(default_factory=dict)

    @property
    def session(self) -> AsyncSession:
        return self.tx.session

    @property
    def now(self) -> datetime:
        return self.tx.now

    @property
    def workspace_id(self) -> int:
        return self.run.workspace_id

    @property
    def agent_id(self) -> int:
        return self.run.agent_id

    @property
    def run_id(self) -> int:
        return self.run.id

    @property
    def step_id(self) -> int:
        return self.step.id

    def emit(self, type: EventType, *, payload: dict[str, Any]) -> None:
        self.events.append((type, payload))

    async def start_child(self, *, agent: Any, task: str, input: dict[str, Any]) -> int:
        new = NewRun.child(self.run, agent=agent, task=task, input=input, parent_step_id=self.step.id)
        return (await self.tx.create_run(new)).id


class _Undo(Exception):
    """Roll the savepoint back: the tool call failed."""


async def call_state_tool(
    tool: Tool,
    tx: TreeTx,
    run: Run,
    step: RunStep,
    ctx: ToolContext,
    *,
    settings: Any,
    agents: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run a STATE tool inside ``tx`` (fenced by the caller) under a savepoint, unless the
    tool says it needs none (``needs_savepoint = False``: its only write is one statement,
    its last act, so a failed call wrote nothing). ``agents``: agents by name the loop read
    before the transaction (``RunWriter.agents``)."""
    writer = StepWriter(tx, run, step, agents=agents or {})
    mark = tx.event_mark()
    ctx = ToolContext(ctx.workspace_id, ctx.agent_id, ctx.run_id, ctx.step_id, ctx.settings, writer=writer)
    outcome: Outcome | None = None
    savepoint = (
        tx.session.begin_nested() if getattr(tool, "needs_savepoint", True) else contextlib.nullcontext()
    )
    try:
        async with savepoint:
            outcome = await call_tool(tool, ctx, dict(step.arguments or {}), settings=settings)
            if outcome.status not in (StepStatus.SUCCEEDED, StepStatus.WAITING_CHILD):
                raise _Undo
    except _Undo:
        writer.events.clear()
    assert outcome is not None
    if outcome.status is not StepStatus.SUCCEEDED and outcome.child_run_id is None:
        tx.drop_events_after(mark)  # a child's RUN_CREATED went with the undone savepoint
    for type, payload in writer.events:
        tx.emit(run, type, step_id=step.id, payload=payload)
    if outcome.redacted_arguments is not None:
        # Outside the undone savepoint, in the transaction that records the refusal.
        await tx.redact_arguments(step, outcome.redacted_arguments)
    return outcome
