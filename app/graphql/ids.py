"""Opaque global ids and pagination cursors.

A global id is base64url (unpadded) of ``"Type:<int>"``, e.g. ``Agent:12``. Clients must
treat it as opaque; we decode it only to find the table and the row. Anything that does not
decode to a known type and a positive integer is simply *not found*: a malformed id and
another workspace's id get the same answer, so ids reveal nothing.

A cursor is base64url of ``"cursor:<int>"``: the id of the last row of a page, because every
connection pages by id (keyset pagination, newest first). A malformed cursor is the client's
mistake in a named argument, so it is a ``VALIDATION_FAILED`` naming ``after``.
"""

from __future__ import annotations

import base64
import binascii
import re

from app.domain.errors import NotFound, ValidationFailed

NODE_TYPES = frozenset(
    {
        "Workspace",
        "Agent",
        "AgentVersion",
        "Run",
        "RunStep",
        "Memory",
        "Approval",
        "Schedule",
        "ApiToken",
        "AuditEvent",
        "McpServer",
    }
)

_B64URL = re.compile(r"[A-Za-z0-9_-]{1,200}")
# Ids are BIGINT at most; anything longer is not ours (and would be slow to parse).
_PK = re.compile(r"[1-9][0-9]{0,18}")
_CURSOR_PREFIX = "cursor:"
_MAX_PK = 2**63 - 1


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def _decode(value: str) -> str | None:
    if not isinstance(value, str) or not _B64URL.fullmatch(value):
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _parse_pk(text: str) -> int | None:
    if not _PK.fullmatch(text):
        return None
    pk = int(text)
    return pk if pk <= _MAX_PK else None


def to_global_id(type_name: str, pk: int) -> str:
    if type_name not in NODE_TYPES:
        raise ValueError(f"{type_name!r} is not a node type")
    return _encode(f"{type_name}:{pk}")


def parse_global_id(value: str) -> tuple[str, int] | None:
    """``(type, pk)`` for a well-formed id of a known type, else None."""
    decoded = _decode(value)
    if decoded is None:
        return None
    type_name, sep, pk_text = decoded.partition(":")
    if not sep or type_name not in NODE_TYPES:
        return None
    pk = _parse_pk(pk_text)
    return None if pk is None else (type_name, pk)


def from_global_id(value: str, expected: str, *, field: str | None = None) -> int:
    """The primary key behind an id that must name an ``expected`` object, or NOT_FOUND."""
    parsed = parse_global_id(value)
    if parsed is None or parsed[0] != expected:
        raise NotFound(f"no {expected.lower()} with this id", field=field)
    return parsed[1]


def to_cursor(pk: int) -> str:
    return _encode(f"{_CURSOR_PREFIX}{pk}")


def from_cursor(value: str, *, field: str = "after") -> int:
    decoded = _decode(value)
    pk = None
    if decoded is not None and decoded.startswith(_CURSOR_PREFIX):
        pk = _parse_pk(decoded[len(_CURSOR_PREFIX) :])
    if pk is None:
        raise ValidationFailed(f"'{field}' is not a cursor returned by this connection", field=field)
    return pk
