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
import hashlib
import hmac
import re
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


@dataclass(frozen=True, slots=True)
class DecisionAsk:
    """A ``decideApproval`` call's arguments as given; ``read`` checks them (after the
    approval was found: an unknown id is NOT_FOUND whatever else is wrong)."""

    approve: bool | None
    decision: ApprovalDecision | None
    reason: str | None
    arguments: Any
    response: Any
    scope: ApprovalScope | None
    has_arguments: bool
    has_response: bool

    def read(self) -> DecisionRequest:
        return read_decision(
            approve=self.approve, decision=self.decision, reason=self.reason, arguments=self.arguments,
            response=self.response, scope=self.scope, has_arguments=self.has_arguments,
            has_response=self.has_response,
        )  # fmt: skip


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


# -- notifications (approvalWebhook) ------------------------------------------------------


class NotificationStatus(enum.StrEnum):
    PENDING = "PENDING"  # to be sent (again) at its next_at
    DELIVERED = "DELIVERED"  # the receiver answered 2xx
    FAILED = "FAILED"  # every attempt failed: nobody retries any more


MAX_NOTIFY_ATTEMPTS = 6
RETRY_BASE_S = 1.0
RETRY_MAX_S = 300.0
_SECRET_ENV = re.compile(r"[A-Z][A-Z0-9_]{0,99}")
# The deployment's own settings (a database URL with its password, provider keys) are never
# a webhook's secret: a workspace admin chooses the variable.
_RESERVED_ENV_PREFIX = "ENVERIF_"


def retry_delay_s(attempts: int) -> float:
    """How long after its ``attempts``-th failed attempt a notification is sent again:
    doubling from RETRY_BASE_S, at most RETRY_MAX_S."""
    return float(min(RETRY_BASE_S * 2 ** min(max(attempts - 1, 0), 30), RETRY_MAX_S))


def after_attempt(attempts: int, *, delivered: bool) -> tuple[NotificationStatus, float | None]:
    """A notification's status after its ``attempts``-th attempt, and the delay to the next."""
    if delivered:
        return NotificationStatus.DELIVERED, None
    if attempts >= MAX_NOTIFY_ATTEMPTS:
        return NotificationStatus.FAILED, None
    return NotificationStatus.PENDING, retry_delay_s(attempts)


def signature(secret: bytes, body: bytes) -> str:
    """``X-Enverif-Signature``: ``sha256=`` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def check_webhook(url: str, secret_env: str) -> tuple[str, str]:
    """An ``approvalWebhook`` as given by an admin: an http(s) URL and the name of the
    environment variable that holds the signing secret (on the workers)."""
    url = url.strip()
    if len(url) > 2_048 or not url.lower().startswith(("http://", "https://")) or len(url) < 10:
        raise ValidationFailed(
            "url must be an http:// or https:// URL of at most 2048 characters", field="url"
        )
    if not _SECRET_ENV.fullmatch(secret_env):
        raise ValidationFailed(
            "secretEnv must be an environment variable name (A-Z, 0-9, _)", field="secretEnv"
        )
    if secret_env.startswith(_RESERVED_ENV_PREFIX):
        raise ValidationFailed(
            "secretEnv may not name one of the deployment's ENVERIF_ settings", field="secretEnv"
        )
    return url, secret_env
