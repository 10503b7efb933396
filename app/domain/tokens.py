"""API token rules, pure (``now`` is passed in): when a token is alive, what a valid name and
expiry are, when a use is worth writing down, and when an open connection must look again.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from app.domain.errors import ValidationFailed

NAME_MAX_CHARS = 100
# lastUsedAt is this coarse on purpose: recording every use would turn each authenticated
# read into a write (and on SQLite, into a wait for the single write lock).
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TokenState(enum.StrEnum):
    ACTIVE = "ACTIVE"
    EXPIRED = "EXPIRED"
    REVOKED = "REVOKED"


def token_state(*, revoked_at: datetime | None, expires_at: datetime | None, now: datetime) -> TokenState:
    """Revocation wins over expiry: it is the operator's explicit act."""
    if revoked_at is not None:
        return TokenState.REVOKED
    if expires_at is not None and expires_at <= now:
        return TokenState.EXPIRED
    return TokenState.ACTIVE


def use_worth_recording(last_used_at: datetime | None, now: datetime) -> bool:
    return last_used_at is None or now - last_used_at >= LAST_USED_RESOLUTION


def seconds_until_next_check(*, now: datetime, expires_at: datetime | None, interval_s: float) -> float:
    """How long an open connection may trust its token before asking the database again.

    Never longer than ``interval_s`` (a revocation must be seen within seconds), and no later
    than the expiry itself, so an expiring socket closes on time rather than up to one
    interval late.
    """
    if expires_at is None:
        return interval_s
    return max(0.0, min(interval_s, (expires_at - now).total_seconds()))


def check_token_name(name: str) -> str:
    """Names are how operators tell tokens apart and revoke them: short, printable, one line."""
    cleaned = name.strip()
    if not 1 <= len(cleaned) <= NAME_MAX_CHARS or not cleaned.isprintable():
        raise ValidationFailed(f"a token name must be 1-{NAME_MAX_CHARS} printable characters", field="name")
    return cleaned


def check_expiry(expires_at: datetime | None, *, now: datetime) -> datetime | None:
    if expires_at is None:
        return None
    if expires_at.tzinfo is None or expires_at.utcoffset() is None:
        raise ValidationFailed("expiresAt needs a timezone (e.g. a trailing Z)", field="expiresAt")
    if expires_at <= now:
        raise ValidationFailed("expiresAt must be in the future", field="expiresAt")
    return expires_at
