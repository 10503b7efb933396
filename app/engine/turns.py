"""The run loop's side of the model: asking for the next turn and planning it.

Mixed into ``engine.loop.RunExecutor``. The model is asked outside any transaction; its turn
is decided by the pure planner (``app.domain.planner``). Turns of allowed READ I/O calls of a
fast (local) provider are run on the spot and recorded with the next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from app.db.orm import Run, RunStep
from app.domain.planner import Call, CallPlan, Calls, Fail, Finish, Limits, ToolInfo, TurnPlan, plan_turn
from app.domain.planner import runs_ahead as reads_only
from app.domain.policy import PolicyLink
from app.engine.base import (
    FinalAnswer,
    HistoryItem,
    Provider,
    ProviderError,
    ToolKind,
    ToolSpec,
    Turn,
    TurnContext,
)
from app.engine.tools.registry import ToolRegistry, tool_kind
from app.services.transitions import LeaseLost

if TYPE_CHECKING:
    from app.db.orm import Agent
    from app.engine.calls import Outcome
    from app.engine.loop import ReadCall

log = logging.getLogger(__name__)

# Bounds of a batch of READ calls recorded together (see ModelTurns._batchable).
READ_BATCH_MAX = 16
READ_BATCH_S = 0.25


class ModelTurns:
    registry: ToolRegistry
    run: Run
    run_id: int
    agent: Agent
    memories: list[dict[str, Any]]
    steps: list[RunStep]
    recorded: tuple[RunStep, Outcome] | None
    reads: list[ReadCall]
    asked_turn: int
    limits: Limits
    provider: Provider
    fast: bool
    offered: list[ToolSpec]
    tools: dict[str, ToolInfo]
    chain: list[PolicyLink]

    if TYPE_CHECKING:  # provided by the classes this is mixed with; declared for type checkers only

        def _io(self) -> contextlib.AbstractContextManager[None]: ...  # RunExecutor
        async def _fail(self, error: str) -> None: ...  # RunWrites
        async def _execute_read(self, plan: CallPlan) -> ReadCall: ...  # RunExecutor

    async def _next_plan(self) -> TurnPlan | None:
        """Ask the model and plan its turn; batchable READ turns are run on the spot and the
        model asked again. None when the run was failed instead."""
        batch_started = time.monotonic()
        while True:
            turn = await self._ask()
            if turn is None:
                return None
            plan = self._plan(turn)
            if not self._batchable(plan, batch_started):
                return plan
            assert isinstance(plan, Calls)
            for call in plan.plans:
                self.reads.append(await self._execute_read(call))

    def _plan(self, turn: Turn) -> TurnPlan:
        model_turn = (
            Finish(turn.value)
            if isinstance(turn, FinalAnswer)
            else [Call(c.tool, c.args) for c in turn.calls]
        )
        return plan_turn(
            model_turn, turns_used=self.asked_turn, tools=self.tools, chain=self.chain, limits=self.limits
        )

    def _batchable(self, plan: TurnPlan, batch_started: float) -> bool:
        """Whether to run this turn's calls right away and record them with the next write:
        only for a fast (local) provider, only allowed READ calls (``planner.runs_ahead``) of
        plain I/O tools, and bounded so live watchers still see progress promptly."""
        if not self.fast or not isinstance(plan, Calls) or not reads_only(plan.plans):
            return False
        if len(self.reads) >= READ_BATCH_MAX or time.monotonic() - batch_started > READ_BATCH_S:
            return False
        return all(self._kind(p.tool) is ToolKind.IO for p in plan.plans)

    def _kind(self, name: str) -> ToolKind | None:
        tool = self.registry.get(name)
        return None if tool is None else tool_kind(tool)

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
            history.append(HistoryItem(tool=read.plan.tool, args=read.plan.args, status=read.outcome.status.value,
                                       result=read.outcome.result))  # fmt: skip
            turn_index = max(turn_index, read.turn + 1)
        self.asked_turn = turn_index
        if turn_index >= self.limits.max_turns:
            # Out of turns: the planner fails the run without asking the model again.
            await self._out_of_turns()
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
        try:
            with self._io():
                return await self.provider.next_turn(ctx)
        except ProviderError as exc:
            await self._fail(f"model provider failed: {exc}")
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            log.exception("run %s: provider crashed", self.run_id)
            await self._fail(f"model provider crashed: {type(exc).__name__}: {exc}")
        return None

    async def _out_of_turns(self) -> None:
        plan = plan_turn(
            [], turns_used=self.asked_turn, tools=self.tools, chain=self.chain, limits=self.limits
        )
        assert isinstance(plan, Fail)
        await self._fail(plan.error)
