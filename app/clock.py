"""The one place that reads the wall clock; the domain gets ``now`` passed in."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
