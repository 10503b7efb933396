"""Run and step state machines: every (from, to) pair against an allowed set written out here.

The expected sets are deliberately spelled out rather than read from ``app.domain.runs`` so
that a change to the state machine has to be made twice, on purpose.
"""

from __future__ import annotations

import itertools

import pytest

from app.domain.errors import InvalidTransition
from app.domain.runs import (
    CANCELLABLE_RUN,
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    TERMINAL_RUN,
    TERMINAL_STEP,
    RunStatus,
    StepStatus,
    can_transition_run,
    can_transition_step,
    check_run_transition,
    check_step_transition,
    waiting_status_for,
)

Q, RUN, WA, WC = RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CHILD
OK, FAIL, CXL = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED

ALLOWED_RUN: set[tuple[RunStatus, RunStatus]] = {
    (Q, RUN),  # claimed by a worker
    (Q, CXL),
    (Q, FAIL),  # e.g. the agent was archived before it started
    (RUN, WA),
    (RUN, WC),
    (RUN, OK),
    (RUN, FAIL),
    (RUN, CXL),
    (RUN, Q),  # lease expired: handed back to the queue
    (WA, Q),  # approval decided: woken
    (WA, CXL),
    (WA, FAIL),
    (WC, Q),  # children ended: woken
    (WC, CXL),
    (WC, FAIL),
}

S = StepStatus
ALLOWED_STEP: set[tuple[StepStatus, StepStatus]] = {
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.WAITING_APPROVAL),
    (S.PENDING, S.WAITING_CHILD),
    (S.PENDING, S.DENIED),
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.SUCCEEDED),  # a final answer
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.WAITING_CHILD),
    (S.RUNNING, S.CANCELLED),
    (S.WAITING_APPROVAL, S.PENDING),  # approved
    (S.WAITING_APPROVAL, S.REJECTED),
    (S.WAITING_APPROVAL, S.SUCCEEDED),  # responded: the tool never ran
    (S.WAITING_APPROVAL, S.CANCELLED),
    (S.WAITING_CHILD, S.SUCCEEDED),
    (S.WAITING_CHILD, S.FAILED),
    (S.WAITING_CHILD, S.CANCELLED),
}

RUN_PAIRS = list(itertools.product(RunStatus, RunStatus))
STEP_PAIRS = list(itertools.product(StepStatus, StepStatus))


def _id(pair: tuple[object, object]) -> str:
    return f"{pair[0]}->{pair[1]}"


def test_tables_cover_every_state() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(STEP_TRANSITIONS) == set(StepStatus)
    assert len(RUN_PAIRS) == len(RunStatus) ** 2 == 49
    assert len(STEP_PAIRS) == len(StepStatus) ** 2 == 81


@pytest.mark.parametrize("pair", RUN_PAIRS, ids=[_id(p) for p in RUN_PAIRS])
def test_run_transition(pair: tuple[RunStatus, RunStatus]) -> None:
    current, target = pair
    allowed = pair in ALLOWED_RUN
    assert can_transition_run(current, target) is allowed
    if allowed:
        check_run_transition(current, target)
    else:
        with pytest.raises(InvalidTransition) as info:
            check_run_transition(current, target)
        assert info.value.code == "INVALID_TRANSITION"
        assert str(current) in info.value.message and str(target) in info.value.message


@pytest.mark.parametrize("pair", STEP_PAIRS, ids=[_id(p) for p in STEP_PAIRS])
def test_step_transition(pair: tuple[StepStatus, StepStatus]) -> None:
    current, target = pair
    allowed = pair in ALLOWED_STEP
    assert can_transition_step(current, target) is allowed
    if allowed:
        check_step_transition(current, target)
    else:
        with pytest.raises(InvalidTransition):
            check_step_transition(current, target)


def test_no_self_transitions() -> None:
    assert not any(a == b for a, b in ALLOWED_RUN | ALLOWED_STEP)
    assert not any(can_transition_run(s, s) for s in RunStatus)
    assert not any(can_transition_step(s, s) for s in StepStatus)


@pytest.mark.parametrize("state", [OK, FAIL, CXL])
def test_terminal_runs_have_no_exit(state: RunStatus) -> None:
    assert state in TERMINAL_RUN
    assert state not in CANCELLABLE_RUN
    assert RUN_TRANSITIONS[state] == frozenset()
    for target in RunStatus:
        with pytest.raises(InvalidTransition):
            check_run_transition(state, target)


@pytest.mark.parametrize("state", [S.SUCCEEDED, S.FAILED, S.DENIED, S.REJECTED, S.CANCELLED])
def test_terminal_steps_have_no_exit(state: StepStatus) -> None:
    assert state in TERMINAL_STEP
    assert STEP_TRANSITIONS[state] == frozenset()
    for target in StepStatus:
        with pytest.raises(InvalidTransition):
            check_step_transition(state, target)


def test_state_groups() -> None:
    assert TERMINAL_RUN == {OK, FAIL, CXL}
    assert CANCELLABLE_RUN == {Q, RUN, WA, WC}
    # every non-terminal run can be cancelled, in one step
    assert all((s, CXL) in ALLOWED_RUN for s in CANCELLABLE_RUN)
    assert TERMINAL_STEP == {S.SUCCEEDED, S.FAILED, S.DENIED, S.REJECTED, S.CANCELLED}


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([], None),
        ([S.SUCCEEDED], None),
        ([S.SUCCEEDED, S.FAILED, S.DENIED], None),
        ([S.PENDING, S.RUNNING], None),
        ([S.WAITING_APPROVAL], WA),
        ([S.WAITING_CHILD], WC),
        ([S.SUCCEEDED, S.WAITING_CHILD], WC),
        ([S.WAITING_CHILD, S.WAITING_CHILD], WC),
        # an approval outranks a child, whatever the order
        ([S.WAITING_CHILD, S.WAITING_APPROVAL], WA),
        ([S.WAITING_APPROVAL, S.WAITING_CHILD], WA),
        ([S.DENIED, S.WAITING_APPROVAL, S.SUCCEEDED], WA),
    ],
)
def test_waiting_status_for(steps: list[StepStatus], expected: RunStatus | None) -> None:
    assert waiting_status_for(steps) is expected
    # the status a run parks in is one it can reach from RUNNING and leave by being woken
    if expected is not None:
        assert (RUN, expected) in ALLOWED_RUN and (expected, Q) in ALLOWED_RUN
