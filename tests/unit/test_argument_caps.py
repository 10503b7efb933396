"""Argument caps over a table of documents, checked against the real schema."""

from __future__ import annotations

from typing import Any

import pytest
from graphql import parse
from hypothesis import given
from hypothesis import strategies as st

from app.graphql.limits import ArgumentCaps, check_arguments
from app.graphql.schema import schema

CAPS = ArgumentCaps(max_list_items=3, max_string_chars=10, max_text_chars=50)
MEMORIES = "query($a: ID!, $t: [String!], $q: String) { memories(agentId: $a, tags: $t, query: $q) { edges { node { id } } } }"
CREATE_MEMORY = 'mutation($i: MemoryInput!) { createMemory(agentId: "a", input: $i) { id } }'

CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("within caps", MEMORIES, {"a": "a", "t": ["x", "y", "z"], "q": "x" * 10}, None),
    ("too many tags", MEMORIES, {"a": "a", "t": ["x"] * 4}, "tags"),
    ("query string too long", MEMORIES, {"a": "a", "q": "x" * 11}, "query"),
    ("id too long", MEMORIES, {"a": "a" * 11}, "agentId"),
    ("one tag too long", MEMORIES, {"a": "a", "t": ["x" * 11]}, "tags"),
    (
        "literal list",
        "{ runs(status: [QUEUED, RUNNING, FAILED, SUCCEEDED]) { edges { node { id } } } }",
        {},
        "status",
    ),
    (
        "literal string",
        '{ memories(agentId: "a", query: "01234567890") { edges { node { id } } } }',
        {},
        "query",
    ),
    (
        "variable default counts",
        'query($q: String = "01234567890") { memories(agentId: "a", query: $q) { edges { node { id } } } }',
        {},
        "query",
    ),
    (
        "nested field argument",
        'query($t: [String!]) { agent(id: "a") { memories(tags: $t) { edges { node { id } } } } }',
        {"t": ["x"] * 4},
        "tags",
    ),
    (
        "inside a fragment",
        'query($t: [String!]) { agent(id: "a") { ...M } } fragment M on Agent { memories(tags: $t) { edges { node { id } } } }',
        {"t": ["x"] * 4},
        "tags",
    ),
    (
        "input field, named without 'input.'",
        CREATE_MEMORY,
        {"i": {"key": "k", "value": "v", "tags": ["x"] * 4}},
        "tags",
    ),
    ("input key too long", CREATE_MEMORY, {"i": {"key": "k" * 11, "value": "v"}}, "key"),
    ("long text gets the text cap", CREATE_MEMORY, {"i": {"key": "k", "value": "v" * 50}}, None),
    ("long text over the text cap", CREATE_MEMORY, {"i": {"key": "k", "value": "v" * 51}}, "value"),
    (
        "nested input list",
        'mutation { createAgent(input: {name: "n", model: {}, policy: {rules: [{tool: "a", decision: DENY}, {tool: "b", decision: DENY}, {tool: "c", decision: DENY}, {tool: "d", decision: DENY}]}}) { id } }',
        {},
        "policy.rules",
    ),
    (
        "JSON values are left to the services",
        'mutation($j: JSON) { startRun(agentId: "a", input: $j) { id } }',
        {"j": {"x": "y" * 100}},
        None,
    ),
]


@pytest.mark.parametrize(
    ("document", "variables", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_caps_table(document: str, variables: dict[str, Any], field: str | None) -> None:
    error = check_arguments(
        schema._schema, parse(document), variables=variables, operation_name=None, caps=CAPS
    )
    if field is None:
        assert error is None
    else:
        assert error is not None
        assert error.extensions == {"code": "VALIDATION_FAILED", "field": field}
        assert field in error.message


@given(st.lists(st.text(max_size=12), max_size=6))
def test_a_tag_list_passes_exactly_when_within_both_caps(tags: list[str]) -> None:
    error = check_arguments(
        schema._schema, parse(MEMORIES), variables={"a": "a", "t": tags}, operation_name=None, caps=CAPS
    )
    within = len(tags) <= CAPS.max_list_items and all(len(t) <= CAPS.max_string_chars for t in tags)
    assert (error is None) == within
