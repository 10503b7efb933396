"""An agent's `inputSchema` (JSON Schema 2020-12, issue 27 item 6): refused when it is no
schema, and a run's input that does not match is VALIDATION_FAILED naming its path, at
`startRun` and when a schedule is written, before any run exists."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.graphql import create_agent
from tests.support.runs import START_RUN

SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    },
    "required": ["customer"],
    "$defs": {"item": {"type": "integer"}},
}
UPDATE = """mutation($id: ID!, $schema: JSON) {
  updateAgent(id: $id, input: {inputSchema: $schema}) { inputSchema version } }"""
CREATE_SCHEDULE = """mutation($a: ID!, $input: JSON) {
  createSchedule(agentId: $a, input: {cron: "@daily", input: $input}) { id } }"""
UPDATE_SCHEDULE = """mutation($id: ID!, $input: JSON) {
  updateSchedule(id: $id, input: {input: $input}) { id input } }"""
RUN_COUNT = "query($a: ID!) { runs(agentId: $a) { totalCount } }"


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "nope"}, "not valid JSON Schema 2020-12"),
        ({"properties": {"a": {"minLength": -1}}}, "minLength"),
        ({"properties": {"a": {"pattern": "("}}}, "pattern"),
        ({"$ref": "http://127.0.0.1:9/schema.json"}, "only inside itself"),
        ([1, 2], "JSON Schema object"),
    ],
)
async def test_what_is_no_schema_is_refused(gql: Any, workspace: Any, schema: Any, words: str) -> None:
    error = await gql.error(
        "mutation($input: CreateAgentInput!) { createAgent(input: $input) { id } }",
        {
            "input": {
                "name": "schema-x",
                "model": {"provider": "scripted", "steps": []},
                "inputSchema": schema,
            }
        },
        token=workspace.admin,
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "inputSchema"}
    assert words in error["message"]


@pytest.mark.parametrize(
    ("run_input", "field"),
    [
        ({"customer": {"email": 5}}, "input.customer.email"),
        ({"customer": {}}, "input.customer"),
        ({"customer": {"email": "a@example.org"}, "items": [1, "x"]}, "input.items.1"),
        (None, "input"),
    ],
)
async def test_a_wrong_input_is_refused_at_start_with_its_path(
    gql: Any, workspace: Any, run_input: Any, field: str
) -> None:
    agent = await create_agent(gql, workspace.admin, inputSchema=SCHEMA)
    error = await gql.error(START_RUN, {"agentId": agent["id"], "input": run_input}, token=workspace.operator)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}
    assert error["message"].startswith(f"{field}: ")
    assert (await gql.ok(RUN_COUNT, {"a": agent["id"]}, token=workspace.viewer))["runs"]["totalCount"] == 0

    good = {"customer": {"email": "a@example.org"}, "items": [1, 2]}
    started = await gql.ok(START_RUN, {"agentId": agent["id"], "input": good}, token=workspace.operator)
    assert started["startRun"]["status"] == "QUEUED"


async def test_schedules_are_checked_when_written(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin, inputSchema=SCHEMA)
    error = await gql.error(
        CREATE_SCHEDULE, {"a": agent["id"], "input": {"customer": 1}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input.customer"}

    good = {"customer": {"email": "a@example.org"}}
    schedule = await gql.ok(CREATE_SCHEDULE, {"a": agent["id"], "input": good}, token=workspace.operator)
    sid = schedule["createSchedule"]["id"]
    # A missing property is reported at the object that lacks it.
    error = await gql.error(UPDATE_SCHEDULE, {"id": sid, "input": {"items": []}}, token=workspace.operator)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}
    assert "'customer' is a required property" in error["message"]
    kept = await gql.ok(
        "query($id: ID!) { node(id: $id) { ... on Schedule { input } } }", {"id": sid}, token=workspace.viewer
    )
    assert kept["node"]["input"] == good


async def test_the_schema_is_versioned_and_null_clears_it(gql: Any, workspace: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    await gql.ok(START_RUN, {"agentId": agent["id"], "input": {"anything": True}}, token=workspace.operator)
    updated = (await gql.ok(UPDATE, {"id": agent["id"], "schema": SCHEMA}, token=workspace.admin))[
        "updateAgent"
    ]
    assert updated["inputSchema"] == SCHEMA
    error = await gql.error(
        START_RUN, {"agentId": agent["id"], "input": {"anything": True}}, token=workspace.operator
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}

    versions = """query($id: ID!) { agent(id: $id) { versions(first: 5) { edges { node { version inputSchema } } } } }"""
    edges = (await gql.ok(versions, {"id": agent["id"]}, token=workspace.viewer))["agent"]["versions"][
        "edges"
    ]
    assert [(e["node"]["version"], e["node"]["inputSchema"]) for e in edges] == [
        (updated["version"], SCHEMA),
        (1, None),
    ]

    cleared = (await gql.ok(UPDATE, {"id": agent["id"], "schema": None}, token=workspace.admin))[
        "updateAgent"
    ]
    assert cleared["inputSchema"] is None
    await gql.ok(START_RUN, {"agentId": agent["id"], "input": {"anything": True}}, token=workspace.operator)
