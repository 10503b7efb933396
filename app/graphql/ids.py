"""Opaque global ids and pagination cursors.

A global id is base64url (unpadded) of ``"Type:<int>"``, e.g. ``Agent:12``. Clients must
treat it as opaque; we decode it only to find the table and the row. Anything that does not
decode to a known type and a positive integer is simply *not found*: a malformed id and
another workspace's id get the same answer, so ids reveal nothing.

A cursor is base64url of ``"cursor:<Type.field>:<ORDER>:<int>"``: the id of a row, because
every connection pages by id (keyset pagination), bound to the list and ordering it came
from. A malformed or foreign cursor is the client's mistake in a named argument, so it is a
``VALIDATION_FAILED`` naming ``after`` or ``before``.
"""

from __future__ import annotations

from app.domain.errors import NotFound, ValidationFailed
from app.domain.global_ids import (
    NODE_TYPES,
    decode_text,
    encode_text,
    parse_global_id,
    parse_pk,
    to_global_id,
)

__all__ = ["NODE_TYPES", "from_cursor", "from_global_id", "parse_global_id", "to_cursor", "to_global_id"]

_CURSOR_PREFIX = "cursor:"


def from_global_id(value: str, expected: str, *, field: str | None = None) -> int:
    """The primary key behind an id that must name an ``expected`` object, or NOT_FOUND."""
    parsed = parse_global_id(value)
    if parsed is None or parsed[0] != expected:
        raise NotFound(f"no {expected.lower()} with this id", field=field)
    return parsed[1]


def to_cursor(scope: str, pk: int) -> str:
    """``scope``: the connection and ordering the row was read from (``Query.runs:NEWEST_FIRST``)."""
    return encode_text(f"{_CURSOR_PREFIX}{scope}:{pk}")


def from_cursor(value: str, scope: str, *, field: str = "after") -> int:
    """The row a cursor of ``scope`` names; any other cursor (another list's, the other
    ordering's, or none of ours) is VALIDATION_FAILED naming ``field``."""
    decoded = decode_text(value)
    prefix = f"{_CURSOR_PREFIX}{scope}:"
    pk = None
    if decoded is not None and decoded.startswith(prefix):
        pk = parse_pk(decoded[len(prefix) :])
    if pk is None:
        raise ValidationFailed(f"'{field}' is not a cursor of this list in this order", field=field)
    return pk
