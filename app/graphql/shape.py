"""Document shape limits: depth, aliases and fields, each fragment measured once.

A document is measured as if every fragment were expanded where it is spread, but a named
fragment's figures do not depend on where it is spread, so each is computed once and
remembered. strawberry's ``QueryDepthLimiter`` and ``MaxAliasesLimiter`` re-walk a fragment
at every spread: an 839-byte document whose fragments each spread the previous one twice
(``fragment f24 on Run { ...f23 ...f23 }`` ... ``fragment f0 on Run { id }``) cost them 2^24
walks, seconds of CPU during which the whole process answered nothing, with or without a
token (docs/operating/security.md). Here the work is linear in the document's size, and
the size itself is bounded before parsing (characters, then tokens: app.graphql.schema).

Three figures, over every operation of the document:

* **depth**: fields nested inside one another (a field with a selection set counts one;
  introspection fields are not counted, as in strawberry's limiter), at most
  ``max_depth``;
* **aliases**: aliased fields in the expansion, at most ``max_aliases``;
* **fields**: field selections in the expansion, at most ``max_fields``. Without fragments
  a document under the token cap holds fewer fields than that; the cap keeps fragments from
  making a small document as much work for the validator and executor as a huge one.

Before parsing, ``prescan`` counts aliases and fields the same way from the document's
text, with one regular expression for its tokens: graphql-core's lexer and parser, in
Python, cost ~4 ms for an 839-byte bomb, most of what refusing it cost, so 20 of them in
flight still doubled ``/healthz``'s latency (bench/fragments.py). A document the pre-scan
cannot read (anything it does not expect) is left to the parser.

``DocumentShapeLimiter`` checks them after parsing and before graphql-core's own validation
walks the document (that walk is linear but costs ~15 ms for such a document, so a refused
document never reaches it). A document the cache already knows to be valid is not measured
again: the figures depend on its text alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    parse,
)
from strawberry.extensions import SchemaExtension

VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass(frozen=True, slots=True)
class Shape:
    depth: int = 0
    aliases: int = 0
    fields: int = 0

    def __add__(self, other: Shape) -> Shape:
        """Two selections side by side: the deeper depth, the sums of the counts."""
        return Shape(max(self.depth, other.depth), self.aliases + other.aliases, self.fields + other.fields)


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    max_depth: int
    max_aliases: int
    max_fields: int


def operation_shapes(document: DocumentNode) -> dict[str, Shape]:
    """Each operation's shape by name (``anonymous`` for an unnamed one), fragments expanded.

    Raises ``RecursionError`` for fragments spread in a chain longer than Python's stack."""
    measurer = _Measurer(
        {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    )
    return {
        (d.name.value if d.name else "anonymous"): measurer.selections(d.selection_set)
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode)
    }


def shape_error(document: DocumentNode, limits: ShapeLimits) -> GraphQLError | None:
    """The first limit the document breaks, as a request error; None when it breaks none."""
    try:
        shapes = operation_shapes(document)
    except RecursionError:
        return _error("fragments spread one another too deeply")
    for name, shape in shapes.items():
        if shape.depth > limits.max_depth:
            return _error(f"'{name}' exceeds maximum operation depth of {limits.max_depth}")
    aliases = sum(shape.aliases for shape in shapes.values())
    if aliases > limits.max_aliases:
        return _error(f"{aliases} aliases found. Allowed: {limits.max_aliases}")
    fields = sum(shape.fields for shape in shapes.values())
    if fields > limits.max_fields:
        return _error(
            f"the document selects {fields} fields with its fragments expanded; at most {limits.max_fields}"
        )
    return None


def _error(message: str) -> GraphQLError:
    return GraphQLError(message, extensions={"code": VALIDATION_FAILED})


