"""Strict JSON for stored values: what both databases can hold, under a size cap."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.jsonvalue import (
    MAX_JSON_DEPTH,
    NOT_JSON,
    TOO_LARGE,
    NotStorable,
    depth_error,
    json_depth,
    strict_json,
)
from app.domain.model_errors import model_error


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (None, None),
        ("é", "é"),
        ({"a": [1, 2.5, True, None]}, {"a": [1, 2.5, True, None]}),
        ((1, 2), [1, 2]),
        ({1: "x"}, {"1": "x"}),
        ({"nested": {"deep": ("t",)}}, {"nested": {"deep": ["t"]}}),
    ],
)
def test_storable_values_come_back_as_stored(value: Any, stored: Any) -> None:
    assert strict_json(value, max_bytes=1_000) == stored


@pytest.mark.parametrize(
    ("value", "code", "says"),
    [
        (math.nan, NOT_JSON, "nan"),
        ({"x": [math.inf]}, NOT_JSON, "inf"),
        (datetime(2026, 1, 1, tzinfo=UTC), NOT_JSON, "datetime"),
        ({"at": b"bytes"}, NOT_JSON, "bytes"),
        ({"s": {1, 2}}, NOT_JSON, "set"),
        (Decimal("1.5"), NOT_JSON, "Decimal"),
        ({(1, 2): "tuple key"}, NOT_JSON, "key"),
        ("x" * 2_000, TOO_LARGE, "2002 bytes"),
        ("é" * 600, TOO_LARGE, "1202 bytes"),  # the cap counts UTF-8 bytes, not characters
    ],
)
def test_values_that_cannot_be_stored_are_refused_with_a_reason(value: Any, code: str, says: str) -> None:
    with pytest.raises(NotStorable) as info:
        strict_json(value, max_bytes=1_000, what="the tool result")
    assert info.value.code == code
    assert says in info.value.message and info.value.message.startswith("the tool result")
    assert model_error(info.value.code, info.value.message) == {
        "error": {"code": code, "message": info.value.message}
    }


def test_deep_nesting_is_refused_not_crashed() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(NotStorable):
        strict_json(value, max_bytes=10_000_000)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_values)
def test_strict_json_is_identity_on_json_and_its_encoding_is_strict(value: Any) -> None:
    stored = strict_json(value, max_bytes=10_000_000)
    assert stored == value
    json.dumps(stored, allow_nan=False)  # strict: NaN/Infinity never get through


def _nested(levels: int, *, leaf: Any = 1, kind: str = "list") -> Any:
    value = leaf
    for _ in range(levels):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (1, 1),
        (None, 1),
        ([], 2),
        ({}, 2),
        ([1, 2], 2),
        ({"a": [1, {"b": 2}]}, 4),
        ([[], [[[]]]], 5),
        (_nested(31), 32),
        (_nested(31, kind="dict"), 32),
        (_nested(31, leaf=[]), 33),
    ],
)
def test_json_depth(value: Any, depth: int) -> None:
    assert json_depth(value) == depth


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_the_depth_cap_is_what_mariadb_stores(kind: str) -> None:
    # 31 nested arrays or objects: the most MariaDB's JSON_VALID accepts (32 is error 4025).
    assert strict_json(_nested(31, kind=kind), max_bytes=10_000) == _nested(31, kind=kind)
    with pytest.raises(NotStorable) as refused:
        strict_json(_nested(32, kind=kind), max_bytes=10_000, what="the arguments")
    assert refused.value.code == "NOT_JSON"
    assert refused.value.message == f"the arguments is nested 33 levels deep; at most {MAX_JSON_DEPTH}"
    with pytest.raises(NotStorable):
        strict_json(_nested(5), max_bytes=10_000, max_depth=5)


def test_depth_is_measured_without_recursion() -> None:
    assert json_depth(_nested(200_000)) == 200_001


deep_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet="[]{}ab", max_size=4),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet="[{a", max_size=2), children, max_size=3)
    ),
    max_leaves=40,
)


@given(deep_values, st.integers(min_value=2, max_value=12))
def test_a_value_is_refused_for_depth_exactly_when_it_is_deeper_than_the_cap(value: Any, cap: int) -> None:
    # strict_json only walks values whose encoding has as many brackets as the cap (strings
    # full of brackets included): the verdict must be the walk's in every case.
    deeper = json_depth(value) > cap
    try:
        strict_json(value, max_bytes=10_000_000, max_depth=cap, what="v")
    except NotStorable as refused:
        assert deeper and refused.message.startswith(f"v is nested {json_depth(value)} levels deep")
    else:
        assert not deeper


def _levels(value: Any) -> int:
    """json_depth's definition, recursively."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return 1 + max((_levels(child) for child in value), default=1)
    return 1


@given(deep_values | st.tuples(deep_values, deep_values))
def test_json_depth_is_its_definition(value: Any) -> None:
    assert json_depth(value) == _levels(value)


@given(deep_values | st.dictionaries(st.tuples(st.integers()), deep_values, max_size=2), st.integers(2, 12))
def test_depth_error_says_too_deep_exactly_when_the_value_is(value: Any, cap: int) -> None:
    found = depth_error(value, max_depth=cap, what="v")
    depth = _levels(value)
    assert found == (f"v is nested {depth} levels deep; at most {cap}" if depth > cap else None)


def test_a_value_too_deep_and_not_json_is_refused_for_its_depth_first() -> None:
    with pytest.raises(NotStorable) as refused:
        strict_json(_nested(40, leaf=float("nan")), max_bytes=10_000, what="v")
    assert refused.value.message == f"v is nested 41 levels deep; at most {MAX_JSON_DEPTH}"
