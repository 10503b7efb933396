"""Global ids and cursors: opaque, round-trip, and anything malformed is simply not found."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import NotFound, ValidationFailed
from app.graphql.ids import (
    NODE_TYPES,
    from_cursor,
    from_global_id,
    parse_global_id,
    to_cursor,
    to_global_id,
)

BIGINT_MAX = 2**63 - 1


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@given(st.sampled_from(sorted(NODE_TYPES)), st.integers(min_value=1, max_value=BIGINT_MAX))
def test_global_ids_round_trip(type_name: str, pk: int) -> None:
    gid = to_global_id(type_name, pk)
    assert parse_global_id(gid) == (type_name, pk)
    assert from_global_id(gid, type_name) == pk
    # URL-safe and unpadded: fits in a path segment or a query string as is.
    assert all(c.isalnum() or c in "-_" for c in gid)


SCOPES = [
    "Query.runs:NEWEST_FIRST",
    "Query.runs:OLDEST_FIRST",
    "Agent.runs:NEWEST_FIRST",
    "Run.stepsConnection:OLDEST_FIRST",
]


@given(st.sampled_from(SCOPES), st.integers(min_value=1, max_value=BIGINT_MAX))
def test_cursors_round_trip(scope: str, pk: int) -> None:
    assert from_cursor(to_cursor(scope, pk), scope) == pk


@given(st.sampled_from(SCOPES), st.sampled_from(SCOPES), st.integers(min_value=1, max_value=BIGINT_MAX))
def test_a_cursor_is_bound_to_its_list_and_order(made: str, used: str, pk: int) -> None:
    # Another connection's cursor, or the same connection's in the other order, is refused.
    if made == used:
        return
    with pytest.raises(ValidationFailed) as caught:
        from_cursor(to_cursor(made, pk), used, field="before")
    assert caught.value.field == "before"


def test_known_encoding() -> None:
    # Documented shape: base64url of "Type:int". Clients must not rely on it, we do.
    assert to_global_id("Agent", 1) == "QWdlbnQ6MQ"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not base64!",
        _b64("Agent"),
        _b64("Agent:"),
        _b64("Agent:0"),
        _b64("Agent:-3"),
        _b64("Agent:+3"),
        _b64("Agent:03"),
        _b64("Agent: 3"),
        _b64("Agent:3.0"),
        _b64(f"Agent:{BIGINT_MAX + 1}"),
        _b64("agent:3"),
        _b64("Secret:3"),
        _b64("Agent:3:4"),
        _b64("Agent:٣"),  # a non-ASCII digit
        _b64("Agent:3") + "==",
        "A" * 1000,
    ],
)
def test_malformed_global_ids_are_not_found(value: str) -> None:
    assert parse_global_id(value) is None
    with pytest.raises(NotFound):
        from_global_id(value, "Agent")


def test_wrong_type_is_not_found() -> None:
    with pytest.raises(NotFound) as caught:
        from_global_id(to_global_id("Run", 5), "Agent", field="agentId")
    assert caught.value.field == "agentId"


def test_unknown_type_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        to_global_id("Secret", 1)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x",
        to_global_id("Agent", 1),
        _b64("cursor:"),
        _b64("cursor:1"),  # the old unbound form
        _b64("cursor:Query.runs:NEWEST_FIRST:-1"),
        _b64("cursor:Query.runs:NEWEST_FIRST:1x"),
        _b64("cursor:Query.runs:NEWEST_FIRST:"),
    ],
)
def test_malformed_cursor_is_a_validation_error(value: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        from_cursor(value, "Query.runs:NEWEST_FIRST")
    assert caught.value.field == "after"
