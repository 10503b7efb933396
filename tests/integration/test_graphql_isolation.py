"""Nothing crosses workspaces, and node(id:) finds every type of one's own.

Another workspace's object must look exactly like one that does not exist: NOT_FOUND from
agent/run/mutations, null from node(), absent from lists — and never any of its data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from app.clock import utcnow
from app.db.orm import McpServer, ScheduleFiring
from tests.support.graphql import create_agent, create_memory, gid, pk
from tests.support.trees import Rows

NODE = """query($id: ID!) { node(id: $id) { __typename id
  ... on Agent { name } ... on Run { status } ... on RunStep { seq } ... on Memory { key }
  ... on Approval { tool } ... on Schedule { cron } ... on Workspace { name }
  ... on MemoryRevision { key action } ... on ScheduleFiring { outcome reason } } }"""


@dataclass
class Objects:
    agent: str
    run: str
    step: str
    memory: str
    approval: str
    schedule: str
    workspace: str
    api_token: str
    agent_version: str
    audit_event: str
    mcp_server: str
    memory_revision: str
    schedule_firing: str
    secret: str  # a value that must never appear in another workspace's responses


async def _populate(gql: Any, ws: Any, sessionmaker: Any) -> Objects:
    secret = f"confidential-{ws.name}"  # a credential-named key would be refused (CREDENTIAL_REJECTED)
    agent = await create_agent(gql, ws.admin, name=secret, description=secret)
    memory = await create_memory(gql, ws.operator, agent["id"], key=secret, value=secret)
    rows = Rows(sessionmaker, ws.id)
    run = await rows.run(pk(agent["id"]), status="WAITING_APPROVAL")
    step = await rows.step(run, seq=0, tool="webhook.post", status="WAITING_APPROVAL")
    approval = await rows.approval(run, step)
    schedule = await gql.ok(
        'mutation($a: ID!) { createSchedule(agentId: $a, input: {cron: "@hourly"}) { id } }',
        {"a": agent["id"]},
        token=ws.operator,
    )
    token = await gql.ok(
        'mutation($n: String!) { createApiToken(input: {role: "viewer", name: $n}) { apiToken { id } } }',
        {"n": f"{secret}-token"},
        token=ws.admin,
    )
    ids = await gql.ok(
        "query($a: ID!, $m: ID!) { agent(id: $a) { versions(first: 1) { edges { node { id } } } }"
        " auditEvents(first: 1) { edges { node { id } } }"
        " node(id: $m) { ... on Memory { revisions { id } } } }",
        {"a": agent["id"], "m": memory["id"]},
        token=ws.admin,
    )
    async with sessionmaker() as session, session.begin():
        # As a sync leaves it; createMcpServer itself needs a live MCP server (test_mcp).
        server = McpServer(
            workspace_id=ws.id, name="crm", transport="STREAMABLE_HTTP", url="http://127.0.0.1:9/mcp",
            command=None, enabled=True, headers={}, tool_risk={}, created_at=utcnow(), updated_at=utcnow(),
        )  # fmt: skip
        session.add(server)
        # As a tick leaves one; test_schedule_firing fires schedules for real.
        firing = ScheduleFiring(
            workspace_id=ws.id, schedule_id=pk(schedule["createSchedule"]["id"]), fire_at=utcnow(), missed=0,
            outcome="SKIPPED", reason=secret, run_id=None, created_at=utcnow(),
        )  # fmt: skip
        session.add(firing)
    return Objects(
        memory_revision=ids["node"]["revisions"][0]["id"],
        schedule_firing=gid("ScheduleFiring", firing.id),
        mcp_server=gid("McpServer", server.id),
        api_token=token["createApiToken"]["apiToken"]["id"],
        agent_version=ids["agent"]["versions"]["edges"][0]["node"]["id"],
        audit_event=ids["auditEvents"]["edges"][0]["node"]["id"],
        agent=agent["id"],
        run=gid("Run", run.id),
        step=gid("RunStep", step.id),
        memory=memory["id"],
        approval=gid("Approval", approval.id),
        schedule=schedule["createSchedule"]["id"],
        workspace=gid("Workspace", ws.id),
        secret=secret,
    )


@pytest.fixture
async def two(gql: Any, make_workspace: Any, sessionmaker: Any) -> tuple[Any, Objects, Any, Objects]:
    mine, theirs = await make_workspace(), await make_workspace()
    return mine, await _populate(gql, mine, sessionmaker), theirs, await _populate(gql, theirs, sessionmaker)


async def test_node_resolves_every_type_of_ones_own(gql: Any, two: Any) -> None:
    mine, objects, _, _ = two
    expected = {
        "agent": "Agent",
        "run": "Run",
        "step": "RunStep",
        "memory": "Memory",
        "approval": "Approval",
        "schedule": "Schedule",
        "workspace": "Workspace",
        "memory_revision": "MemoryRevision",
        "schedule_firing": "ScheduleFiring",
    }  # api_token: tokens are the admin's (test_graphql_tokens)
    for attr, typename in expected.items():
        node = (await gql.ok(NODE, {"id": getattr(objects, attr)}, token=mine.viewer))["node"]
        assert node is not None, attr
        assert node["__typename"] == typename
        assert node["id"] == getattr(objects, attr)


async def test_node_of_another_workspace_is_null(gql: Any, two: Any) -> None:
    mine, _, _, theirs = two
    for attr in (
        "agent", "run", "step", "memory", "approval", "schedule", "workspace", "memory_revision", "schedule_firing"
    ):  # fmt: skip
        body = await gql.raw(NODE, {"id": getattr(theirs, attr)}, token=mine.admin)
        assert body == {"data": {"node": None}}, attr


async def test_reads_of_another_workspace_are_not_found(gql: Any, two: Any) -> None:
    mine, _, _, theirs = two
    reads = [
        ("query($id: ID!) { agent(id: $id) { id name } }", {"id": theirs.agent}),
        ("query($id: ID!) { run(id: $id) { id status } }", {"id": theirs.run}),
        ("query($a: ID!) { memories(agentId: $a) { edges { node { key } } } }", {"a": theirs.agent}),
        ("query($a: ID!) { runs(agentId: $a) { edges { node { id } } } }", {"a": theirs.agent}),
    ]
    for query, variables in reads:
        body = await gql.raw(query, variables, token=mine.admin)
        assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND", query
        assert theirs.secret not in json.dumps(body)


async def test_lists_never_show_another_workspace(gql: Any, two: Any) -> None:
    mine, objects, _, theirs = two
    query = """{ agents { edges { node { id } } } runs { edges { node { id } } }
                 approvals { edges { node { id } } } }"""
    body = await gql.raw(query, token=mine.viewer)
    assert theirs.secret not in json.dumps(body)
    data = body["data"]
    assert [e["node"]["id"] for e in data["agents"]["edges"]] == [objects.agent]
    assert [e["node"]["id"] for e in data["runs"]["edges"]] == [objects.run]
    assert [e["node"]["id"] for e in data["approvals"]["edges"]] == [objects.approval]


async def test_every_mutation_on_another_workspace_is_not_found_and_changes_nothing(
    gql: Any, two: Any
) -> None:
    mine, _, owner, theirs = two
    mutations = [
        (
            'mutation($id: ID!) { updateAgent(id: $id, input: {description: "pwned"}) { id } }',
            {"id": theirs.agent},
        ),
        ("mutation($id: ID!) { startRun(agentId: $id) { id } }", {"id": theirs.agent}),
        ("mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": theirs.run}),
        ("mutation($id: ID!) { decideApproval(id: $id, approve: true) { id } }", {"id": theirs.approval}),
        (
            'mutation($id: ID!) { createMemory(agentId: $id, input: {key: "k", value: "pwned"}) { id } }',
            {"id": theirs.agent},
        ),
        (
            'mutation($id: ID!) { updateMemory(id: $id, input: {value: "pwned"}) { id } }',
            {"id": theirs.memory},
        ),
        ("mutation($id: ID!) { deleteMemory(id: $id) }", {"id": theirs.memory}),
        (
            'mutation($id: ID!) { createSchedule(agentId: $id, input: {cron: "@daily"}) { id } }',
            {"id": theirs.agent},
        ),
        (
            "mutation($id: ID!) { updateSchedule(id: $id, input: {enabled: false}) { id } }",
            {"id": theirs.schedule},
        ),
        ("mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": theirs.schedule}),
    ]
    for mutation, variables in mutations:
        body = await gql.raw(mutation, variables, token=mine.admin)
        assert body["data"] is None, mutation
        assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND", (mutation, body)
        assert theirs.secret not in json.dumps(body)

    # The owner sees everything as it was.
    check = """query($a: ID!, $r: ID!, $m: ID!, $s: ID!, $p: ID!) {
      agent(id: $a) { description runs { edges { node { id } } } schedules { id enabled } }
      run(id: $r) { status }
      m: node(id: $m) { ... on Memory { value revisions { action } } }
      s: node(id: $s) { ... on Schedule { enabled } }
      p: node(id: $p) { ... on Approval { status } } }"""
    data = await gql.ok(
        check,
        {"a": theirs.agent, "r": theirs.run, "m": theirs.memory, "s": theirs.schedule, "p": theirs.approval},
        token=owner.viewer,
    )
    assert data["agent"]["description"] == theirs.secret
    assert [e["node"]["id"] for e in data["agent"]["runs"]["edges"]] == [theirs.run]
    assert data["agent"]["schedules"] == [{"id": theirs.schedule, "enabled": True}]
    assert data["run"] == {"status": "WAITING_APPROVAL"}
    assert data["m"] == {"value": theirs.secret, "revisions": [{"action": "CREATE"}]}
    assert data["s"] == {"enabled": True}
    assert data["p"] == {"status": "PENDING"}


@pytest.mark.parametrize(
    "bad_id",
    [
        "",
        "garbage",
        "QWdlbnQ6",  # "Agent:"
        "QWdlbnQ6LTE",  # "Agent:-1"
        "QWdlbnQ6MDE",  # "Agent:01"
        "QWdlbnQ6OTk5OTk5OTk5OTk5OTk5OTk5OTk5",  # larger than any BIGINT
        "Tm9wZTox",  # "Nope:1"
        "QWdlbnQ6MQ==",  # padding is not part of our ids
        "x" * 500,
    ],
)
async def test_malformed_ids_are_not_found(gql: Any, workspace: Any, bad_id: str) -> None:
    for query in [
        "query($id: ID!) { agent(id: $id) { id } }",
        "query($id: ID!) { run(id: $id) { id } }",
        "mutation($id: ID!) { deleteMemory(id: $id) }",
    ]:
        error = await gql.error(query, {"id": bad_id}, token=workspace.admin)
        assert error["extensions"]["code"] == "NOT_FOUND", (query, error)
    # node(id:) answers every id it cannot serve with null and no error (docs/graphql/guide.md).
    body = await gql.raw("query($id: ID!) { node(id: $id) { id } }", {"id": bad_id}, token=workspace.admin)
    assert body == {"data": {"node": None}}


async def test_an_id_of_the_wrong_type_is_not_found(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent = await create_agent(gql, workspace.admin)
    run = await Rows(sessionmaker, workspace.id).run(pk(agent["id"]))
    error = await gql.error(
        "query($id: ID!) { agent(id: $id) { id } }", {"id": gid("Run", run.id)}, token=workspace.admin
    )
    assert error["extensions"]["code"] == "NOT_FOUND"
    error = await gql.error(
        "query($id: ID!) { run(id: $id) { id } }", {"id": agent["id"]}, token=workspace.admin
    )
    assert error["extensions"]["code"] == "NOT_FOUND"
