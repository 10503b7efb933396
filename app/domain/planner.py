"""Deciding a model turn (docs/architecture.md, the run loop): pure, no I/O.

Given what the run can see of the tools, its policy chain, how many turns it used and the
model's turn, ``plan_turn`` says what happens, call by call::

    final answer                 -> Finish(value)         (or Fail: not storable)
    turn budget used up          -> Fail(error)
    unknown / not offered tool   -> Refuse (FAILED step, the model sees UNKNOWN_TOOL)
    arguments not storable       -> Refuse (FAILED step, the model sees the reason)
    a memory write of a secret   -> Refuse (FAILED step, CREDENTIAL_REJECTED, arguments redacted)
    policy DENY                  -> Deny   (DENIED step, the model sees the denial)
    policy REQUIRE_APPROVAL      -> AwaitApproval (step and run wait for an operator)
    ALLOW, a tool that delegates -> StartChild (step and run wait for the child)
    ALLOW                        -> RunTool

The engine applies the plans of one turn in one fenced transaction; tools only execute.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.domain.credentials import Screened, screen_memory_write
from app.domain.jsonvalue import MAX_JSON_DEPTH, NotStorable, strict_json
from app.domain.model_errors import ModelErrorCode, model_error
from app.domain.policy import Decision, PolicyLink, RiskClass, effective_decision

# Tools whose arguments the credential guard screens when the call is planned: what they
# would store (memory.remember's key, value and tags) must never hold a secret.
CREDENTIAL_SCREENS: Final[Mapping[str, Callable[[Mapping[str, Any]], Screened | None]]] = {
    "memory.remember": screen_memory_write,
}


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """What the planner needs to know about a registered tool."""

    risk: RiskClass
    offered: bool  # matched by the agent's tool patterns
    delegates: bool = False  # its call starts a child run (agents.delegate)
    state: bool = False  # it runs inside its step's transaction (a STATE tool: memory, delegation)


@dataclass(frozen=True, slots=True)
class Call:
    tool: str
    args: Any


class Action(enum.StrEnum):
    REFUSE = "REFUSE"
    DENY = "DENY"
    AWAIT_APPROVAL = "AWAIT_APPROVAL"
    START_CHILD = "START_CHILD"
    RUN_TOOL = "RUN_TOOL"


@dataclass(frozen=True, slots=True)
class CallPlan:
    action: Action
    tool: str
    args: Any  # strict JSON (as stored) unless refused for its arguments
    decision: Decision | None = None  # None when refused before the policy was asked
    reason: str = ""  # the policy's reason (agent and rule), or why the call was refused
    result: Any = None  # what the model sees for REFUSE and DENY
    risk: RiskClass | None = None
    timeout_s: int | None = None  # AWAIT_APPROVAL: the policy's timeoutS, if a rule set one


@dataclass(frozen=True, slots=True)
class Calls:
    plans: list[CallPlan]


@dataclass(frozen=True, slots=True)
class Finish:
    value: Any


@dataclass(frozen=True, slots=True)
class Fail:
    error: str
    code: str | None = None  # Run.errorCode (BUDGET_EXCEEDED), when the failure has one


TurnPlan = Calls | Finish | Fail


@dataclass(frozen=True, slots=True)
class Limits:
    max_turns: int
    max_value_bytes: int
    max_json_depth: int = MAX_JSON_DEPTH
    turns_by: str = "the deployment (ENVERIF_MAX_TURNS)"  # who set max_turns


def plan_turn(
    turn: Sequence[Call] | Finish,
    *,
    turns_used: int,
    tools: Mapping[str, ToolInfo],
    chain: Sequence[PolicyLink],
    limits: Limits,
) -> TurnPlan:
    """What to do with the model's turn: its calls (in order) or its final answer."""
    if isinstance(turn, Finish):
        try:
            return Finish(
                strict_json(
                    turn.value,
                    max_bytes=limits.max_value_bytes,
                    max_depth=limits.max_json_depth,
                    what="the final answer",
                )
            )
        except NotStorable as exc:
            return Fail(f"model output: {exc.message}")
    if turns_used >= limits.max_turns:
        return Fail(
            f"maxTurns {limits.max_turns} set by {limits.turns_by}: the run used its {limits.max_turns} model turns",
            code=ModelErrorCode.BUDGET_EXCEEDED,
        )
    return Calls([plan_call(call, tools=tools, chain=chain, limits=limits) for call in turn])


