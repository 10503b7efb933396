"""Document shape limits (app.graphql.shape): depth, aliases and fields with fragments
expanded, each fragment measured once, refused before graphql-core validates anything."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from graphql import FieldNode, FragmentSpreadNode, InlineFragmentNode, SelectionSetNode, parse
from hypothesis import given, settings
from hypothesis import strategies as st

from app.graphql.schema import MAX_ALIASES, MAX_FIELDS, build_schema
from app.graphql.shape import Shape, operation_shapes, prescan
from tests.support.graphql import doubling


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("{ viewer { role } }", Shape(depth=1, aliases=0, fields=2)),
        ("{ a: viewer { r: role } b: viewer { role } }", Shape(depth=1, aliases=3, fields=4)),
        ("{ runs { edges { node { id } } } }", Shape(depth=3, aliases=0, fields=4)),
        # Introspection fields are not counted in depth (as strawberry's limiter), but are fields.
        ("{ __schema { types { name } } }", Shape(depth=0, aliases=0, fields=3)),
        ("{ __typename x: __typename }", Shape(depth=0, aliases=1, fields=2)),
        # A fragment counts where it is spread, as often as it is spread.
        ("{ viewer { ...V ...V } } fragment V on Viewer { a: role }", Shape(depth=1, aliases=2, fields=3)),
        ("{ viewer { ... on Viewer { role } } }", Shape(depth=1, aliases=0, fields=2)),
        (
            "{ runs { edges { node { ...R } } } } fragment R on Run { agent { runs { edges { node { id } } } } }",
            Shape(depth=7, aliases=0, fields=8),
        ),
        # Invalid documents are measured without failing; validation names their fault later.
        ("{ viewer { ...Missing } }", Shape(depth=1, aliases=0, fields=1)),
        # A cycle is counted up to where it closes.
        (
            "{ viewer { ...A } } fragment A on Viewer { x: role ...B } fragment B on Viewer { ...A }",
            Shape(depth=1, aliases=1, fields=2),
        ),
    ],
)
def test_shape_table(document: str, expected: Shape) -> None:
    assert list(operation_shapes(parse(document)).values()) == [expected]


def test_every_operation_is_measured() -> None:
    shapes = operation_shapes(
        parse("query A { viewer { role } } query B { a: viewer { role } } { __typename }")
    )
    assert shapes == {
        "A": Shape(1, 0, 2),
        "B": Shape(1, 1, 2),
        "anonymous": Shape(0, 0, 1),
    }


@pytest.mark.parametrize("aliased", [False, True])
def test_a_doubling_document_is_measured_in_linear_time(aliased: bool) -> None:
    document = parse(doubling(24, aliased=aliased))
    started = time.perf_counter()
    (shape,) = operation_shapes(document).values()
    assert time.perf_counter() - started < 0.05
    # runs, edges, node, and 2^24 ids (plus, aliased, one more field per spread fragment)
    assert shape.fields == 3 + (2**25 - 1 if aliased else 2**24)
    assert shape.aliases == (2**25 - 1 if aliased else 0)


def _naive(selection_set: SelectionSetNode | None, fragments: dict[str, Any], depth: int = 0) -> Shape:
    """The expansion itself, spread by spread (what strawberry's limiters did)."""
    total = Shape()
    for node in selection_set.selections if selection_set else ():
        if isinstance(node, FieldNode):
            inner = _naive(node.selection_set, fragments)
            counted = node.selection_set is not None and not node.name.value.startswith("__")
            total += Shape(
                1 + inner.depth if counted else 0, inner.aliases + bool(node.alias), inner.fields + 1
            )
        elif isinstance(node, InlineFragmentNode):
            total += _naive(node.selection_set, fragments)
        elif isinstance(node, FragmentSpreadNode):
            total += _naive(fragments[node.name.value].selection_set, fragments)
    return total


# Random acyclic documents: fragment i may spread only fragments below i.
_field = st.sampled_from(["id", "a: id", "agent { id }", "x: agent { name }", "__typename"])


@st.composite
def _documents(draw: st.DrawFn) -> str:
    count = draw(st.integers(0, 6))
    lines = []
    for i in range(count):
        parts = draw(st.lists(_field, min_size=1, max_size=3))
        parts += [f"...f{j}" for j in draw(st.lists(st.integers(0, i - 1), max_size=3))] if i else []
        if draw(st.booleans()):
            parts.append("... on Run { " + draw(_field) + " }")
        lines.append(f"fragment f{i} on Run {{ {' '.join(parts)} }}")
    spreads = (
        " ".join(f"...f{j}" for j in draw(st.lists(st.integers(0, count - 1), max_size=3))) if count else ""
    )
    return f"{{ runs {{ edges {{ node {{ id {spreads} }} }} }} }}\n" + "\n".join(lines)


@settings(max_examples=150, deadline=None)
@given(_documents())
def test_memoised_shape_equals_the_naive_expansion(document: str) -> None:
    parsed = parse(document)
    fragments = {d.name.value: d for d in parsed.definitions if hasattr(d, "type_condition")}
    operation = parsed.definitions[0]
    assert operation_shapes(parsed)["anonymous"] == _naive(operation.selection_set, fragments)  # type: ignore[attr-defined]


def _counted(document: str) -> tuple[int, int]:
    shapes = operation_shapes(parse(document)).values()
    return sum(s.aliases for s in shapes), sum(s.fields for s in shapes)


@settings(max_examples=150, deadline=None)
@given(_documents(), st.sampled_from(["", "query Q($n: Int = 1, $f: In = {a: [1, {b: \"}\"}]}) @x(y: 2) "]),
       st.sampled_from(["", "# a comment { with: braces }\n", ",,\n\t"]))  # fmt: skip
def test_the_prescan_counts_what_the_parsed_document_holds(document: str, header: str, noise: str) -> None:
    document = header + noise.join(document.split(" ", 3)) if header else noise + document
    found = prescan(document)
    assert found is not None and (found.aliases, found.fields) == _counted(document)


@pytest.mark.parametrize(
    "document",
    [
        "{ a: viewer { r: role } b: viewer { role } }",
        "query A { viewer { role } } query B { a: viewer { role } } { __typename }",
        "{ __schema { types { name } } }",
        '{ runs(filter: {text: """a } b \\""" c"""}) @include(if: true) { edges { node { id } } } }',
        "{ viewer { ... on Viewer { role } ... @skip(if: false) { role } } }",
        "{ viewer { ...Missing } }",
        doubling(24, aliased=True),
    ],
)
def test_the_prescan_table(document: str) -> None:
    found = prescan(document)
    assert found is not None and (found.aliases, found.fields) == _counted(document)


@pytest.mark.parametrize(
    "document",
    [
        "type Run { id: ID }",  # not a request
        "{ viewer { role } ",  # unclosed
        '{ viewer "text" }',
        "{ viewer { ...A } } fragment A on Viewer { ...B } fragment B on Viewer { ...A }",  # a cycle
        "{ vïewer }",
    ],
)
def test_what_the_prescan_cannot_read_is_left_to_the_parser(document: str) -> None:
    assert prescan(document) is None


@pytest.mark.parametrize("aliased", [False, True])
def test_a_doubling_document_is_refused_before_it_is_parsed(
    aliased: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strawberry.schema.schema as strawberry_schema

    parsed: list[str] = []
    real = strawberry_schema.parse
    monkeypatch.setattr(strawberry_schema, "parse", lambda q, **kw: parsed.append(q) or real(q, **kw))
    schema = build_schema(12)
    started = time.perf_counter()
    for i in range(20):
        result = asyncio.run(schema.execute(doubling(24, aliased=aliased) + f"\n# {i}"))
        (error,) = result.errors or []
        assert error.extensions == {"code": "VALIDATION_FAILED"}
    # Each refusal costs well under a millisecond of scanning (parsing cost about 4 ms).
    assert time.perf_counter() - started < 1.0
    assert parsed == []
    assert asyncio.run(schema.execute(f"{{ __typename }} # {aliased} {time.time()}")).errors is None
    assert len(parsed) == 1


@pytest.mark.parametrize("aliased", [False, True])
@pytest.mark.parametrize("production", [False, True])
def test_the_schema_refuses_a_doubling_document_before_validating_it(
    aliased: bool, production: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strawberry.schema.schema as strawberry_schema

    validated: list[object] = []
    real = strawberry_schema.validate_document
    monkeypatch.setattr(strawberry_schema, "validate_document", lambda *a: validated.append(a) or real(*a))
    schema = build_schema(12, production=production)
    # A fresh comment each time, as an attacker would send: the document cache cannot help.
    for i in range(3):
        started = time.perf_counter()
        result = asyncio.run(schema.execute(doubling(24, aliased=aliased) + f"\n# {i}"))
        assert time.perf_counter() - started < 0.5
        (error,) = result.errors or []
        assert error.extensions == {"code": "VALIDATION_FAILED"}
        assert (f"Allowed: {MAX_ALIASES}" if aliased else f"at most {MAX_FIELDS}") in error.message
    assert validated == []
    # A document within the limits is still validated by graphql-core.
    assert asyncio.run(schema.execute("{ nope }")).errors
    assert len(validated) == 1


def test_a_subscription_with_a_doubling_fragment_is_refused_too() -> None:
    schema = build_schema(12)
    document = doubling(
        24,
        aliased=False,
        operation='subscription { runTree(rootRunId: "x") { run { ...f24 } } }',
    )

    async def first() -> Any:
        result = await schema.subscribe(document)
        if hasattr(result, "__aiter__"):
            async for item in result:
                return item
        return result

    result = asyncio.run(first())
    (error,) = result.errors
    assert error.extensions == {"code": "VALIDATION_FAILED"}


def test_depth_over_the_limit_names_the_operation() -> None:
    schema = build_schema(3)
    result = asyncio.run(schema.execute("query Deep { runs { edges { node { agent { id } } } } }"))
    (error,) = result.errors or []
    assert error.message == "'Deep' exceeds maximum operation depth of 3"
    assert error.extensions == {"code": "VALIDATION_FAILED"}


def test_a_fragment_chain_deeper_than_the_stack_is_refused_not_crashed() -> None:
    # 600 fragments, each spreading the next: just under the token cap (8 tokens each).
    chain = "\n".join(f"fragment f{i} on Run {{ ...f{i + 1} }}" for i in range(600))
    document = "{ runs { edges { node { ...f0 } } } }\n" + chain + "\nfragment f600 on Run { id }"
    result = asyncio.run(build_schema(12).execute(document))
    (error,) = result.errors or []
    assert error.message == "fragments spread one another too deeply"
    assert error.extensions == {"code": "VALIDATION_FAILED"}
