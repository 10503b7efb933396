"""The run loop's decisions (``app.domain.engine_rules``): tables of cases and properties."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.engine_rules import (
    READ_BATCH_MAX,
    READ_BATCH_S,
    HistoryItem,
    MoveKind,
    Outcome,
    ReadCall,
    batches,
    failed,
    final_answer_turn,
    model_history,
    new_step_statuses,
    next_move,
    parks_with_turn,
)
from app.domain.planner import Action, CallPlan, Calls, Fail, Finish, ToolInfo
from app.domain.policy import Decision, RiskClass
from app.domain.runs import RunStatus, StepStatus

S = StepStatus
AT = datetime(2026, 12, 1, tzinfo=UTC)
TOOLS = {
    "http.get": ToolInfo(RiskClass.READ, offered=True),
    "webhook.post": ToolInfo(RiskClass.EXTERNAL_WRITE, offered=True),
    "memory.search": ToolInfo(RiskClass.READ, offered=True, state=True),
    "agents.delegate": ToolInfo(RiskClass.INTERNAL_WRITE, offered=True, delegates=True, state=True),
}


@dataclass
class Step:
    id: int
    tool: str | None
    status: str
    turn: int = 0
    arguments: Any = None
    result: Any = None


def steps(*spec: tuple[str | None, StepStatus]) -> list[Step]:
    return [Step(i + 1, tool, status.value, turn=i) for i, (tool, status) in enumerate(spec)]


# -- next_move ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "fast", "kind", "step_id", "record_now"),
    [
        # nothing yet: ask the model
        ((), True, MoveKind.ASK_MODEL, None, True),
        # every call finished (the final answer's step does not count as a call)
        ((("http.get", S.SUCCEEDED), ("webhook.post", S.FAILED)), True, MoveKind.ASK_MODEL, None, True),
        (((None, S.SUCCEEDED),), False, MoveKind.ASK_MODEL, None, True),
        # the first open step runs, in seq order, whatever comes after it
        ((("http.get", S.SUCCEEDED), ("webhook.post", S.PENDING)), False, MoveKind.RUN_STEP, 2, True),
        ((("webhook.post", S.RUNNING), ("http.get", S.PENDING)), True, MoveKind.RUN_STEP, 1, True),
        # a fast provider's last open step: recorded with the next turn
        ((("http.get", S.SUCCEEDED), ("webhook.post", S.PENDING)), True, MoveKind.RUN_STEP, 2, False),
        ((("webhook.post", S.RUNNING),), True, MoveKind.RUN_STEP, 1, False),
        # ... but not while another call still waits (its wait is written by someone else)
        (
            (("webhook.post", S.PENDING), ("agents.delegate", S.WAITING_CHILD)),
            True,
            MoveKind.RUN_STEP,
            1,
            True,
        ),
        # a slow provider: every result is recorded before the model is asked
        ((("webhook.post", S.RUNNING),), False, MoveKind.RUN_STEP, 1, True),
        # STATE tools run in their own transaction
        ((("memory.search", S.PENDING),), True, MoveKind.RUN_STATE_STEP, 1, True),
        ((("http.get", S.DENIED), ("agents.delegate", S.RUNNING)), False, MoveKind.RUN_STATE_STEP, 2, True),
        # an unregistered tool is an I/O step (the loop fails it as UNKNOWN_TOOL)
        ((("gone.tool", S.PENDING),), False, MoveKind.RUN_STEP, 1, True),
        # nothing open, something waits: park
        ((("webhook.post", S.WAITING_APPROVAL),), True, MoveKind.PARK, None, True),
        ((("http.get", S.SUCCEEDED), ("agents.delegate", S.WAITING_CHILD)), False, MoveKind.PARK, None, True),
        # open steps come before waiting ones
        ((("webhook.post", S.WAITING_APPROVAL), ("http.get", S.PENDING)), True, MoveKind.RUN_STEP, 2, True),
    ],
)
def test_next_move(
    spec: tuple[tuple[str | None, StepStatus], ...],
    fast: bool,
    kind: MoveKind,
    step_id: int | None,
    record_now: bool,
) -> None:
    move = next_move(steps(*spec), tools=TOOLS, fast=fast)
    assert move.kind is kind
    assert (move.step.id if move.step is not None else None) == step_id
    assert move.record_now is record_now


def test_a_step_waiting_for_the_next_write_counts_as_finished() -> None:
    view = steps(("http.get", S.SUCCEEDED), ("webhook.post", S.RUNNING))
    assert next_move(view, tools=TOOLS, fast=True).kind is MoveKind.RUN_STEP
    assert next_move(view, tools=TOOLS, fast=True, unrecorded=2).kind is MoveKind.ASK_MODEL


STATUSES = st.sampled_from(list(StepStatus))
VIEWS = st.lists(st.tuples(st.sampled_from([*TOOLS, "gone.tool", None]), STATUSES), max_size=8)


@given(VIEWS, st.booleans())
def test_next_move_runs_the_first_open_step_else_parks_only_on_a_wait(
    spec: list[tuple[str | None, StepStatus]], fast: bool
) -> None:
    view = steps(*spec)
    move = next_move(view, tools=TOOLS, fast=fast)
    calls = [s for s in view if s.tool is not None]
    open_ = [s for s in calls if s.status in (S.PENDING, S.RUNNING)]
    if open_:
        assert move.step is open_[0]
        info = TOOLS.get(open_[0].tool or "")
        assert move.kind is (MoveKind.RUN_STATE_STEP if info and info.state else MoveKind.RUN_STEP)
        # A result is left for the next write only by a fast provider, and only when no
        # other call is still open or waiting.
        if not move.record_now:
            assert fast and all(s is open_[0] or S(s.status) not in (S.PENDING, S.RUNNING, S.WAITING_APPROVAL,
                                                                      S.WAITING_CHILD) for s in calls)  # fmt: skip
    elif any(s.status in (S.WAITING_APPROVAL, S.WAITING_CHILD) for s in calls):
        assert move.kind is MoveKind.PARK
    else:
        assert move.kind is MoveKind.ASK_MODEL


# -- model_history ------------------------------------------------------------------------


def read(turn: int, tool: str = "http.get", result: Any = "page") -> ReadCall:
    plan = CallPlan(Action.RUN_TOOL, tool, {"url": "u"}, Decision.ALLOW, "allowed", risk=RiskClass.READ)
    return ReadCall(turn, plan, Outcome(StepStatus.SUCCEEDED, result), AT, AT)


def test_history_is_every_call_in_order_and_the_next_turn_index() -> None:
    view = [
        Step(1, "http.get", "SUCCEEDED", turn=0, arguments={"url": "a"}, result={"status": 200}),
        Step(2, "webhook.post", "DENIED", turn=1, arguments={}, result={"error": {"code": "DENIED"}}),
        Step(3, "webhook.post", "RUNNING", turn=1, arguments=None, result=None),
    ]
    history, turn = model_history(view, unrecorded=(3, Outcome(StepStatus.SUCCEEDED, {"status": 201})),
                                  reads=[read(2), read(3, result="more")])  # fmt: skip
    assert history == [
        HistoryItem("http.get", {"url": "a"}, "SUCCEEDED", {"status": 200}),
        HistoryItem("webhook.post", {}, "DENIED", {"error": {"code": "DENIED"}}),
        HistoryItem("webhook.post", {}, "SUCCEEDED", {"status": 201}),  # as it will be recorded
        HistoryItem("http.get", {"url": "u"}, "SUCCEEDED", "page"),
        HistoryItem("http.get", {"url": "u"}, "SUCCEEDED", "more"),
    ]
    assert turn == 4


@pytest.mark.parametrize(
    ("view", "reads", "turn"),
    [
        ([], [], 0),
        ([Step(1, None, "SUCCEEDED", turn=0)], [], 0),  # a final answer is not a call the model sees
        ([Step(1, "http.get", "SUCCEEDED", turn=2)], [], 3),
        ([Step(1, "http.get", "SUCCEEDED", turn=2)], [read(1)], 3),
        ([], [read(0), read(1)], 2),
    ],
)
def test_the_next_turn_follows_the_last_one(view: list[Step], reads: list[ReadCall], turn: int) -> None:
    assert model_history(view, unrecorded=None, reads=reads)[1] == turn


# -- batches ------------------------------------------------------------------------------


def calls(*tools: str, action: Action = Action.RUN_TOOL) -> Calls:
    return Calls(
        [
            CallPlan(action, t, {}, Decision.ALLOW, "", risk=TOOLS[t].risk if t in TOOLS else None)
            for t in tools
        ]
    )


@pytest.mark.parametrize(
    ("plan", "fast", "batched", "elapsed_s", "expected"),
    [
        (calls("http.get"), True, 0, 0.0, True),
        (calls("http.get", "http.get"), True, 3, 0.1, True),
        (calls("http.get"), False, 0, 0.0, False),  # a slow provider: nothing runs ahead
        (calls("webhook.post"), True, 0, 0.0, False),  # a write needs its step (idempotency key) first
        (calls("http.get", "webhook.post"), True, 0, 0.0, False),
        (calls("memory.search"), True, 0, 0.0, False),  # a STATE tool writes in its step's transaction
        (calls("http.get", action=Action.AWAIT_APPROVAL), True, 0, 0.0, False),
        (calls("http.get", action=Action.DENY), True, 0, 0.0, False),
        (Calls([]), True, 0, 0.0, False),
        (Finish("x"), True, 0, 0.0, False),
        (Fail("no"), True, 0, 0.0, False),
        (calls("http.get"), True, READ_BATCH_MAX - 1, 0.0, True),
        (calls("http.get"), True, READ_BATCH_MAX, 0.0, False),  # bounded: watchers see progress
        (calls("http.get"), True, 0, READ_BATCH_S + 0.01, False),
    ],
)
def test_which_turns_run_ahead(plan: Any, fast: bool, batched: int, elapsed_s: float, expected: bool) -> None:
    assert batches(plan, fast=fast, batched=batched, elapsed_s=elapsed_s, tools=TOOLS) is expected


# -- recording a turn ---------------------------------------------------------------------


def plans(*actions: Action) -> list[CallPlan]:
    return [CallPlan(a, "t", {}) for a in actions]


A = Action


@pytest.mark.parametrize(
    ("actions", "statuses"),
    [
        ((A.RUN_TOOL,), [S.RUNNING]),
        ((A.RUN_TOOL, A.RUN_TOOL, A.RUN_TOOL), [S.RUNNING, S.PENDING, S.PENDING]),
        ((A.REFUSE, A.RUN_TOOL, A.DENY, A.RUN_TOOL), [S.FAILED, S.RUNNING, S.DENIED, S.PENDING]),
        ((A.AWAIT_APPROVAL, A.RUN_TOOL), [S.WAITING_APPROVAL, S.RUNNING]),
        ((A.START_CHILD, A.START_CHILD, A.RUN_TOOL), [S.RUNNING, S.RUNNING, S.RUNNING]),
        ((), []),
    ],
)
def test_new_step_statuses(actions: tuple[Action, ...], statuses: list[StepStatus]) -> None:
    assert new_step_statuses(plans(*actions)) == statuses


@given(st.lists(st.sampled_from(list(Action)), max_size=10))
def test_at_most_one_allowed_call_starts_with_its_turn(actions: list[Action]) -> None:
    statuses = new_step_statuses(plans(*actions))
    started = [s for a, s in zip(actions, statuses, strict=True) if a is Action.RUN_TOOL and s is S.RUNNING]
    assert len(started) == (1 if Action.RUN_TOOL in actions else 0)


@pytest.mark.parametrize(
    ("statuses", "parked"),
    [
        ([], None),
        ([S.SUCCEEDED, S.DENIED], None),
        ([S.WAITING_CHILD, S.WAITING_CHILD], RunStatus.WAITING_CHILD),
        ([S.SUCCEEDED, S.WAITING_APPROVAL], RunStatus.WAITING_APPROVAL),
        ([S.WAITING_CHILD, S.WAITING_APPROVAL], RunStatus.WAITING_APPROVAL),  # an operator first
        ([S.WAITING_CHILD, S.PENDING], None),  # something can run now
        ([S.WAITING_APPROVAL, S.RUNNING], None),
    ],
)
def test_parks_with_turn(statuses: list[StepStatus], parked: RunStatus | None) -> None:
    assert parks_with_turn(statuses) is parked


@pytest.mark.parametrize(("recorded", "reads", "turn"), [(0, [], 0), (3, [], 3), (1, [read(1), read(4)], 5)])
def test_final_answer_turn(recorded: int, reads: list[ReadCall], turn: int) -> None:
    assert final_answer_turn(recorded, reads) == turn


def test_failed_is_a_failed_step_with_a_model_error() -> None:
    outcome = failed("TIMEOUT", "too slow")
    assert outcome == Outcome(StepStatus.FAILED, {"error": {"code": "TIMEOUT", "message": "too slow"}},
                              "TIMEOUT: too slow")  # fmt: skip