def plan_call(
    call: Call, *, tools: Mapping[str, ToolInfo], chain: Sequence[PolicyLink], limits: Limits
) -> CallPlan:
    info = tools.get(call.tool)
    if info is None or not info.offered:
        why = "unknown tool" if info is None else "tool not offered to this agent"
        return _refuse(call.tool, None, ModelErrorCode.UNKNOWN_TOOL, f"{why}: {call.tool}")
    try:
        args = strict_json(
            call.args, max_bytes=limits.max_value_bytes, max_depth=limits.max_json_depth, what="the arguments"
        )
    except NotStorable as exc:
        return _refuse(call.tool, None, ModelErrorCode.INVALID_ARGUMENTS, exc.message, risk=info.risk)
    if not isinstance(args, dict):
        why = "the arguments must be a JSON object"
        return _refuse(call.tool, args, ModelErrorCode.INVALID_ARGUMENTS, why, risk=info.risk)
    screen = CREDENTIAL_SCREENS.get(call.tool)
    screened = None if screen is None else screen(args)
    if screened is not None:
        # Refused before the policy is asked: a DENIED step, or an approval request, would
        # store (and show an operator) the secret itself. Only the redacted arguments are
        # kept, so the secret never reaches the database.
        return _refuse(
            call.tool,
            screened.arguments,
            ModelErrorCode.CREDENTIAL_REJECTED,
            screened.rejection.message,
            risk=info.risk,
        )
    decision = effective_decision(chain, call.tool, info.risk)
    if decision.decision is Decision.DENY:
        action = Action.DENY
    elif decision.decision is Decision.REQUIRE_APPROVAL:
        action = Action.AWAIT_APPROVAL
    else:
        action = Action.START_CHILD if info.delegates else Action.RUN_TOOL
    denial = model_error(ModelErrorCode.DENIED, decision.reason) if action is Action.DENY else None
    return CallPlan(action, call.tool, args, decision.decision, decision.reason, denial, info.risk,
                    timeout_s=decision.timeout_s)  # fmt: skip


def _refuse(
    tool: str, args: Any, code: ModelErrorCode, message: str, *, risk: RiskClass | None = None
) -> CallPlan:
    return CallPlan(Action.REFUSE, tool, args, reason=message, result=model_error(code, message), risk=risk)


def refuse_beyond(
    plans: Sequence[CallPlan],
    *,
    admitted: int,
    code: ModelErrorCode,
    message: str,
    only: Action | None = None,
) -> list[CallPlan]:
    """``plans`` with every call (of action ``only``, or any that is not refused already)
    after the first ``admitted`` refused with ``code``: over a budget, nothing runs."""
    out: list[CallPlan] = []
    seen = 0
    for plan in plans:
        if plan.action is Action.REFUSE or (only is not None and plan.action is not only):
            out.append(plan)
            continue
        seen += 1
        out.append(plan if seen <= admitted else _refuse(plan.tool, plan.args, code, message, risk=plan.risk))
    return out


def call_key(tool: str, args: Any) -> str:
    """Identity of a call for loop detection: the tool and its arguments, canonically."""
    return tool + "\x00" + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


def refuse_loops(plans: Sequence[CallPlan], *, counts: dict[str, int], max_identical: int) -> list[CallPlan]:
    """Refuse (``LOOP_DETECTED``) a call made with identical arguments more than
    ``max_identical`` times in the run; ``counts`` (call key -> times made) is updated with
    the calls that go ahead."""
    out: list[CallPlan] = []
    for plan in plans:
        if plan.action is Action.REFUSE:
            out.append(plan)
            continue
        key = call_key(plan.tool, plan.args)
        made = counts.get(key, 0)
        if made >= max_identical:
            message = (f"{plan.tool} was called {made} times with these arguments "
                       "(ENVERIF_MAX_IDENTICAL_CALLS); not executed again")  # fmt: skip
            out.append(_refuse(plan.tool, plan.args, ModelErrorCode.LOOP_DETECTED, message, risk=plan.risk))
        else:
            counts[key] = made + 1
            out.append(plan)
    return out


def runs_ahead(plans: Sequence[CallPlan]) -> bool:
    """Whether a turn's calls may run before anything is written, to be recorded with the
    next write: only when every call is an allowed READ. Those have no side effects, so
    running one again after a crash is harmless and no idempotency key (step row) has to
    exist first. (The engine further limits this to tools that do plain I/O.)"""
    return bool(plans) and all(p.action is Action.RUN_TOOL and p.risk is RiskClass.READ for p in plans)
