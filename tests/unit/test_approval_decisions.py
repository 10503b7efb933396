"""What a decideApproval call may ask for, and approval deadlines (app/domain/approvals.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.approvals import (
    MAX_NOTIFY_ATTEMPTS,
    OUTCOME,
    RETRY_BASE_S,
    RETRY_MAX_S,
    ApprovalDecision,
    ApprovalEventType,
    ApprovalScope,
    NotificationStatus,
    after_attempt,
    approval_event_type,
    check_webhook,
    expires_at,
    expiry_reason,
    read_decision,
    retry_delay_s,
    signature,
)
from app.domain.errors import ValidationFailed
from app.domain.policy import Decision, PolicyLink, RiskClass, effective_decision, parse_policy
from app.domain.runs import ApprovalStatus

D, S = ApprovalDecision, ApprovalScope
UNSET = object()


def _read(
    *, approve: bool | None = None, decision: D | None = None, arguments: Any = UNSET,
    response: Any = UNSET, scope: S | None = None, reason: str | None = None,
):  # fmt: skip
    return read_decision(
        approve=approve, decision=decision, reason=reason, scope=scope,
        arguments=None if arguments is UNSET else arguments, response=None if response is UNSET else response,
        has_arguments=arguments is not UNSET, has_response=response is not UNSET,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "decision", "scope"),
    [
        ({"approve": True}, D.APPROVE, S.CALL),
        ({"approve": False}, D.REJECT, S.CALL),
        ({"decision": D.APPROVE, "scope": S.RUN}, D.APPROVE, S.RUN),
        ({"decision": D.EDIT, "arguments": {"url": "x"}}, D.EDIT, S.CALL),
        ({"decision": D.EDIT, "arguments": {}, "scope": S.RUN}, D.EDIT, S.RUN),
        ({"decision": D.RESPOND, "response": None}, D.RESPOND, S.CALL),  # a JSON null is a response
        ({"decision": D.RESPOND, "response": {"answer": 42}}, D.RESPOND, S.CALL),
        ({"decision": D.REJECT, "reason": "no"}, D.REJECT, S.CALL),
    ],
)
def test_accepted(kwargs: dict[str, Any], decision: D, scope: S) -> None:
    request = _read(**kwargs)
    assert (request.decision, request.scope) == (decision, scope)


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({}, "decision", "either decision or approve"),
        ({"approve": True, "decision": D.APPROVE}, "decision", "not both"),
        ({"decision": D.EDIT}, "arguments", "EDIT needs arguments"),
        ({"decision": D.EDIT, "arguments": [1]}, "arguments", "must be a JSON object"),
        ({"decision": D.APPROVE, "arguments": {}}, "arguments", "go with EDIT"),
        ({"decision": D.RESPOND}, "response", "RESPOND needs a response"),
        ({"decision": D.REJECT, "response": "x"}, "response", "goes with RESPOND"),
        ({"decision": D.REJECT, "scope": S.RUN}, "scope", "scope RUN goes with APPROVE or EDIT"),
        ({"decision": D.RESPOND, "response": 1, "scope": S.RUN}, "scope", "scope RUN"),
        ({"approve": True, "reason": "x" * 2001}, "reason", "longer than 2000"),
    ],
)
def test_refused(kwargs: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        _read(**kwargs)
    assert info.value.field == field and fragment in info.value.message


@given(
    decision=st.sampled_from(D),
    scope=st.sampled_from([None, *S]),
    give_arguments=st.booleans(),
    give_response=st.booleans(),
)
def test_only_coherent_requests_pass(
    decision: D, scope: S | None, give_arguments: bool, give_response: bool
) -> None:
    kwargs: dict[str, Any] = {"decision": decision, "scope": scope}
    if give_arguments:
        kwargs["arguments"] = {"k": 1}
    if give_response:
        kwargs["response"] = "r"
    coherent = (
        give_arguments == (decision is D.EDIT)
        and give_response == (decision is D.RESPOND)
        and (scope is not S.RUN or decision in (D.APPROVE, D.EDIT))
    )
    try:
        request = _read(**kwargs)
    except ValidationFailed:
        assert not coherent
    else:
        assert coherent and request.scope == (scope or S.CALL)
        assert OUTCOME[request.decision] in set(ApprovalStatus) - {
            ApprovalStatus.PENDING,
            ApprovalStatus.EXPIRED,
        }


AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("rule", "default", "expected"),
    [
        (None, 0, None),
        (None, 300, AT + timedelta(seconds=300)),
        (60, 0, AT + timedelta(seconds=60)),
        (60, 300, AT + timedelta(seconds=60)),  # the rule's own, shorter or longer
        (600, 300, AT + timedelta(seconds=600)),
    ],
)
def test_expires_at(rule: int | None, default: int, expected: datetime | None) -> None:
    assert expires_at(AT, rule_timeout_s=rule, default_timeout_s=default) == expected


def test_expiry_reason_says_how_long_it_waited() -> None:
    assert expiry_reason(AT, AT + timedelta(seconds=90)) == "approval expired: nobody decided within 90 s"


def _link(name: str, rules: list[dict[str, Any]]) -> PolicyLink:
    return PolicyLink(name, parse_policy({"rules": rules}))


@pytest.mark.parametrize(
    ("chain", "decision", "timeout"),
    [
        ([_link("a", [{"tool": "t", "decision": "REQUIRE_APPROVAL", "timeoutS": 60}])], Decision.REQUIRE_APPROVAL, 60),
        ([_link("a", [{"tool": "t", "decision": "REQUIRE_APPROVAL"}])], Decision.REQUIRE_APPROVAL, None),
        # The shortest deadline on the chain is the fail-safe one.
        (
            [_link("root", [{"tool": "t", "decision": "REQUIRE_APPROVAL", "timeoutS": 600}]),
             _link("child", [{"tool": "t", "decision": "REQUIRE_APPROVAL", "timeoutS": 30}])],
            Decision.REQUIRE_APPROVAL, 30,
        ),
        # A DENY anywhere: no approval, no deadline.
        (
            [_link("root", [{"tool": "t", "decision": "REQUIRE_APPROVAL", "timeoutS": 60}]),
             _link("child", [{"tool": "t", "decision": "DENY"}])],
            Decision.DENY, None,
        ),
        # A rule for another tool says nothing about this one's deadline.
        ([_link("a", [{"tool": "u", "decision": "REQUIRE_APPROVAL", "timeoutS": 5}])], Decision.REQUIRE_APPROVAL, None),
    ],
)  # fmt: skip
def test_effective_timeout(chain: list[PolicyLink], decision: Decision, timeout: int | None) -> None:
    found = effective_decision(chain, "t", RiskClass.EXTERNAL_WRITE)
    assert (found.decision, found.timeout_s) == (decision, timeout)


def test_a_rule_timeout_survives_normalisation() -> None:
    raw = {"rules": [{"tool": "Webhook.Post", "decision": "REQUIRE_APPROVAL", "timeoutS": 45}]}
    assert parse_policy(raw).to_json()["rules"] == [
        {"tool": "webhook.post", "decision": "REQUIRE_APPROVAL", "timeoutS": 45}
    ]


@pytest.mark.parametrize(
    ("event_type", "status", "expected"),
    [
        ("APPROVAL_REQUESTED", "PENDING", ApprovalEventType.REQUESTED),
        ("APPROVAL_DECIDED", "APPROVED", ApprovalEventType.DECIDED),
        ("APPROVAL_DECIDED", "RESPONDED", ApprovalEventType.DECIDED),
        ("APPROVAL_DECIDED", "REJECTED", ApprovalEventType.DECIDED),
        ("APPROVAL_DECIDED", "EXPIRED", ApprovalEventType.EXPIRED),
        ("APPROVAL_DECIDED", None, ApprovalEventType.DECIDED),
        ("STEP_STARTED", "WAITING_APPROVAL", None),
        ("RUN_STATUS_CHANGED", "EXPIRED", None),
    ],
)
def test_approval_event_type(event_type: str, status: str | None, expected: ApprovalEventType | None) -> None:
    assert approval_event_type(event_type, status) is expected


@pytest.mark.parametrize(
    ("attempts", "delivered", "status", "delay"),
    [
        (1, True, NotificationStatus.DELIVERED, None),
        (1, False, NotificationStatus.PENDING, RETRY_BASE_S),
        (2, False, NotificationStatus.PENDING, RETRY_BASE_S * 2),
        (5, False, NotificationStatus.PENDING, RETRY_BASE_S * 16),
        (MAX_NOTIFY_ATTEMPTS, False, NotificationStatus.FAILED, None),
        (MAX_NOTIFY_ATTEMPTS, True, NotificationStatus.DELIVERED, None),
    ],
)
def test_after_attempt(
    attempts: int, delivered: bool, status: NotificationStatus, delay: float | None
) -> None:
    assert after_attempt(attempts, delivered=delivered) == (status, delay)


@given(st.integers(min_value=1, max_value=10_000))
def test_retry_delays_grow_and_stay_capped(attempts: int) -> None:
    assert RETRY_BASE_S <= retry_delay_s(attempts) <= RETRY_MAX_S
    assert retry_delay_s(attempts + 1) >= retry_delay_s(attempts)


def test_signature_is_the_hmac_of_the_body() -> None:
    # RFC 4231 test case 2.
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert signature(b"Jefe", b"what do ya want for nothing?") == "sha256=" + expected


@pytest.mark.parametrize(
    ("url", "env", "field"),
    [
        ("ftp://127.0.0.1/x", "HOOK_SECRET", "url"),
        ("http://", "HOOK_SECRET", "url"),
        ("http://127.0.0.1/" + "x" * 2_048, "HOOK_SECRET", "url"),
        ("https://127.0.0.1/hook", "", "secretEnv"),
        ("https://127.0.0.1/hook", "hook_secret", "secretEnv"),
        ("https://127.0.0.1/hook", "ENVERIF_DATABASE_URL", "secretEnv"),
        ("https://127.0.0.1/hook", "A" * 101, "secretEnv"),
    ],
)
def test_check_webhook_refuses(url: str, env: str, field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_webhook(url, env)
    assert info.value.field == field


def test_check_webhook_accepts() -> None:
    assert check_webhook(" https://127.0.0.1/hook ", "HOOK_SECRET") == (
        "https://127.0.0.1/hook",
        "HOOK_SECRET",
    )
