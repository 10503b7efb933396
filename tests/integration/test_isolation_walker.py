"""Tenant isolation, walked from the schema: every Query field and Mutation that takes an
``ID`` argument, called with another workspace's ids (of every type) and with ids of the
wrong type from one's own workspace, answers NOT_FOUND and never any data.

The calls are built from the schema itself, so a new field with an ``ID`` argument is covered
without touching this file: the expected object type of each id argument is read from its
name (``agentId``, ``rootRunId``) or from the field (``run(id:)`` returns a Run,
``deleteMemory(id:)`` names Memory), and the other required arguments get minimal valid
values per type. Only inputs a minimal value cannot satisfy are listed in ``INPUT_VALUES``;
a field whose id type cannot be inferred fails the test, asking for an entry in ``ID_TYPES``.

``node(id:)`` takes any type, so only other workspaces' ids apply to it, and it answers them
the Relay way: ``null``, exactly as for an id that does not exist (or NOT_FOUND).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLUnionType,
    get_named_type,
)

from app.graphql.ids import NODE_TYPES
from app.graphql.schema import schema
from tests.integration.test_graphql_isolation import Objects, _populate

GRAPHQL = schema._schema

# (root, field, argument) -> the node type its id must name, where the names do not say it.
ID_TYPES: dict[tuple[str, str, str], str | None] = {
    ("Query", "node", "id"): None,  # any type
    ("Query", "auditEvents", "objectId"): None,  # a filter over any object's id
    ("Query", "nodes", "ids"): None,  # any type, a list
    ("Query", "policyPreview", "agentIds"): "Agent",  # a run path: agents, root first
}
# Id arguments that filter a list: another workspace's id selects nothing (an empty page).
FILTER_IDS = {("Query", "auditEvents", "objectId")}
# Input objects that a minimal value (every required field set to a trivial value) cannot
# satisfy: the service would refuse the input before it ever looks at the id.
INPUT_VALUES: dict[str, dict[str, Any]] = {
    "ScheduleInput": {"cron": "@daily"},
    "CreateScheduleInput": {"cron": "@daily"},
}
SCALAR_VALUES: dict[str, Any] = {
    "String": "x",
    "Int": 1,
    "Float": 0.5,
    "Boolean": True,
    "JSON": {},
    "DateTime": "2030-01-01T00:00:00+00:00",
}
# Objects._populate creates: attribute -> node type.
ATTRIBUTES = {
    "agent": "Agent",
    "run": "Run",
    "step": "RunStep",
    "memory": "Memory",
    "approval": "Approval",
    "schedule": "Schedule",
    "workspace": "Workspace",
    "api_token": "ApiToken",
    "agent_version": "AgentVersion",
    "audit_event": "AuditEvent",
    "mcp_server": "McpServer",
    "memory_revision": "MemoryRevision",
    "schedule_firing": "ScheduleFiring",
}


@dataclass(frozen=True)
class IdCall:
    root: str  # Query or Mutation
    field: str
    argument: str
    expected: str | None  # node type of the id; None: any (node)

    def __str__(self) -> str:
        return f"{self.root}.{self.field}({self.argument}:)"


def _expected_type(root: str, field_name: str, arg_name: str, field: GraphQLField) -> str | None:
    if (root, field_name, arg_name) in ID_TYPES:
        return ID_TYPES[(root, field_name, arg_name)]
    # agentId -> Agent, rootRunId -> Run; for `id`, the field: run(id:) -> Run,
    # deleteSchedule(id:) -> Schedule, updateMemory(id:) returns a Memory.
    candidates = []
    if arg_name != "id" and arg_name.endswith("Id"):
        candidates.append(arg_name[:-2])
    else:
        candidates += [get_named_type(field.type).name, field_name]
    for text in candidates:
        matches = [t for t in NODE_TYPES if text.lower().endswith(t.lower())]
        if matches:
            return max(matches, key=len)  # RunStep before Run
    pytest.fail(f"cannot tell which object {root}.{field_name}({arg_name}:) expects: add it to ID_TYPES")


def _id_calls() -> Iterator[IdCall]:
    for root_type in (GRAPHQL.query_type, GRAPHQL.mutation_type):
        assert root_type is not None
        for field_name, field in root_type.fields.items():
            for arg_name, arg in field.args.items():
                if get_named_type(arg.type).name == "ID":
                    yield IdCall(
                        root_type.name,
                        field_name,
                        arg_name,
                        _expected_type(root_type.name, field_name, arg_name, field),
                    )


def _minimal(type_: GraphQLInputType) -> Any:
    if isinstance(type_, GraphQLNonNull):
        return _minimal(type_.of_type)
    if isinstance(type_, GraphQLList):
        return []
    if isinstance(type_, GraphQLEnumType):
        return next(iter(type_.values))
    if isinstance(type_, GraphQLInputObjectType):
        if type_.name in INPUT_VALUES:
            return INPUT_VALUES[type_.name]
        return {
            name: _minimal(f.type) for name, f in type_.fields.items() if isinstance(f.type, GraphQLNonNull)
        }
    assert isinstance(type_, GraphQLScalarType)
    if type_.name not in SCALAR_VALUES:
        pytest.fail(f"no minimal value for scalar {type_.name}: add it to SCALAR_VALUES")
    return SCALAR_VALUES[type_.name]


def _is_list(type_: GraphQLOutputType) -> bool:
    while isinstance(type_, GraphQLNonNull):
        type_ = type_.of_type
    return isinstance(type_, GraphQLList) or get_named_type(type_).name.endswith("Connection")


def _selection(type_: GraphQLOutputType, depth: int = 2) -> str:
    """Every scalar field without required arguments, and objects below, ``depth`` deep; lists
    only on the top object, with scalars only (lists in lists would cost more than a query
    may, docs/graphql/frontends.md#paging)."""
    named = get_named_type(type_)
    if isinstance(named, GraphQLScalarType | GraphQLEnumType):
        return ""
    if isinstance(named, GraphQLUnionType):
        return "{ __typename }"
    assert isinstance(named, GraphQLObjectType | GraphQLInterfaceType)
    parts = ["__typename"]
    for name, field in named.fields.items():
        if any(isinstance(a.type, GraphQLNonNull) for a in field.args.values()):
            continue
        inner = get_named_type(field.type)
        if isinstance(inner, GraphQLScalarType | GraphQLEnumType):
            parts.append(name)
        elif _is_list(field.type):
            if depth == 2:
                parts.append(f"{name} {_selection(field.type, 0)}")
        elif depth > 0:
            parts.append(f"{name} {_selection(field.type, depth - 1)}")
    return "{ " + " ".join(parts) + " }"


def _document(call: IdCall) -> tuple[str, dict[str, Any]]:
    root = GRAPHQL.query_type if call.root == "Query" else GRAPHQL.mutation_type
    assert root is not None
    field = root.fields[call.field]
    definitions, arguments, variables = [], [], {}
    for name, arg in field.args.items():
        # createMemory(memory:) and the like: required at run time (one of it and the
        # deprecated `input` it replaces), so nullable in the schema.
        current_input = isinstance(arg.type, GraphQLInputObjectType) and arg.deprecation_reason is None
        if name != call.argument and not isinstance(arg.type, GraphQLNonNull) and not current_input:
            continue
        definitions.append(f"${name}: {arg.type}")
        arguments.append(f"{name}: ${name}")
        variables[name] = None if name == call.argument else _minimal(arg.type)
    operation = "query" if call.root == "Query" else "mutation"
    document = f"{operation}({', '.join(definitions)}) {{ {call.field}({', '.join(arguments)}) {_selection(field.type)} }}"
    return document, variables


def _ids(objects: Objects) -> dict[str, str]:
    ids = {node_type: getattr(objects, attr) for attr, node_type in ATTRIBUTES.items()}
    missing = NODE_TYPES - ids.keys()
    assert not missing, f"the isolation fixture creates no {sorted(missing)}: extend _populate and ATTRIBUTES"
    return ids


CALLS = list(_id_calls())


def test_the_walk_covers_the_contract() -> None:
    covered = {str(c) for c in CALLS}
    for known in [
        "Query.node(id:)",
        "Query.nodes(ids:)",
        "Query.agent(id:)",
        "Query.run(id:)",
        "Query.runs(agentId:)",
        "Query.memories(agentId:)",
        "Mutation.updateAgent(id:)",
        "Mutation.startRun(agentId:)",
        "Mutation.cancelRun(id:)",
        "Mutation.decideApproval(id:)",
        "Mutation.createMemory(agentId:)",
        "Mutation.updateMemory(id:)",
        "Mutation.deleteMemory(id:)",
        "Mutation.createSchedule(agentId:)",
        "Mutation.updateSchedule(id:)",
        "Mutation.deleteSchedule(id:)",
    ]:
        assert known in covered
    expected = {str(c): c.expected for c in CALLS}
    assert expected["Query.run(id:)"] == "Run"
    assert expected["Mutation.deleteSchedule(id:)"] == "Schedule"
    assert expected["Mutation.decideApproval(id:)"] == "Approval"


@pytest.fixture
async def two(gql: Any, make_workspace: Any, sessionmaker: Any) -> tuple[Any, Objects, Objects]:
    mine, theirs = await make_workspace(), await make_workspace()
    return mine, await _populate(gql, mine, sessionmaker), await _populate(gql, theirs, sessionmaker)


@pytest.mark.parametrize("call", CALLS, ids=str)
async def test_foreign_and_type_confused_ids_are_not_found(gql: Any, two: Any, call: IdCall) -> None:
    mine, own, theirs = two
    document, variables = _document(call)
    cases = [(f"their {t}", i) for t, i in _ids(theirs).items()]
    if call.expected is not None:
        cases += [(f"my {t} as a {call.expected}", i) for t, i in _ids(own).items() if t != call.expected]
    for label, value in cases:
        body = await gql.raw(document, {**variables, call.argument: value}, token=mine.admin)
        assert theirs.secret not in json.dumps(body), (label, body)
        if (call.root, call.field, call.argument) in FILTER_IDS:
            assert not body.get("errors") and body["data"][call.field]["edges"] == [], (label, body)
            continue
        if call.expected is None and not body.get("errors"):
            # node(id:): null; nodes(ids:) (one id, coerced to a list): [null]
            assert body in ({"data": {call.field: None}}, {"data": {call.field: [None]}}), (label, body)
            continue
        assert body.get("errors"), (label, document, body)
        assert [e["extensions"]["code"] for e in body["errors"]] == ["NOT_FOUND"], (label, document, body)
        assert body["data"] is None or body["data"].get(call.field) is None, (label, body)

    # The same call with one's own id of the right type gets through the id check, so the
    # NOT_FOUNDs above are about the id, not about a document this walk built wrongly.
    if call.expected is not None:
        body = await gql.raw(
            document, {**variables, call.argument: _ids(own)[call.expected]}, token=mine.admin
        )
        codes = [e["extensions"]["code"] for e in body.get("errors") or []]
        assert "NOT_FOUND" not in codes, (document, body)
