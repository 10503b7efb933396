"""Argument caps: every list and string a client sends is bounded before any resolver runs.

A filter argument reaches SQL (``tags`` becomes one ``EXISTS`` per tag, ``status`` an
``IN (...)`` list), so an unbounded one is work without limit: 20,000 tags once blocked the
event loop for 16 s building the statement. The services check what they store (a memory's
tags, an agent's tools) with their own, tighter rules; this is the outer bound for *every*
argument, so a new field is covered without anyone remembering to add a check.

* a list (at any depth of an input object) holds at most ``max_list_arg_items`` items;
* a ``String`` or ``ID`` holds at most ``max_string_arg_chars`` characters, except the long
  texts a service bounds by ``max_text_chars`` itself (a memory's value, instructions, ...);
* ``JSON`` values are left to the services (``check_json_size``).

The error is ``VALIDATION_FAILED`` naming the argument as the client spelt it
(``tags``, ``input.tools``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    get_named_type,
)
from graphql.utilities import get_operation_ast, value_from_ast_untyped
from strawberry.extensions import SchemaExtension

from app.settings import Settings

# Inputs whose length the services bound by ``max_text_chars`` (they are stored text, not
# filters or names): an agent's description and instructions, a memory's value.
LONG_TEXT_FIELDS = frozenset({"description", "instructions", "value"})
_CHECKED_SCALARS = frozenset({"String", "ID"})


@dataclass(frozen=True, slots=True)
class ArgumentCaps:
    max_list_items: int
    max_string_chars: int
    max_text_chars: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ArgumentCaps:
        return cls(
            max_list_items=settings.max_list_arg_items,
            max_string_chars=settings.max_string_arg_chars,
            max_text_chars=settings.max_text_chars,
        )


def argument_error(message: str, field: str) -> GraphQLError:
    return GraphQLError(message, extensions={"code": "VALIDATION_FAILED", "field": field})


def check_arguments(
    schema: GraphQLSchema,
    document: DocumentNode,
    *,
    variables: Mapping[str, Any] | None,
    operation_name: str | None,
    caps: ArgumentCaps,
) -> GraphQLError | None:
    """The first argument over a cap, as an error; None when every argument is within them."""
    operation = get_operation_ast(document, operation_name)
    if operation is None:
        return None
    root = schema.get_root_type(operation.operation)
    if root is None:
        return None
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    values = dict(_variable_defaults(operation))
    values.update(variables or {})
    walker = _Walker(schema, fragments, values, caps)
    try:
        walker.selections(operation.selection_set, root)
    except _OverCap as over:
        return argument_error(over.message, over.field)
    return None


class _OverCap(Exception):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class _Walker:
    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any],
        caps: ArgumentCaps,
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.variables: dict[str, Any] = dict(variables)
        self.caps = caps
        # Each fragment is checked once: its arguments do not depend on where it is spread.
        self.seen: set[str] = set()

    def selections(self, selection_set: SelectionSetNode | None, parent: GraphQLNamedType) -> None:
        if selection_set is None:
            return
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                self.field(selection, parent)
            elif isinstance(selection, InlineFragmentNode):
                cond = selection.type_condition
                target = parent if cond is None else self.schema.get_type(cond.name.value)
                if target is not None:
                    self.selections(selection.selection_set, target)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.fragments.get(name)
                if fragment is None or name in self.seen:
                    continue
                self.seen.add(name)
                target = self.schema.get_type(fragment.type_condition.name.value)
                if target is not None:
                    self.selections(fragment.selection_set, target)

    def field(self, node: FieldNode, parent: GraphQLNamedType) -> None:
        if not isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
            return
        definition = parent.fields.get(node.name.value)
        if definition is None:
            return
        for argument in node.arguments or ():
            arg_def = definition.args.get(argument.name.value)
            if arg_def is None:
                continue
            if isinstance(argument.value, VariableNode):
                value = self.variables.get(argument.value.name.value)
            else:
                value = value_from_ast_untyped(argument.value, self.variables)
            # Services name a mutation input's fields without the argument ("tags", not
            # "input.tags"); say it the same way whichever check catches it.
            name = argument.name.value
            self.value(value, arg_def.type, "" if name == "input" else name)
        self.selections(node.selection_set, get_named_type(definition.type))

    def value(self, value: Any, type_: GraphQLInputType, path: str) -> None:
        if value is None:
            return
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if isinstance(type_, GraphQLList):
            # GraphQL coerces a single value to a one-item list; only real lists are counted.
            items = value if isinstance(value, list) else [value]
            if len(items) > self.caps.max_list_items:
                raise _OverCap(f"{path} has {len(items)} items; at most {self.caps.max_list_items}", path)
            for item in items:
                self.value(item, type_.of_type, path)
        elif isinstance(type_, GraphQLInputObjectType):
            if isinstance(value, dict):
                for name, field in type_.fields.items():
                    self.value(value.get(name), field.type, f"{path}.{name}" if path else name)
        elif (
            isinstance(type_, GraphQLScalarType) and type_.name in _CHECKED_SCALARS and isinstance(value, str)
        ):
            leaf = path.rsplit(".", 1)[-1]
            cap = self.caps.max_text_chars if leaf in LONG_TEXT_FIELDS else self.caps.max_string_chars
            if len(value) > cap:
                raise _OverCap(f"{path} is longer than {cap} characters", path)


def _variable_defaults(operation: OperationDefinitionNode) -> Iterator[tuple[str, Any]]:
    for definition in operation.variable_definitions or ():
        if definition.default_value is not None:
            yield definition.variable.name.value, value_from_ast_untyped(definition.default_value)


class ArgumentLimiter(SchemaExtension):
    """Refuses an operation with a list or string argument over its cap, before execution.

    One class for the process; the caps come from the request context's settings.
    """

    def on_execute(self) -> Iterator[None]:
        ec = self.execution_context
        settings = getattr(ec.context, "settings", None)
        if not isinstance(settings, Settings):
            settings = Settings.model_construct()  # the defaults, for a schema run without an app
        if ec.graphql_document is not None:
            error = check_arguments(
                ec.schema._schema,
                ec.graphql_document,
                variables=ec.variables,
                operation_name=ec.operation_name,
                caps=ArgumentCaps.from_settings(settings),
            )
            if error is not None:
                raise error
        yield
