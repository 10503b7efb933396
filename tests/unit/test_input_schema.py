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
    [
        {"type": 3},
        {"$ref": "other.json"},
        {"$defs": {"x": {"$dynamicRef": "https://127.0.0.1/x"}}},
        "s",
        1,
        {"$ref": "#/$defs/nope"},  # a reference to nothing: every input would fail to check
        {"$ref": "#"},  # a loop that reads no input
        {"properties": {"a": {"pattern": "(a+)+$"}}},  # a regular expression: unbounded time
        {"patternProperties": {"^x": {}}},
    ],
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


def test_a_loop_only_some_inputs_reach_refuses_those_inputs_not_the_server() -> None:
    loop = {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "properties": {"x": {"$ref": "#/$defs/a"}},
    }
    check_input(check_schema(loop), {"y": 1})  # never reaches the loop
    with pytest.raises(ValidationFailed) as caught:
        check_input(loop, {"x": 1})
    assert caught.value.field == "input"


def test_recursive_schemas_that_read_the_input_work() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    check_input(check_schema(tree), {"kids": [{"kids": [{"kids": []}]}]})
    with pytest.raises(ValidationFailed) as caught:
        check_input(tree, {"kids": [{"kids": [3]}]})
    assert caught.value.field == "input.kids.0.kids.0"


def test_a_property_may_be_called_pattern() -> None:
    assert check_schema({"properties": {"pattern": {"type": "string"}}}) is not None