class _Measurer:
    def __init__(self, fragments: Mapping[str, FragmentDefinitionNode]) -> None:
        self.fragments = fragments
        self.memo: dict[str, Shape] = {}
        self.expanding: set[str] = set()

    def selections(self, selection_set: SelectionSetNode | None) -> Shape:
        total = Shape()
        if selection_set is None:
            return total
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += self.field(selection)
            elif isinstance(selection, InlineFragmentNode):
                total += self.selections(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                total += self.fragment(selection.name.value)
        return total

    def field(self, node: FieldNode) -> Shape:
        inner = self.selections(node.selection_set)
        counted = node.selection_set is not None and not node.name.value.startswith("__")
        return Shape(
            depth=1 + inner.depth if counted else 0,
            aliases=inner.aliases + (1 if node.alias is not None else 0),
            fields=inner.fields + 1,
        )

    def fragment(self, name: str) -> Shape:
        known = self.memo.get(name)
        if known is not None:
            return known
        fragment = self.fragments.get(name)
        # Unknown fragments and cycles are validation errors (KnownFragmentNames,
        # NoFragmentCycles), reported by graphql-core once the shape is within the limits.
        if fragment is None or name in self.expanding:
            return Shape()
        self.expanding.add(name)
        try:
            shape = self.selections(fragment.selection_set)
        finally:
            self.expanding.discard(name)
        self.memo[name] = shape
        return shape


# -- before parsing ------------------------------------------------------------------------------

# GraphQL's tokens (commas and whitespace are ignored), and anything else as ``other``.
_TOKENS: Final = re.compile(
    r"""(?P<skip>[\s,\ufeff]+|\#[^\n\r]*)
    |(?P<string>\"\"\"(?:\\\"\"\"|[^\"]|\"(?!\"\"))*\"\"\"|\"(?:\\.|[^\"\\\n\r])*\")
    |(?P<spread>\.\.\.)
    |(?P<name>[_A-Za-z][_0-9A-Za-z]*)
    |(?P<number>-?[0-9][0-9.eE+\-]*)
    |(?P<punct>[{}()\[\]:@$=!|&])
    |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
_OPERATION_WORDS: Final = frozenset({"query", "mutation", "subscription"})


@dataclass
class _Counts:
    """One definition's own fields and aliases, and the fragments it spreads."""

    aliases: int = 0
    fields: int = 0
    spreads: list[str] | None = None
    kind: str = "query"  # an operation's type
    name: str | None = None  # an operation's name


def _definitions(query: str) -> tuple[list[_Counts], dict[str, _Counts]] | None:
    """Each operation's and each named fragment's counts; None for what this cannot read."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKENS.finditer(query) if m.lastgroup != "skip"]
    operations: list[_Counts] = []
    fragments: dict[str, _Counts] = {}
    i, n = 0, len(tokens)
    while i < n:
        kind, text = tokens[i]
        counts = _Counts(spreads=[])
        if kind == "name" and text == "fragment":
            if i + 3 >= n or tokens[i + 1][0] != "name" or tokens[i + 2][1] != "on":
                return None
            if tokens[i + 1][1] in fragments:
                return None  # a duplicate name: the validator's to report
            fragments[tokens[i + 1][1]] = counts
        elif (kind == "name" and text in _OPERATION_WORDS) or text == "{":
            if text != "{":
                counts.kind = text
                if i + 1 < n and tokens[i + 1][0] == "name":
                    counts.name = tokens[i + 1][1]
            operations.append(counts)
        else:
            return None
        # The header (name, variables with their defaults, directives) up to the first brace.
        parens = 0
        while i < n and not (parens == 0 and tokens[i][1] == "{"):
            parens += {"(": 1, ")": -1}.get(tokens[i][1], 0)
            i += 1
        i = _selection_set(tokens, i, counts)
        if i < 0:
            return None
    return operations, fragments


def _selection_set(tokens: list[tuple[str | None, str]], i: int, counts: _Counts) -> int:
    """Counts the selection set opening at ``tokens[i]``; the index after it, -1 if unreadable."""
    assert counts.spreads is not None
    depth, parens, n = 0, 0, len(tokens)
    while i < n:
        kind, text = tokens[i]
        i += 1
        if kind == "other":
            return -1
        if parens:  # arguments: values, variables, object literals
            parens += {"(": 1, ")": -1}.get(text, 0)
        elif text == "(":
            parens = 1
        elif text == "{":
            depth += 1
        elif text == "}":
            depth -= 1
            if depth == 0:
                return i
        elif text == "@":
            i += 1  # the directive's name
        elif kind == "spread":
            if i < n and tokens[i][1] == "on":
                i += 2  # an inline fragment's type condition
            elif i < n and tokens[i][0] == "name":
                counts.spreads.append(tokens[i][1])
                i += 1
        elif kind == "name":
            if i < n and tokens[i][1] == ":":
                counts.aliases += 1
                if i + 1 >= n or tokens[i + 1][0] != "name":
                    return -1
                i += 2  # the colon and the field's own name
            counts.fields += 1
        elif kind != "punct" or depth == 0:
            return -1
    return -1


def prescan(query: str) -> Shape | None:
    """The aliases and fields of every operation together, fragments expanded (depth is
    not measured: it cannot grow faster than the document), as ``operation_shapes`` counts
    them; None when the text is not a document this reads, or its fragments form a cycle."""
    found = _definitions(query)
    return None if found is None else _expanded(*found)


def _expanded(operations: list[_Counts], fragments: dict[str, _Counts]) -> Shape | None:
    memo: dict[str, Shape] = {}
    expanding: set[str] = set()

    def measure(counts: _Counts) -> Shape | None:
        total = Shape(0, counts.aliases, counts.fields)
        for name in counts.spreads or ():
            if name not in memo:
                fragment = fragments.get(name)
                if fragment is None:
                    memo[name] = Shape()  # unknown: the validator's to report
                    continue
                if name in expanding:
                    return None
                expanding.add(name)
                inner = measure(fragment)
                expanding.discard(name)
                if inner is None:
                    return None
                memo[name] = inner
            total += memo[name]
        return total

    total = Shape()
    for operation in operations:
        shape = measure(operation)
        if shape is None:
            return None
        total += shape
    return total


def prescan_error(query: str, limits: ShapeLimits) -> tuple[GraphQLError, list[_Counts]] | None:
    """``shape_error``'s alias and field limits, from the text alone (see ``prescan``): the
    error and the document's operations, or None."""
    found = _definitions(query)
    if found is None:
        return None
    try:
        shape = _expanded(*found)
    except RecursionError:
        return None  # left to the parser and ``shape_error``, which say so
    if shape is None:
        return None
    if shape.aliases > limits.max_aliases:
        return _error(f"{shape.aliases} aliases found. Allowed: {limits.max_aliases}"), found[0]
    if shape.fields > limits.max_fields:
        message = f"the document selects {shape.fields} fields with its fragments expanded; at most {limits.max_fields}"
        return _error(message), found[0]
    return None


class DocumentPrescan(SchemaExtension):
    """Refuses a document over the alias or field limit before it is parsed (``prescan``).
    After the document cache: a document it already holds is not scanned.

    strawberry parses unless a document is set, and skips validation and execution once
    errors are: so the refusal sets both, the document a stand-in of one field with the
    operation's type and name (what strawberry reads before answering with the errors).
    """

    def __init__(self, *, limits: ShapeLimits) -> None:
        self.limits = limits

    def on_parse(self) -> Iterator[None]:
        ec = self.execution_context
        if ec.query is not None and ec.graphql_document is None:
            refused = prescan_error(ec.query, self.limits)
            if refused is not None:
                error, operations = refused
                wanted = ec._provided_operation_name
                chosen = (
                    next((op for op in operations if op.name == wanted), operations[0])
                    if operations
                    else None
                )
                if chosen is not None and (wanted is None or chosen.name == wanted):
                    name = f" {chosen.name}" if chosen.name else ""
                    ec.graphql_document = parse(f"{chosen.kind}{name} {{ __typename }}")
                    ec.pre_execution_errors = [error]
        yield


class DocumentShapeLimiter(SchemaExtension):
    """Refuses a document over a shape limit before graphql-core validates it.

    Must come after the document cache in the extension list: the cache marks a document it
    knows to be valid (an empty error list) in its ``on_validate``, and this one skips it.
    Setting the errors here makes strawberry skip its own validation.
    """

    def __init__(self, *, limits: ShapeLimits) -> None:
        self.limits = limits

    def on_validate(self) -> Iterator[None]:
        ec = self.execution_context
        if ec.pre_execution_errors is None and ec.graphql_document is not None:
            error = shape_error(ec.graphql_document, self.limits)
            if error is not None:
                ec.pre_execution_errors = [error]
        yield
