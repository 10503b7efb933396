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

``DocumentShapeLimiter`` checks them after parsing and before graphql-core's own validation
walks the document (that walk is linear but costs ~15 ms for such a document, so a refused
document never reaches it). A document the cache already knows to be valid is not measured
again: the figures depend on its text alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
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
