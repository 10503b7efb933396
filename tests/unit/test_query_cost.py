"""The query cost function over a table of documents, priced against the real schema."""

from __future__ import annotations

from typing import Any

import pytest
from graphql import parse
from hypothesis import given
from hypothesis import strategies as st

from app.graphql.cost import UNPAGED_LIST_SIZE, CostModel, PageSizeOutOfRange, query_cost
from app.graphql.schema import schema
from app.graphql.types.node import DEFAULT_PAGE_SIZE
from app.settings import Settings

INCIDENT = "{ runs(first:100){edges{node{agent{runs(first:100){edges{node{agent{runs(first:5){edges{node{id}}}}}}}}}}}}"
L = UNPAGED_LIST_SIZE
D = DEFAULT_PAGE_SIZE
# A first-page list is priced at what it can hold under the default settings: the largest
# page (100) for steps, ENVERIF_MAX_CHILDREN_PER_RUN (20) for children.
STEPS = Settings.model_construct().max_page_size
CHILDREN = Settings.model_construct().max_children_per_run

CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("scalars only", "{ viewer { role } }", {}, 1),
    ("viewer and its workspace", "{ viewer { role workspace { id name } } }", {}, 2),
    ("introspection is free", "{ __schema { types { name fields { name } } } }", {}, 0),
    ("one object", "query($id: ID!) { run(id: $id) { id status } }", {}, 1),
    ("object in an object", "query($id: ID!) { run(id: $id) { agent { name } } }", {}, 2),
    ("a page of first rows", "{ runs(first: 7) { edges { node { id } } } }", {}, 7),
    ("first omitted: default page size", "{ runs { edges { node { id } } } }", {}, D),
    ("pageInfo is one object per connection", "{ runs(first: 3) { pageInfo { hasNextPage } } }", {}, 3 + 1),
    (
        "per-row object multiplied by the page",
        "{ runs(first: 10) { edges { cursor node { id agent { name } } } } }",
        {},
        10 + 10,
    ),
    (
        "nested connections multiply",
        "{ agents(first: 4) { edges { node { runs(first: 5) { edges { node { id } } } } } } }",
        {},
        4 + 4 * 5,
    ),
    ("the incident", INCIDENT, {}, 100 + 100 + 100 * 100 + 100 * 100 + 100 * 100 * 5),
    ("first from a variable", "query($n: Int) { runs(first: $n) { edges { node { id } } } }", {"n": 9}, 9),
    ("variable default", "query($n: Int = 4) { runs(first: $n) { edges { node { id } } } }", {}, 4),
    (
        "variable given beats its default",
        "query($n: Int = 4) { runs(first: $n) { edges { node { id } } } }",
        {"n": 2},
        2,
    ),
    (
        "variable null: default page size",
        "query($n: Int) { runs(first: $n) { edges { node { id } } } }",
        {"n": None},
        D,
    ),
    ("negative first priced as the default", "{ runs(first: -1) { edges { node { id } } } }", {}, D),
    # A list that is its connection's first page is priced at the page it reads at most.
    ("first-page list", "query($id: ID!) { run(id: $id) { steps { id } } }", {}, 1 + STEPS),
    (
        "first-page lists nest",
        "query($id: ID!) { run(id: $id) { children { children { agent { name } } } } }",
        {},
        1 + CHILDREN * (1 + CHILDREN * (1 + 1)),
    ),
    ("other lists are an estimate", "query($id: ID!) { run(id: $id) { path { id } } }", {}, 1 + L),
    ("last is a page size", "{ runs(last: 7) { edges { node { id } } } }", {}, 7),
    (
        "a connection beside a list",
        "query($id: ID!) { run(id: $id) { stepsConnection(first: 3) { totalCount edges { node { id } } } } }",
        {},
        1 + 3,
    ),
    (
        "named fragment is expanded where spread",
        "query { runs(first: 3) { edges { node { ...R } } } } fragment R on Run { agent { id } parent { id } }",
        {},
        3 + 3 * 2,
    ),
    (
        "fragment spread twice counts twice",
        "query { a: runs(first: 2) { edges { node { ...R } } } b: runs(first: 5) { edges { node { ...R } } } }"
        " fragment R on Run { agent { id } }",
        {},
        (2 + 2) + (5 + 5),
    ),
    (
        "inline fragment on an interface",
        "query($id: ID!) { node(id: $id) { ... on Agent { runs(first: 6) { edges { node { id } } } } } }",
        {},
        1 + 6,
    ),
    (
        "agent memories connection inside a run page",
        "{ runs(first: 2) { edges { node { agent { memories(first: 3) { edges { node { key } } } } } } } }",
        {},
        2 + 2 * (1 + 3),
    ),
    ("mutation result", 'mutation { deleteMemory(id: "x") }', {}, 0),
    ("no such operation", "query A { viewer { role } }", {}, 0),
]


@pytest.mark.parametrize(
    ("document", "variables", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cost_table(document: str, variables: dict[str, Any], expected: int) -> None:
    operation = "B" if document.startswith("query A") else None
    assert (
        query_cost(schema._schema, parse(document), variables=variables, operation_name=operation) == expected
    )


def test_default_page_size_comes_from_the_model() -> None:
    document = parse("{ runs { edges { node { id } } } }")
    assert query_cost(schema._schema, document, model=CostModel(default_page_size=20)) == 20


def test_the_incident_is_over_the_default_limit_and_a_normal_page_is_not() -> None:
    from app.settings import Settings

    limit = Settings.model_fields["max_query_cost"].default
    assert query_cost(schema._schema, parse(INCIDENT)) > limit
    page = "{ runs(first: 100) { edges { node { id agent { name } stepsConnection(first: 10) { edges { node { id } } } } } } }"
    assert query_cost(schema._schema, parse(page)) <= limit
    # Every run's whole first page of steps could be 100 rows: 10,000 rows and more.
    lists = "{ runs(first: 100) { edges { node { id agent { name } steps { id } children { id } } } } }"
    assert query_cost(schema._schema, parse(lists)) > limit


def test_exponential_fragment_spreads_are_priced_in_linear_time() -> None:
    # F0 spreads F1 twice, F1 spreads F2 twice, ...: 2**40 expansions if walked naively.
    depth = 40
    fragments = " ".join(
        f"fragment F{i} on Run {{ agent {{ id }} ...F{i + 1} ...F{i + 1} }}" for i in range(depth)
    )
    document = parse(
        f"{{ runs(first: 1) {{ edges {{ node {{ ...F0 }} }} }} }} {fragments} fragment F{depth} on Run {{ id }}"
    )
    assert query_cost(schema._schema, document) == 1 + (2**depth - 1)


@given(st.integers(min_value=0, max_value=1_000), st.integers(min_value=0, max_value=1_000))
def test_nested_pages_cost_is_the_product(outer: int, inner: int) -> None:
    document = parse(
        "query($a: Int, $b: Int) { agents(first: $a) { edges { node { runs(first: $b) { edges { node { id } } } } } } }"
    )
    assert query_cost(schema._schema, document, variables={"a": outer, "b": inner}) == outer + outer * inner


@pytest.mark.parametrize("first", ["-1", "101", "$n"])
def test_first_outside_the_page_cap_is_refused_when_a_cap_is_given(first: str) -> None:
    document = parse(
        f"query($n: Int) {{ agents {{ edges {{ node {{ runs(first: {first}) {{ pageInfo {{ hasNextPage }} }} }} }} }} }}"
    )
    with pytest.raises(PageSizeOutOfRange, match="between 0 and 100"):
        query_cost(schema._schema, document, variables={"n": 10**9}, model=CostModel(max_page_size=100))
