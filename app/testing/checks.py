"""What the conformance checks share: the failure they raise, and the JSON rule."""

from __future__ import annotations

from typing import Any

from app.domain.jsonvalue import NotStorable, strict_json


class ConformanceError(AssertionError):
    """A plugin breaks a rule the engine relies on; the message says which."""


def require(condition: object, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def require_json(value: Any, *, max_bytes: int, what: str) -> Any:
    """``value`` as it would be stored; ``ConformanceError`` if it could not be."""
    try:
        return strict_json(value, max_bytes=max_bytes, what=what)
    except NotStorable as exc:
        raise ConformanceError(f"{exc.message} ({exc.code}): the engine would fail the step") from None
