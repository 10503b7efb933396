"""``DateTime``: one form on output, RFC 3339 with exactly three fraction digits and ``Z``
(``2026-12-01T19:58:08.005Z``), the andimarek date-time scalar (docs/graphql/guide.md: times).

strawberry's own ``DateTime`` prints ``datetime.isoformat()``, whose form depends on the
value: ``...:08+00:00`` when the microseconds happen to be 0, ``...:08.005123+00:00``
otherwise. A client cannot compare such strings, and JavaScript's ``Date`` keeps
milliseconds only, so ``new Date(s).toISOString()`` gives back the same string only in this
form. The database keeps microseconds; what a client sees is truncated to the millisecond.

Input stays as lenient as before (any RFC 3339 / ISO 8601 instant, any number of fraction
digits, ``Z`` or an offset). Because output is truncated, an instant with nothing below the
millisecond, as the API writes them, is read as that whole millisecond where it matters: a
``createdAfter`` of a run's own ``createdAt`` does not answer that run again
(``after_shown``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import strawberry
from strawberry.schema.types.base_scalars import DateTimeDefinition
from strawberry.types.scalar import ScalarDefinition

DATE_TIME_SPEC = "https://scalars.graphql.org/andimarek/date-time"

_LAST_MICROSECOND = timedelta(microseconds=999)


def serialize_datetime(value: datetime) -> str:
    """``value`` in UTC, to the millisecond, with ``Z``. A naive value is UTC (what the
    database keeps); none should reach here, but a time is better than an error."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def after_shown(value: datetime) -> datetime:
    """What "after ``value``" means for an instant the API may have written: one with no
    digits below the millisecond stands for all of its millisecond (every time stored in it
    prints as ``value``), so after it is after its last microsecond. Others are exact."""
    return value + _LAST_MICROSECOND if value.microsecond % 1000 == 0 else value


DateTime: ScalarDefinition = strawberry.scalar(
    name="DateTime",
    description=(
        "An instant: RFC 3339 in UTC to the millisecond, always in the form "
        "2026-12-01T19:58:08.005Z (the andimarek date-time scalar). As input, any RFC 3339 "
        "instant with a time zone (Z or an offset, any number of fraction digits)."
    ),
    specified_by_url=DATE_TIME_SPEC,
    serialize=serialize_datetime,
    parse_value=DateTimeDefinition.parse_value,
)

SCALAR_MAP: dict[object, ScalarDefinition] = {datetime: DateTime}
