"""Input checks shared by the CRUD services, and the ``KEEP`` marker for partial updates.

Every check raises ``ValidationFailed`` naming the field as the GraphQL client spells it
(``memoryBudget.maxItems``), so a form can put the message next to the right input. Checks
run before anything is written: a rejected request leaves no trace.
"""

from __future__ import annotations

import enum
import json
import math
import unicodedata
from typing import Any, Final

from app.domain.errors import ValidationFailed
from app.domain.jsonvalue import depth_error


class Keep(enum.Enum):
    """A patch field that was not given: leave the stored value as it is.

    Distinct from ``None``, which for a nullable field means "clear it".
    """

    KEEP = "KEEP"


KEEP: Final = Keep.KEEP


def check_text(value: str, *, field: str, max_chars: int, allow_empty: bool = True) -> str:
    if not allow_empty and not value.strip():
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if len(value) > max_chars:
        raise ValidationFailed(f"{field} is longer than {max_chars} characters", field=field)
    return value


# Control characters (NUL, tabs, line breaks...) and the Unicode line/paragraph separators:
# invisible in every listing, and NUL is cut off or refused by some drivers.
_UNPRINTABLE = frozenset({"Cc", "Zl", "Zp"})


def check_identifier_text(value: str, *, field: str) -> str:
    """A key or name that others look things up by: no control characters, and no space at
    either end. MariaDB compares with trailing spaces ignored (its collations pad) while
    SQLite does not, so ``dup`` and ``dup `` would be one key on one database and two on
    the other; refusing the space makes comparison the same on both."""
    bad = next((c for c in value if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        raise ValidationFailed(
            f"{field} must not contain control characters (found U+{ord(bad):04X})", field=field
        )
    if value != value.strip():
        raise ValidationFailed(f"{field} must not begin or end with whitespace", field=field)
    return value


def check_int_range(value: int, *, field: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ValidationFailed(f"{field} must be between {low} and {high}, got {value}", field=field)
    return value


def check_fraction(value: float, *, field: str) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValidationFailed(f"{field} must be between 0 and 1, got {value}", field=field)
    return float(value)


def check_json_size(value: Any, *, field: str, max_chars: int, max_depth: int) -> Any:
    """JSON inputs are stored as-is; bound their size like any text, and their depth (what
    MariaDB can store: app.domain.jsonvalue)."""
    too_deep = depth_error(value, max_depth=max_depth, what=field)
    if too_deep is not None:
        raise ValidationFailed(too_deep, field=field)
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        raise ValidationFailed(f"{field} is not JSON-serialisable", field=field) from None
    if size > max_chars:
        raise ValidationFailed(f"{field} is larger than {max_chars} characters as JSON", field=field)
    return value


def check_string_list(values: list[str], *, field: str, max_items: int, max_chars: int) -> list[str]:
    """Non-empty strings, bounded, duplicates dropped (first occurrence wins)."""
    if len(values) > max_items:
        raise ValidationFailed(f"{field} has {len(values)} entries; at most {max_items}", field=field)
    seen: dict[str, None] = {}
    for item in values:
        if not item.strip():
            raise ValidationFailed(f"{field} entries must not be empty", field=field)
        if len(item) > max_chars:
            raise ValidationFailed(f"{field} entries are at most {max_chars} characters", field=field)
        seen.setdefault(item, None)
    return list(seen)
