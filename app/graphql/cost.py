"""Query cost: how many rows a document can make the database read, refused before execution.

Depth, alias and token limits bound a document's *shape*, and the page-size cap bounds each
list, but sizes multiply down the tree: ``runs(first:100){... agent{runs(first:100){...}}}``
is 153 bytes and asks for 10,000 runs per level. So every document is priced before it runs:

* a connection field costs its page size (``first``, or the default page size when omitted)
  for each parent, and what is selected inside its ``edges`` is multiplied by that size;
* a connection's page size is ``first`` or ``last``;
* a list of objects that is a connection's first page (``Run.children``, ``Run.steps``,
  ``Run.descendants``, ``Memory.revisions``) holds at most ``max_page_size`` items, fewer
  where the deployment bounds the list (ENVERIF_MAX_CHILDREN_PER_RUN, ENVERIF_MAX_TREE_RUNS,
  ENVERIF_MAX_TURNS x ENVERIF_MAX_CALLS_PER_TURN), and is priced at that real bound
  (``list_sizes``); any other list of objects (a run's path, its pending approvals:
  bounded by the tree's depth and size) at ``unpaged_list_size`` per parent;
* a single object (``Run.agent``) costs 1 per parent; scalars and introspection are free
  (introspection never touches the database).

The figure is an upper estimate of rows read, comparable with ``ENVERIF_MAX_QUERY_COST``.
Fragments (named and inline) are expanded where they are spread and variables are read from
the request; each named fragment is priced once per page-size context (the cost is linear in
the multiplier), so a document whose fragments spread each other exponentially is priced in
linear time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    get_named_type,
    get_nullable_type,
    is_composite_type,
    is_list_type,
)
from graphql.utilities import get_operation_ast, value_from_ast_untyped
from strawberry.extensions import SchemaExtension

from app.graphql.types.node import DEFAULT_PAGE_SIZE
from app.settings import Settings

VALIDATION_FAILED = "VALIDATION_FAILED"
# What a list without a page size (Run.path, Run.pendingApprovals ...) is assumed to hold per
# parent; a deep nesting of such lists still multiplies quickly past the limit.
UNPAGED_LIST_SIZE = 10
# The lists that are their connection's first page, read at the largest page size (the
# fields beside them are `<name>Connection`: app/graphql/types/node.py first_page).
FIRST_PAGE_LISTS = (("Run", "children"), ("Run", "descendants"), ("Run", "steps"), ("Memory", "revisions"))


def list_sizes(settings: Settings) -> dict[tuple[str, str], int]:
    """What each first-page list can hold under ``settings``: the page, or less where the
    deployment bounds the list itself."""
    page = settings.max_page_size
    return {
        ("Run", "children"): min(page, settings.max_children_per_run),
        ("Run", "descendants"): min(page, max(settings.max_tree_runs - 1, 0)),
        ("Run", "steps"): min(page, settings.max_turns * settings.max_calls_per_turn),
        ("Memory", "revisions"): page,
    }


@dataclass(frozen=True, slots=True)
class CostModel:
    default_page_size: int = DEFAULT_PAGE_SIZE
    unpaged_list_size: int = UNPAGED_LIST_SIZE
    # What each first-page list (FIRST_PAGE_LISTS) holds at most: list_sizes(settings).
    list_sizes: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: list_sizes(Settings.model_construct())
    )
    # When set, a `first` outside 0..max_page_size is refused (PageSizeOutOfRange) rather
    # than priced: the resolver would refuse it anyway, and this names the real problem.
    max_page_size: int | None = None


class PageSizeOutOfRange(Exception):
    def __init__(self, max_page_size: int, name: str = "first") -> None:
        super().__init__(f"{name} must be between 0 and {max_page_size}")
        self.message = str(self)
        self.field = name


def query_cost(
    schema: GraphQLSchema,
    document: DocumentNode,
    *,
    variables: Mapping[str, Any] | None = None,
    operation_name: str | None = None,
    model: CostModel = CostModel(),
) -> int:
    """The estimated number of rows the operation can read (0 if there is no such operation:
    validation reports that)."""
    operation = get_operation_ast(document, operation_name)
    if operation is None:
        return 0
    root = schema.get_root_type(operation.operation)
    if root is None:
        return 0
    return _Pricer(schema, document, operation, variables or {}, model).selections(
        operation.selection_set, root, page=None
    )


class _Pricer:
    def __init__(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        operation: OperationDefinitionNode,
        variables: Mapping[str, Any],
        model: CostModel,
    ) -> None:
        self.schema = schema
        self.model = model
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self.variables = dict(_variable_defaults(operation))
        self.variables.update(variables)
        self.memo: dict[tuple[str, int | None], int] = {}
        self.expanding: set[str] = set()

    def selections(
        self, selection_set: SelectionSetNode | None, parent: GraphQLNamedType, *, page: int | None
    ) -> int:
        """Cost of one selection set per parent object. ``page`` is the page size when the
        parent is a connection (its ``edges`` multiply by it)."""
        if selection_set is None:
            return 0
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += self.field(selection, parent, page=page)
            elif isinstance(selection, InlineFragmentNode):
                cond = selection.type_condition
                target = parent if cond is None else self.schema.get_type(cond.name.value)
                if target is not None:
                    total += self.selections(selection.selection_set, target, page=page)
            elif isinstance(selection, FragmentSpreadNode):
                total += self.fragment(selection.name.value, page=page)
        return total

    def fragment(self, name: str, *, page: int | None) -> int:
        key = (name, page)
        if key in self.memo:
            return self.memo[key]
        fragment = self.fragments.get(name)
        # A cycle is a validation error (NoFragmentCycles); price it as nothing here.
        if fragment is None or name in self.expanding:
            return 0
        target = self.schema.get_type(fragment.type_condition.name.value)
        if target is None:
            return 0
        self.expanding.add(name)
        try:
            cost = self.selections(fragment.selection_set, target, page=page)
        finally:
            self.expanding.discard(name)
        self.memo[key] = cost
        return cost

    def field(self, node: FieldNode, parent: GraphQLNamedType, *, page: int | None) -> int:
        name = node.name.value
        if name.startswith("__") or not isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
            return 0
        definition = parent.fields.get(name)
        if definition is None:
            return 0
        named = get_named_type(definition.type)
        if not is_composite_type(named):
            return 0
        if _is_connection(named):
            size = self.page_size(node)
            return size + self.selections(node.selection_set, named, page=size)
        if page is not None and name == "edges":
            # The rows were counted by the connection; what each edge selects is per row.
            return page * self.selections(node.selection_set, named, page=None)
        if _is_edge(parent) and name == "node":
            return self.selections(node.selection_set, named, page=None)
        inner = 1 + self.selections(node.selection_set, named, page=None)
        if is_list_type(get_nullable_type(definition.type)):
            return self.model.list_sizes.get((parent.name, name), self.model.unpaged_list_size) * inner
        return inner

    def page_size(self, node: FieldNode) -> int:
        for argument in node.arguments or ():
            if argument.name.value not in ("first", "last"):
                continue
            value: Any = None
            if isinstance(argument.value, IntValueNode):
                value = int(argument.value.value)
            elif isinstance(argument.value, VariableNode):
                value = self.variables.get(argument.value.name.value)
            if not isinstance(value, int) or isinstance(value, bool):
                break  # null, or not an Int: variable coercion reports it; priced as the default
            limit = self.model.max_page_size
            if limit is not None and not 0 <= value <= limit:
                raise PageSizeOutOfRange(limit, argument.name.value)
            # Without a cap, a negative `first` is priced as the default (the resolver refuses it).
            if value >= 0:
                return value
        return self.model.default_page_size


def _variable_defaults(operation: OperationDefinitionNode) -> Iterator[tuple[str, Any]]:
    for definition in operation.variable_definitions or ():
        if definition.default_value is not None:
            yield definition.variable.name.value, value_from_ast_untyped(definition.default_value)


def _is_connection(type_: GraphQLNamedType) -> bool:
    return isinstance(type_, GraphQLObjectType) and {"edges", "pageInfo"} <= type_.fields.keys()


def _is_edge(type_: GraphQLNamedType) -> bool:
    return isinstance(type_, GraphQLObjectType) and {"node", "cursor"} <= type_.fields.keys()


def cost_error(cost: int, limit: int) -> GraphQLError:
    return GraphQLError(
        f"query cost {cost} exceeds the limit of {limit} (rows it could read; "
        "ask for smaller pages or fewer nested lists)",
        extensions={"code": VALIDATION_FAILED, "cost": cost, "maxCost": limit},
    )


class QueryCostLimiter(SchemaExtension):
    """Refuses an operation whose cost exceeds the caller's ``settings.max_query_cost``.

    One class for the process (no per-request class, so validation caching stays possible);
    the limit and page size come from the request context's settings, so one schema serves
    apps with different settings. Runs at the start of execution: after parsing and
    validation (the document is known to be valid), before any resolver.
    """

    def on_execute(self) -> Iterator[None]:
        ec = self.execution_context
        settings = getattr(ec.context, "settings", None)
        if not isinstance(settings, Settings):
            settings = Settings.model_construct()  # the defaults, for a schema run without an app
        limit = settings.max_query_cost
        page = min(DEFAULT_PAGE_SIZE, settings.max_page_size)
        if ec.graphql_document is not None:
            try:
                cost = query_cost(
                    ec.schema._schema,
                    ec.graphql_document,
                    variables=ec.variables,
                    operation_name=ec.operation_name,
                    model=CostModel(
                        default_page_size=page,
                        list_sizes=list_sizes(settings),
                        max_page_size=settings.max_page_size,
                    ),
                )
            except PageSizeOutOfRange as exc:
                raise GraphQLError(
                    exc.message, extensions={"code": VALIDATION_FAILED, "field": exc.field}
                ) from None
            if cost > limit:
                # Raised, not returned: strawberry turns an exception from on_execute into the
                # operation's only error, for queries and subscriptions alike.
                raise cost_error(cost, limit)
        yield
