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
from typing import Any

from app.domain.budgets import admit_calls, refusal_message, turn_cost_usd
from app.domain.engine_rules import HistoryItem
from app.domain.model_errors import ModelErrorCode
from app.domain.planner import (
    Action,
    Call,
    Calls,
    Fail,
    Finish,
    TurnPlan,
    plan_turn,
    refuse_beyond,
    refuse_loops,
)
from app.engine.base import FinalAnswer, Model, ProviderError, Turn, TurnContext
from app.engine.state import RunState
from app.services.transitions import LeaseLost
from app.services.transitions.usage import usage_dict

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


def plan(state: RunState, turn: Turn, *, max_identical: int) -> TurnPlan:
    """The planner's verdict on the model's turn (``state.asked_turn`` is the turn's index),
    within the run's own call budget: calls over ``maxCallsPerTurn`` or ``maxToolCalls``
    and repeated identical calls are refused, not executed (docs/concepts/budgets.md).
    The turn's usage is noted for the next write to charge."""
    usage: dict[str, Any] = usage_dict(turn.usage)
    usage["costUsd"] = turn_cost_usd(usage, state.price)
    usage["turns"] = 1
    model_turn = (
        Finish(turn.value) if isinstance(turn, FinalAnswer) else [Call(c.tool, c.args) for c in turn.calls]
    )
    verdict = plan_turn(
        model_turn, turns_used=state.asked_turn, tools=state.tools, chain=state.chain, limits=state.limits
    )
    if isinstance(verdict, Calls):
        plans = verdict.plans
        asked = sum(1 for p in plans if p.action is not Action.REFUSE)
        admission = admit_calls(run_id=state.run_id, calls=asked, limits=state.budget,
                                tool_calls_used=state.tool_calls_used)  # fmt: skip
        if admission.refusal is not None:
            plans = refuse_beyond(plans, admitted=admission.admitted, code=ModelErrorCode.BUDGET_EXCEEDED,
                                  message=refusal_message(admission.refusal))  # fmt: skip
        plans = refuse_loops(plans, counts=state.call_counts, max_identical=max_identical)
        calls = sum(1 for p in plans if p.action is not Action.REFUSE)
        state.tool_calls_used += calls
        usage["toolCalls"] = calls
        verdict = Calls(plans)
    state.spend(state.asked_turn, usage)
    return verdict


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
