"""API token rules (app.domain.tokens): tables of cases and properties, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import ValidationFailed
from app.domain.tokens import (
    LAST_USED_RESOLUTION,
    NAME_MAX_CHARS,
    TokenState,
    check_expiry,
    check_token_name,
    seconds_until_next_check,
    token_state,
    use_worth_recording,
)

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("revoked_at", "expires_at", "expected"),
    [
        (None, None, TokenState.ACTIVE),
        (None, NOW + S, TokenState.ACTIVE),
        (None, NOW, TokenState.EXPIRED),  # the expiry instant itself no longer works
        (None, NOW - S, TokenState.EXPIRED),
        (NOW - S, None, TokenState.REVOKED),
        (NOW + S, None, TokenState.REVOKED),  # revocation has no "from": it is immediate
        (NOW - S, NOW - S, TokenState.REVOKED),  # revoked wins over expired
        (NOW - S, NOW + S, TokenState.REVOKED),
    ],
)
def test_token_state(revoked_at: datetime | None, expires_at: datetime | None, expected: TokenState) -> None:
    assert token_state(revoked_at=revoked_at, expires_at=expires_at, now=NOW) is expected


@pytest.mark.parametrize(
    ("last_used_at", "expected"),
    [
        (None, True),
        (NOW, False),
        (NOW - LAST_USED_RESOLUTION + S, False),
        (NOW - LAST_USED_RESOLUTION, True),
        (NOW - timedelta(days=3), True),
        (NOW + S, False),  # another process's clock is a little ahead: no write storm
    ],
)
def test_use_is_recorded_at_most_once_per_resolution(last_used_at: datetime | None, expected: bool) -> None:
    assert use_worth_recording(last_used_at, NOW) is expected


@given(
    offset_s=st.one_of(st.none(), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)),
    interval_s=st.floats(min_value=0.1, max_value=4.0),
)
def test_next_check_is_never_later_than_the_interval_or_the_expiry(
    offset_s: float | None, interval_s: float
) -> None:
    expires_at = None if offset_s is None else NOW + timedelta(seconds=offset_s)
    delay = seconds_until_next_check(now=NOW, expires_at=expires_at, interval_s=interval_s)
    assert 0.0 <= delay <= interval_s
    if expires_at is not None and expires_at > NOW:
        assert NOW + timedelta(seconds=delay) <= expires_at + timedelta(microseconds=1)
    if offset_s is None or offset_s >= interval_s:
        # timedelta keeps microseconds only
        assert delay == pytest.approx(interval_s, abs=1e-5)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("ci", "ci"), ("  deploy bot  ", "deploy bot"), ("x" * NAME_MAX_CHARS, "x" * NAME_MAX_CHARS)],
)
def test_valid_token_names(name: str, expected: str) -> None:
    assert check_token_name(name) == expected


@pytest.mark.parametrize(
    "name", ["", "   ", "x" * (NAME_MAX_CHARS + 1), "two\nlines", "tab\there", "bell\x07"]
)
def test_invalid_token_names(name: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        check_token_name(name)
    assert err.value.field == "name"


@pytest.mark.parametrize(
    ("expires_at", "ok"),
    [
        (None, True),
        (NOW + S, True),
        (NOW, False),
        (NOW - S, False),
        (datetime(2031, 1, 1), False),  # naive: which timezone?
        (datetime(2031, 1, 1, tzinfo=UTC), True),
    ],
)
def test_expiry_must_be_an_aware_future_time(expires_at: datetime | None, ok: bool) -> None:
    if ok:
        assert check_expiry(expires_at, now=NOW) == expires_at
    else:
        with pytest.raises(ValidationFailed) as err:
            check_expiry(expires_at, now=NOW)
        assert err.value.field == "expiresAt"
