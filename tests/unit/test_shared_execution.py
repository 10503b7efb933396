"""Which variables split the sharing of a live event's execution (app.graphql.shared_execution):
those the selection reads; not those that only feed the subscription field's arguments."""

from __future__ import annotations

import pytest
from graphql import FragmentDefinitionNode, OperationDefinitionNode, parse

from app.graphql.shared_execution import _variables_read_by_events, encode_next


def read_by_events(text: str) -> frozenset[str]:
    document = parse(text)
    node = document.definitions[0]
    assert isinstance(node, OperationDefinitionNode)
    fragments = [d for d in document.definitions if isinstance(d, FragmentDefinitionNode)]
    return _variables_read_by_events(node, fragments)


@pytest.mark.parametrize(
    ("document", "read"),
    [
        ("subscription { runTree(rootRunId: 1) { seq } }", set()),
        ("subscription($r: ID!, $a: Int) { runTree(rootRunId: $r, afterSeq: $a) { seq } }", set()),
        (
            "subscription($r: ID!, $f: Boolean!) { runTree(rootRunId: $r) { seq payload @include(if: $f) } }",
            {"f"},
        ),
        ("subscription($r: ID!, $s: Boolean!) { runTree(rootRunId: $r) @skip(if: $s) { seq } }", {"s"}),
        # Used both as an argument and in the selection: it splits.
        (
            "subscription($r: ID!) { runTree(rootRunId: $r) { seq run { steps(first: 1) { totalCount } } } }",
            set(),
        ),
        (
            "subscription($r: ID!, $n: Int) { runTree(rootRunId: $r) { run { steps(first: $n) { totalCount } } } }",
            {"n"},
        ),
        ("subscription($r: ID!) { runTree(rootRunId: $r) { ... on RunEvent { seq runId } } }", set()),
        ("subscription($r: ID!, $d: Boolean!) @live(if: $d) { runTree(rootRunId: $r) { seq } }", {"d"}),
        ("subscription($r: ID!) { runTree(rootRunId: $r) { ... E } } fragment E on RunEvent { seq }", set()),
        ("subscription($r: ID!) { runTree(rootRunId: $r) { x: seq y: runId(hint: $r) } }", {"r"}),
        (
            "subscription($r: ID!, $f: Boolean!) { runTree(rootRunId: $r) { ...E } }"
            " fragment E on RunEvent { seq payload @include(if: $f) }",
            {"f"},
        ),
    ],
)
def test_variables_read_by_events(document: str, read: set[str]) -> None:
    assert read_by_events(document) == read


def test_only_shared_data_only_next_messages_are_encoded_ahead() -> None:
    assert encode_next({"id": "1", "type": "next", "payload": {"data": {"a": 1}}}) is None  # not shared
    assert encode_next({"type": "connection_ack"}) is None
    assert encode_next({"data": {"runTree": None}}) is None  # an HTTP response body


def test_shared_entries_are_forgotten_by_age_and_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import OrderedDict

    from app.graphql import shared_execution

    monkeypatch.setattr(shared_execution, "MAX_SHARED", 3)
    entries: OrderedDict[int, tuple[float, str]] = OrderedDict((i, (float(i), "x")) for i in range(5))
    shared_execution._forget_old(entries, now=4.0)
    assert list(entries) == [3, 4]  # 0 and 1: too many; 2: older than SHARE_S (1 s)
    shared_execution._forget_old(entries, now=10.0)
    assert list(entries) == []
