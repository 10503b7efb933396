"""Run and step state machines: pure, no I/O.

Run states::

    QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
    RUNNING <-> WAITING_APPROVAL, RUNNING <-> WAITING_CHILD (woken runs go back to QUEUED)

A RUNNING run whose worker vanished (lease expired) goes back to QUEUED so another worker
can claim it. Terminal states are final. ``services.runs.transition`` is the only writer and
asks ``check_run_transition`` before every change.
"""

from __future__ import annotations

import enum

from app.domain.errors import InvalidTransition


class RunStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    WAITING_CHILD = "WAITING_CHILD"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class RunTrigger(enum.StrEnum):
    MANUAL = "MANUAL"
    API = "API"
    SCHEDULE = "SCHEDULE"
    DELEGATION = "DELEGATION"


class StepStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    WAITING_CHILD = "WAITING_CHILD"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DENIED = "DENIED"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"


class ApprovalStatus(enum.StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"  # APPROVE or EDIT: the tool runs
    REJECTED = "REJECTED"
    RESPONDED = "RESPONDED"  # RESPOND: the tool does not run, the model gets the response
    EXPIRED = "EXPIRED"  # past its deadline: the call is rejected with that reason


# Nothing leaves a terminal state: results are final and side effects are not replayed.
TERMINAL_RUN = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
# Parked runs hold no worker; something outside the run (an operator, a child) wakes them.
WAITING_RUN = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CHILD})
# Everything that can still be cancelled.
CANCELLABLE_RUN = frozenset(RunStatus) - TERMINAL_RUN

TERMINAL_STEP = frozenset(
    {StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.DENIED, StepStatus.REJECTED, StepStatus.CANCELLED}
)
WAITING_STEP = frozenset({StepStatus.WAITING_APPROVAL, StepStatus.WAITING_CHILD})
# Not finished: to run, running or waiting. The only steps that can still change.
OPEN_STEP = frozenset(StepStatus) - TERMINAL_STEP

RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.WAITING_APPROVAL,
            RunStatus.WAITING_CHILD,
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.QUEUED,  # lease expired: handed back for another worker to claim
        }
    ),
    RunStatus.WAITING_APPROVAL: frozenset({RunStatus.QUEUED, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.WAITING_CHILD: frozenset({RunStatus.QUEUED, RunStatus.CANCELLED, RunStatus.FAILED}),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

STEP_TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    StepStatus.PENDING: frozenset(
        {
            StepStatus.RUNNING,
            StepStatus.WAITING_APPROVAL,
            StepStatus.WAITING_CHILD,
            StepStatus.DENIED,
            StepStatus.CANCELLED,
            StepStatus.SUCCEEDED,  # a final answer is recorded as a finished step
        }
    ),
    StepStatus.RUNNING: frozenset(
        {StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.WAITING_CHILD, StepStatus.CANCELLED}
    ),
    # Approved: back to PENDING so the (next) worker executes it; rejected: final.
    # RESPOND: the tool never runs, the operator's response is the call's result.
    StepStatus.WAITING_APPROVAL: frozenset(
        {StepStatus.PENDING, StepStatus.SUCCEEDED, StepStatus.REJECTED, StepStatus.CANCELLED}
    ),
    StepStatus.WAITING_CHILD: frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED}),
    StepStatus.SUCCEEDED: frozenset(),
    StepStatus.FAILED: frozenset(),
    StepStatus.DENIED: frozenset(),
    StepStatus.REJECTED: frozenset(),
    StepStatus.CANCELLED: frozenset(),
}


def can_transition_run(current: RunStatus, target: RunStatus) -> bool:
    return target in RUN_TRANSITIONS[current]


def check_run_transition(current: RunStatus, target: RunStatus) -> None:
    if not can_transition_run(current, target):
        raise InvalidTransition(f"run cannot go from {current} to {target}")


def can_transition_step(current: StepStatus, target: StepStatus) -> bool:
    return target in STEP_TRANSITIONS[current]


def check_step_transition(current: StepStatus, target: StepStatus) -> None:
    if not can_transition_step(current, target):
        raise InvalidTransition(f"step cannot go from {current} to {target}")


def waiting_status_for(step_statuses: list[StepStatus]) -> RunStatus | None:
    """The status a run parks in after a turn, or None when nothing of it waits.

    An approval outranks a child: an operator has to act before the run can move on, and
    when the approval is decided the run re-parks on its children if any are still going.
    """
    if StepStatus.WAITING_APPROVAL in step_statuses:
        return RunStatus.WAITING_APPROVAL
    if StepStatus.WAITING_CHILD in step_statuses:
        return RunStatus.WAITING_CHILD
    return None
