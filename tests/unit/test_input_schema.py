"""app.domain.input_schema: the path a refusal names, and schemas that are refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import ValidationFailed
from app.domain.input_schema import check_input, check_schema

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "integer"}}}},
        "c": {"$ref": "#/$defs/c"},
    },
    "$defs": {"c": {"enum": ["x", "y"]}},
}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"a": [{"b": 1}, {"b": "2"}]}, "input.a.1.b"),
        ({"a": "no"}, "input.a"),
        ({"c": "z"}, "input.c"),
        ([], "input"),
    ],
)
def test_the_refusal_names_the_path(value: Any, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_input(SCHEMA, value)
    assert caught.value.field == field


@pytest.mark.parametrize(
    "schema",
    [{"type": 3}, {"$ref": "other.json"}, {"$defs": {"x": {"$dynamicRef": "https://127.0.0.1/x"}}}, "s", 1],
)
def test_what_is_no_schema_is_refused(schema: Any) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_schema(schema)
    assert caught.value.field == "inputSchema"


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=10))  # fmt: skip
def test_no_schema_or_an_empty_one_takes_anything(value: Any) -> None:
    check_input(None, value)
    check_input(check_schema({}), value)
