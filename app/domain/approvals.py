"""How an operator decides a paused call (docs/concepts/approvals.md). Pure: no I/O.

    APPROVE   the tool runs with the arguments the model gave
    EDIT      the tool runs with the operator's arguments (validated and decided again by
              policy before they are accepted; the step keeps both)
    REJECT    the tool does not run; the model sees REJECTED with the operator's reason
    RESPOND   the tool does not run; the model sees ``{"response": ...}`` as its result

``scope: RUN`` (APPROVE and EDIT only) also approves the later calls of the same tool in the
same run, and only that run: not its children, siblings or parent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from app.domain.errors import ValidationFailed
from app.domain.runs import ApprovalStatus

MAX_REASON_CHARS = 2_000


class ApprovalDecision(enum.StrEnum):
    APPROVE = "APPROVE"
    REJECT = "REJECT"
    EDIT = "EDIT"
    RESPOND = "RESPOND"


class ApprovalScope(enum.StrEnum):
    CALL = "CALL"
    RUN = "RUN"


# What each decision leaves the approval as.
OUTCOME: dict[ApprovalDecision, ApprovalStatus] = {
    ApprovalDecision.APPROVE: ApprovalStatus.APPROVED,
    ApprovalDecision.EDIT: ApprovalStatus.APPROVED,
    ApprovalDecision.REJECT: ApprovalStatus.REJECTED,
    ApprovalDecision.RESPOND: ApprovalStatus.RESPONDED,
}
# The decisions that let the tool run, and so may stand for the rest of the run.
RUNS_THE_TOOL = frozenset({ApprovalDecision.APPROVE, ApprovalDecision.EDIT})


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    decision: ApprovalDecision
    scope: ApprovalScope
    reason: str | None
    arguments: Any  # EDIT only
    response: Any  # RESPOND only


def read_decision(
    *,
    approve: bool | None,
    decision: ApprovalDecision | None,
    reason: str | None,
    arguments: Any,
    response: Any,
    scope: ApprovalScope | None,
    has_arguments: bool,
    has_response: bool,
) -> DecisionRequest:
    """Check what a ``decideApproval`` call asks for, before anything is read or written.
    The old form (``approve: Boolean``) reads as APPROVE or REJECT. ``has_arguments`` and
    ``has_response``: whether the caller gave them at all (a JSON ``null`` is a response)."""
    if (approve is None) == (decision is None):
        raise ValidationFailed("give either decision or approve (the older form), not both", field="decision")
    kind = (
        decision
        if decision is not None
        else (ApprovalDecision.APPROVE if approve else ApprovalDecision.REJECT)
    )
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed(f"reason is longer than {MAX_REASON_CHARS} characters", field="reason")
    if (kind is ApprovalDecision.EDIT) != has_arguments:
        why = (
            "EDIT needs arguments" if kind is ApprovalDecision.EDIT else f"arguments go with EDIT, not {kind}"
        )
        raise ValidationFailed(why, field="arguments")
    if (kind is ApprovalDecision.RESPOND) != has_response:
        why = (
            "RESPOND needs a response"
            if kind is ApprovalDecision.RESPOND
            else f"response goes with RESPOND, not {kind}"
        )
        raise ValidationFailed(why, field="response")
    if kind is ApprovalDecision.EDIT and not isinstance(arguments, dict):
        raise ValidationFailed("arguments must be a JSON object", field="arguments")
    scope = scope or ApprovalScope.CALL
    if scope is ApprovalScope.RUN and kind not in RUNS_THE_TOOL:
        raise ValidationFailed(f"scope RUN goes with APPROVE or EDIT, not {kind}", field="scope")
    return DecisionRequest(kind, scope, reason, arguments, response)


def expires_at(
    requested_at: datetime, *, rule_timeout_s: int | None, default_timeout_s: int
) -> datetime | None:
    """When an approval requested at ``requested_at`` expires: the policy's ``timeoutS`` if
    a rule set one, else the deployment's default (``ENVERIF_APPROVAL_TIMEOUT_S``; 0: never)."""
    timeout_s = rule_timeout_s if rule_timeout_s is not None else default_timeout_s
    if timeout_s <= 0:
        return None
    return requested_at + timedelta(seconds=timeout_s)


def expiry_reason(requested_at: datetime, deadline: datetime) -> str:
    waited = round((deadline - requested_at).total_seconds())
    return f"approval expired: nobody decided within {waited} s"


class ApprovalEventType(enum.StrEnum):
    """What ``approvalEvents`` reports: an approval requested, decided, or expired."""

    REQUESTED = "REQUESTED"
    DECIDED = "DECIDED"
    EXPIRED = "EXPIRED"


def approval_event_type(run_event_type: str, status: str | None) -> ApprovalEventType | None:
    """The ``approvalEvents`` kind of a run event (None: not an approval's). An expiry is
    recorded as the approval's decision (APPROVAL_DECIDED, status EXPIRED)."""
    if run_event_type == "APPROVAL_REQUESTED":
        return ApprovalEventType.REQUESTED
    if run_event_type == "APPROVAL_DECIDED":
        return ApprovalEventType.EXPIRED if status == ApprovalStatus.EXPIRED else ApprovalEventType.DECIDED
    return None
