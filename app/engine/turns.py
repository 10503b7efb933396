"""The run loop's side of the model: what it is shown, asking it, and planning its answer.

The model is asked outside any transaction. What it sees (``engine_rules.model_history``)
and what its turn means (``planner.plan_turn``) are pure decisions; this module converts
between the provider's types (``app.engine.base``) and the planner's, and turns a provider's
failure into the run's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from app.domain.engine_rules import HistoryItem
from app.domain.planner import Call, Fail, Finish, TurnPlan, plan_turn
from app.engine.base import FinalAnswer, Model, ProviderError, Turn, TurnContext
from app.engine.state import RunState
from app.services.transitions import LeaseLost

log = logging.getLogger(__name__)


def turn_context(
    state: RunState,
    history: list[HistoryItem],
    turn: int,
    *,
    on_text: Callable[[str], Awaitable[None]] | None = None,
) -> TurnContext:
    return TurnContext(
        run_id=state.run.id,
        depth=state.run.depth,
        instructions=state.agent.instructions or "",
        input=state.run.input,
        memories=state.memories,
        tools=state.offered,
        history=history,
        turn=turn,
        on_text=on_text,
    )


def plan(state: RunState, turn: Turn) -> TurnPlan:
    """The planner's verdict on the model's turn (``state.asked_turn`` is the turn's index)."""
    model_turn = (
        Finish(turn.value) if isinstance(turn, FinalAnswer) else [Call(c.tool, c.args) for c in turn.calls]
    )
    return plan_turn(
        model_turn, turns_used=state.asked_turn, tools=state.tools, chain=state.chain, limits=state.limits
    )


def out_of_turns(state: RunState) -> Fail:
    """The run used its turns: it fails without the model being asked again."""
    verdict = plan_turn(
        [], turns_used=state.asked_turn, tools=state.tools, chain=state.chain, limits=state.limits
    )
    assert isinstance(verdict, Fail)
    return verdict


async def ask(
    model: Model, ctx: TurnContext, *, io: contextlib.AbstractContextManager[None], run_id: int
) -> Turn | Fail:
    """The model's next turn, or the failure the run ends with (the provider gave up, or
    crashed). ``io`` marks the call as I/O the lease renewer may interrupt.

    A crash's message names its type only: a provider's exception can quote whatever the
    remote end sent, and a run's error is readable by every viewer of the workspace.
    """
    try:
        with io:
            return await model.next_turn(ctx)
    except ProviderError as exc:
        return Fail(f"model provider failed: {exc} [{exc.code}]")
    except (asyncio.CancelledError, LeaseLost):
        raise
    except Exception as exc:
        log.exception("run %s: provider crashed", run_id)
        return Fail(f"model provider crashed: {type(exc).__name__}")
