"""One shape for one idea (issue 27 item 9, docs/graphql/guide.md: names and times): the
inputs named after their mutations beside their older names, `remove...` mutations that
answer a payload beside the `delete...` ones that answer a bare id, and `DateTime` in one
form everywhere. Through GraphQL over HTTP; the older forms keep working."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update

from app.clock import utcnow
from app.db.orm import McpServer, Run
from tests.support.graphql import create_agent, gid, pk, unique
from tests.support.trees import Rows

CREATE_MEMORY = """mutation($a: ID!, $m: CreateMemoryInput) {
  createMemory(agentId: $a, memory: $m) { id key value } }"""
CREATE_MEMORY_OLD = """mutation($a: ID!, $m: MemoryInput!) {
  createMemory(agentId: $a, input: $m) { id key value } }"""
UPDATE_MEMORY = """mutation($id: ID!, $c: UpdateMemoryInput!) {
  updateMemory(id: $id, changes: $c) { id value } }"""
UPDATE_MEMORY_OLD = (
    """mutation($id: ID!, $c: MemoryPatch!) { updateMemory(id: $id, input: $c) { id value } }"""
)
REMOVE_MEMORY = """mutation($id: ID!) { removeMemory(id: $id) {
  deletedId agent { id memories { totalCount } } } }"""
CREATE_SCHEDULE = """mutation($a: ID!, $s: CreateScheduleInput!) {
  createSchedule(agentId: $a, schedule: $s) { id cron } }"""
CREATE_SCHEDULE_OLD = """mutation($a: ID!, $s: ScheduleInput!) {
  createSchedule(agentId: $a, input: $s) { id cron } }"""
UPDATE_SCHEDULE = """mutation($id: ID!, $c: UpdateScheduleInput!) {
  updateSchedule(id: $id, changes: $c) { id cron } }"""
UPDATE_SCHEDULE_OLD = """mutation($id: ID!, $c: SchedulePatch!) {
  updateSchedule(id: $id, input: $c) { id cron } }"""
REMOVE_SCHEDULE = """mutation($id: ID!) { removeSchedule(id: $id) {
  deletedId agent { id schedules { id } } } }"""
NODE = "query($id: ID!) { node(id: $id) { id } }"


async def test_memories_under_the_current_names_and_the_older_ones(gql: Any, workspace: Any) -> None:
    agent = (await create_agent(gql, workspace.admin))["id"]
    token = workspace.operator
    new = await gql.ok(CREATE_MEMORY, {"a": agent, "m": {"key": unique("k"), "value": "v1"}}, token=token)
    old = await gql.ok(CREATE_MEMORY_OLD, {"a": agent, "m": {"key": unique("k"), "value": "v"}}, token=token)
    memory = new["createMemory"]["id"]
    changed = await gql.ok(UPDATE_MEMORY, {"id": memory, "c": {"value": "v2"}}, token=token)
    assert changed["updateMemory"] == {"id": memory, "value": "v2"}
    older = await gql.ok(UPDATE_MEMORY_OLD, {"id": memory, "c": {"value": "v3"}}, token=token)
    assert older["updateMemory"]["value"] == "v3"

    # Exactly one of the two: each is nullable in the schema so that either may be left out.
    both = """mutation($a: ID!) { createMemory(agentId: $a, memory: {key: "a", value: "b"},
      input: {key: "a", value: "b"}) { id } }"""
    error = await gql.error(both, {"a": agent}, token=token)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "input"}
    error = await gql.error(CREATE_MEMORY, {"a": agent}, token=token)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "memory"}
    error = await gql.error(
        "mutation($id: ID!) { updateMemory(id: $id) { id } }", {"id": memory}, token=token
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "changes"}

    revisions = "query($id: ID!) { node(id: $id) { ... on Memory { revisions { id } } } }"
    history = (await gql.ok(revisions, {"id": memory}, token=workspace.viewer))["node"]["revisions"]
    removed = (await gql.ok(REMOVE_MEMORY, {"id": memory}, token=token))["removeMemory"]
    assert removed == {"deletedId": memory, "agent": {"id": agent, "memories": {"totalCount": 1}}}
    assert (await gql.raw(NODE, {"id": memory}, token=workspace.viewer)) == {"data": {"node": None}}
    # Its revisions are nodes, and outlive it.
    revision = "query($id: ID!) { node(id: $id) { ... on MemoryRevision { id action newValue } } }"
    first = (await gql.ok(revision, {"id": history[0]["id"]}, token=workspace.viewer))["node"]
    assert first == {"id": history[0]["id"], "action": "CREATE", "newValue": "v1"}
    # The older form answers the same id, bare.
    other = old["createMemory"]["id"]
    deleted = await gql.ok("mutation($id: ID!) { deleteMemory(id: $id) }", {"id": other}, token=token)
    assert deleted == {"deleteMemory": other}
    error = await gql.error(REMOVE_MEMORY, {"id": other}, token=token)
    assert error["extensions"]["code"] == "NOT_FOUND"


async def test_schedules_under_the_current_names_and_the_older_ones(gql: Any, workspace: Any) -> None:
    agent = (await create_agent(gql, workspace.admin))["id"]
    token = workspace.operator
    new = (await gql.ok(CREATE_SCHEDULE, {"a": agent, "s": {"cron": "@daily"}}, token=token))[
        "createSchedule"
    ]
    old = (await gql.ok(CREATE_SCHEDULE_OLD, {"a": agent, "s": {"cron": "@hourly"}}, token=token))[
        "createSchedule"
    ]
    changed = await gql.ok(UPDATE_SCHEDULE, {"id": new["id"], "c": {"cron": "@weekly"}}, token=token)
    assert changed["updateSchedule"] == {"id": new["id"], "cron": "@weekly"}
    older = await gql.ok(UPDATE_SCHEDULE_OLD, {"id": old["id"], "c": {"cron": "@monthly"}}, token=token)
    assert older["updateSchedule"]["cron"] == "@monthly"
    error = await gql.error(
        "mutation($a: ID!) { createSchedule(agentId: $a) { id } }", {"a": agent}, token=token
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "schedule"}

    removed = (await gql.ok(REMOVE_SCHEDULE, {"id": new["id"]}, token=token))["removeSchedule"]
    assert removed == {"deletedId": new["id"], "agent": {"id": agent, "schedules": [{"id": old["id"]}]}}
    deleted = await gql.ok("mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": old["id"]}, token=token)
    assert deleted == {"deleteSchedule": old["id"]}
    assert (await gql.raw(NODE, {"id": old["id"]}, token=workspace.viewer)) == {"data": {"node": None}}


def _server(workspace_id: int, name: str) -> McpServer:
    """As a sync leaves it; createMcpServer itself needs a live MCP server (test_mcp)."""
    return McpServer(
        workspace_id=workspace_id, name=name, transport="STREAMABLE_HTTP", url="http://127.0.0.1:9/mcp",
        command=None, enabled=True, headers={}, tool_risk={}, created_at=utcnow(), updated_at=utcnow(),
    )  # fmt: skip


async def test_remove_mcp_server_answers_the_id_it_had(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    async with sessionmaker() as session, session.begin():
        rows = [_server(workspace.id, f"crm{i}") for i in (1, 2)]
        session.add_all(rows)
    first, second = (gid("McpServer", row.id) for row in rows)
    removed = await gql.ok(
        "mutation($id: ID!) { removeMcpServer(id: $id) { deletedId } }", {"id": first}, token=workspace.admin
    )
    assert removed == {"removeMcpServer": {"deletedId": first}}
    deleted = await gql.ok(
        "mutation($id: ID!) { deleteMcpServer(id: $id) }", {"id": second}, token=workspace.admin
    )
    assert deleted == {"deleteMcpServer": second}


DEPRECATIONS = """{ __type(name: "Mutation") { fields(includeDeprecated: true) {
  name isDeprecated deprecationReason args(includeDeprecated: true) { name isDeprecated deprecationReason } } }
  dateTime: __type(name: "DateTime") { specifiedByURL } }"""


async def test_each_older_form_is_deprecated_naming_its_replacement(gql: Any, workspace: Any) -> None:
    data = await gql.ok(DEPRECATIONS, token=workspace.viewer)
    fields = {f["name"]: f for f in data["__type"]["fields"]}
    for old, new in [("deleteMemory", "removeMemory"), ("deleteSchedule", "removeSchedule"),
                     ("deleteMcpServer", "removeMcpServer")]:  # fmt: skip
        assert fields[old]["isDeprecated"] and f"`{new}`" in fields[old]["deprecationReason"]
        assert not fields[new]["isDeprecated"]
    for mutation, current in [("createMemory", "memory"), ("updateMemory", "changes"),
                              ("createSchedule", "schedule"), ("updateSchedule", "changes")]:  # fmt: skip
        args = {a["name"]: a for a in fields[mutation]["args"]}
        assert args["input"]["isDeprecated"] and f"`{current}`" in args["input"]["deprecationReason"]
        assert not args[current]["isDeprecated"]
    assert data["dateTime"] == {"specifiedByURL": "https://scalars.graphql.org/andimarek/date-time"}


# The andimarek date-time form: exactly three fraction digits and Z.
DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
RUNS = """query($after: DateTime, $before: DateTime, $agent: ID!) {
  runs(agentId: $agent, createdAfter: $after, createdBefore: $before, orderBy: OLDEST_FIRST) {
    edges { node { id createdAt updatedAt startedAt } } } }"""


async def test_every_time_has_one_form_and_comes_back_as_the_same_instant(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    agent = (await create_agent(gql, workspace.admin))["id"]
    rows = Rows(sessionmaker, workspace.id)
    runs = [await rows.run(pk(agent)) for _ in range(4)]
    # On a whole second (isoformat() would print no fraction at all), twice within one
    # millisecond, then one in the next millisecond.
    second = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    offsets_us = [0, 2_400, 2_700, 3_100]
    async with sessionmaker() as session, session.begin():
        for run, offset in zip(runs, offsets_us, strict=True):
            at = second + timedelta(microseconds=offset)
            values = {"created_at": at, "updated_at": at, "started_at": at}
            await session.execute(update(Run).where(Run.id == run.id).values(**values))
    ids = [gid("Run", run.id) for run in runs]

    everything = await gql.ok(RUNS, {"agent": agent}, token=workspace.viewer)
    nodes = [e["node"] for e in everything["runs"]["edges"]]
    assert [n["id"] for n in nodes] == ids
    shown = [n["createdAt"] for n in nodes]
    assert all(DATE_TIME.fullmatch(n[f]) for n in nodes for f in ("createdAt", "updatedAt", "startedAt")), (
        nodes
    )
    stamp = second.strftime("%Y-%m-%dT%H:%M:%S")
    assert shown == [f"{stamp}.000Z", f"{stamp}.002Z", f"{stamp}.002Z", f"{stamp}.003Z"]

    async def between(**bounds: str) -> list[str]:
        page = await gql.ok(RUNS, {"agent": agent, **bounds}, token=workspace.viewer)
        return [e["node"]["id"] for e in page["runs"]["edges"]]

    # A createdAt given back excludes the runs it stands for, although they were stored with
    # microseconds it does not show; so does a JavaScript Date's toISOString() of it.
    assert await between(after=shown[1]) == [ids[3]]
    assert await between(after=shown[0], before=shown[3]) == [ids[1], ids[2]]
    # An instant with microseconds is taken exactly, as before.
    exact = (second + timedelta(microseconds=2_500)).isoformat()
    assert await between(after=exact) == [ids[2], ids[3]]
