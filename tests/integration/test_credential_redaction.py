"""A secret an agent tries to remember never reaches the database: scripted agents on a real
worker, read back through GraphQL as a viewer, and every row of the workspace checked."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
from sqlalchemy import select, update

from app.db import orm
from tests.integration.graphql_support import create_memory, pk
from tests.support.runs import DECIDE, RUN, create_agent, start_run, wait_run

APPROVALS = """
query { approvals(first: 50) { edges { node { id tool status arguments run { id } } } } }
"""
CREATE_MEMORY = """
mutation($agentId: ID!, $input: MemoryInput!) { createMemory(agentId: $agentId, input: $input) { id } }
"""
UPDATE_MEMORY = """
mutation($id: ID!, $input: MemoryPatch!) { updateMemory(id: $id, input: $input) { id } }
"""
REDACTED = "[redacted: GitHub Token]"
REQUIRE_APPROVAL = {"rules": [{"tool": "memory.remember", "decision": "REQUIRE_APPROVAL"}]}


def _body() -> str:
    """The random part of a GitHub-style token, fresh per test (never a real one)."""
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(36))


def _remembering(value: str) -> list[dict[str, Any]]:
    # The token is assembled when the turn is rendered, so neither the agent's model config
    # nor the run's input holds it whole.
    return [
        {"call": "memory.remember", "args": {"key": "crm", "value": value, "tags": ["crm"]}},
        {"final": "{{ results }}"},
    ]


async def _rows_of(sessionmaker: Any, workspace_id: int) -> dict[str, str]:
    """Everything the workspace stored about runs and memories, as text per table."""
    tables = {
        "steps": orm.RunStep,
        "approvals": orm.Approval,
        "events": orm.RunEvent,
        "runs": orm.Run,
        "memories": orm.Memory,
        "revisions": orm.MemoryRevision,
    }
    dumped: dict[str, str] = {}
    async with sessionmaker() as session:
        for name, table in tables.items():
            rows = await session.scalars(select(table).where(table.workspace_id == workspace_id))
            columns = [c.key for c in table.__table__.columns]
            dumped[name] = json.dumps(
                [{c: getattr(row, c) for c in columns if c != "input"} for row in rows], default=str
            )
    return dumped


def _assert_nowhere(rows: dict[str, str], *secrets: str) -> None:
    for table, text in rows.items():
        for secret in secrets:
            assert secret not in text, f"{table} holds the secret"


@pytest.mark.parametrize("policy", [None, REQUIRE_APPROVAL], ids=["default-policy", "require-approval"])
async def test_a_refused_secret_is_stored_and_shown_redacted(
    gql: Any, workspace: Any, worker: Any, sessionmaker: Any, policy: dict[str, Any] | None
) -> None:
    body = _body()
    token = "gh" + "p_" + body
    steps = _remembering("CRM sync token {{ 'gh' ~ 'p_' ~ input.body }} (rotate in May)")
    agent_id = await create_agent(gql, workspace.admin, steps=steps, tools=["memory.*"], policy=policy)
    run_id = await start_run(gql, workspace.operator, agent_id, {"body": body})

    # Refused when planned: even under REQUIRE_APPROVAL no operator is asked to look at it.
    run = await wait_run(gql, workspace.operator, run_id)
    assert run["status"] == "SUCCEEDED", run
    [refusal] = run["result"]
    assert refusal["error"]["code"] == "CREDENTIAL_REJECTED"
    assert "GitHub Token" in refusal["error"]["message"]

    seen = (await gql.ok(RUN, {"id": run_id}, token=workspace.viewer))["run"]
    step = seen["steps"][0]
    assert (step["tool"], step["status"], step["decision"], step["approval"]) == (
        "memory.remember",
        "FAILED",
        None,
        None,
    )
    assert step["arguments"] == {"key": "crm", "value": REDACTED, "tags": ["crm"]}
    assert step["result"]["error"]["code"] == "CREDENTIAL_REJECTED" and "GitHub Token" in step["error"]
    assert seen["pendingApprovals"] == []
    assert (await gql.ok(APPROVALS, token=workspace.viewer))["approvals"]["edges"] == []
    # (The run's input holds the random body on purpose: the token is assembled from it.)
    _assert_nowhere({"graphql": json.dumps({**seen, "input": None})}, token, body)
    _assert_nowhere(await _rows_of(sessionmaker, workspace.id), token, body)


async def test_the_memory_tool_redacts_a_call_recorded_before_the_guard_knew_better(
    gql: Any, workspace: Any, worker: Any, sessionmaker: Any
) -> None:
    # A call that passed the planner (say, under an older guard) and waits for an approval;
    # its stored arguments hold a token. Approved, the tool refuses it and the step and the
    # approval keep only the redacted arguments.
    body = _body()
    token = "gh" + "p_" + body
    agent_id = await create_agent(
        gql,
        workspace.admin,
        steps=_remembering("waiting for approval"),
        tools=["memory.*"],
        policy=REQUIRE_APPROVAL,
    )
    run_id = await start_run(gql, workspace.operator, agent_id)
    await wait_run(gql, workspace.operator, run_id, "WAITING_APPROVAL")
    planted = {"key": "crm", "value": f"CRM sync token {token}", "tags": ["crm"]}
    async with sessionmaker() as session, session.begin():
        step_id = await session.scalar(select(orm.RunStep.id).where(orm.RunStep.run_id == pk(run_id)))
        await session.execute(update(orm.RunStep).where(orm.RunStep.id == step_id).values(arguments=planted))
        await session.execute(
            update(orm.Approval).where(orm.Approval.step_id == step_id).values(arguments=planted)
        )
    [approval] = [
        e["node"]
        for e in (await gql.ok(APPROVALS, token=workspace.operator))["approvals"]["edges"]
        if e["node"]["run"]["id"] == run_id
    ]
    await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=workspace.operator)

    run = await wait_run(gql, workspace.operator, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"][0]["error"]["code"] == "CREDENTIAL_REJECTED"
    step = (await gql.ok(RUN, {"id": run_id}, token=workspace.viewer))["run"]["steps"][0]
    assert step["status"] == "FAILED"
    assert step["arguments"] == {"key": "crm", "value": REDACTED, "tags": ["crm"]}
    [shown] = [
        e["node"]
        for e in (await gql.ok(APPROVALS, token=workspace.viewer))["approvals"]["edges"]
        if e["node"]["run"]["id"] == run_id
    ]
    assert shown["arguments"] == step["arguments"]
    _assert_nowhere(await _rows_of(sessionmaker, workspace.id), token, body)


async def test_operators_refused_writes_do_not_echo_the_secret(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    body = _body()
    token = "gh" + "p_" + body
    agent_id = await create_agent(gql, workspace.admin, tools=["memory.*"])
    errors = [
        await gql.error(
            CREATE_MEMORY, {"agentId": agent_id, "input": {"key": "crm", "value": f"token {token}"}},
            token=workspace.operator,
        ),
        await gql.error(
            CREATE_MEMORY, {"agentId": agent_id, "input": {"key": token, "value": "the CRM token"}},
            token=workspace.operator,
        ),
    ]  # fmt: skip
    created = await create_memory(gql, workspace.operator, agent_id, key="crm", value="CRM sync settings")
    for patch in ({"value": f"token {token}"}, {"tags": ["crm", token]}, {"key": f"crm {token}"}):
        errors.append(
            await gql.error(UPDATE_MEMORY, {"id": created["id"], "input": patch}, token=workspace.operator)
        )
    for error in errors:
        assert error["extensions"]["code"] == "CREDENTIAL_REJECTED"
        assert "GitHub Token" in error["message"]
        _assert_nowhere({"error": json.dumps(error)}, token, body, body[:12])
    _assert_nowhere(await _rows_of(sessionmaker, workspace.id), token, body)


@pytest.mark.parametrize(
    ("key", "value", "tags", "rule"),
    [
        ("router", "use admin/hunter2", [], "Login Pair"),
        ("switch", "log in with jane / Tulip42!", [], "Login Pair"),
        ("router", "password123", [], "Common Password"),
        ("router admin", "tulip", ["password"], "Credential-Named Key"),
        ("office", "door code 4821", [], "Access Code"),
    ],
)
async def test_login_pairs_common_passwords_and_codes_are_refused_over_graphql(
    gql: Any, workspace: Any, sessionmaker: Any, key: str, value: str, tags: list[str], rule: str
) -> None:
    agent_id = await create_agent(gql, workspace.admin, tools=["memory.*"])
    error = await gql.error(
        CREATE_MEMORY,
        {"agentId": agent_id, "input": {"key": key, "value": value, "tags": tags}},
        token=workspace.operator,
    )
    assert error["extensions"]["code"] == "CREDENTIAL_REJECTED" and rule in error["message"], error
    _assert_nowhere({"error": json.dumps(error)}, value)
    _assert_nowhere(await _rows_of(sessionmaker, workspace.id), value)
    # Their ordinary neighbours are stored.
    for i, fine in enumerate(
        ("use TCP/IP on port 8080", "error code 4040", "open admin/settings", "Summer2026")
    ):
        await create_memory(gql, workspace.operator, agent_id, key=f"{key} note {i}", value=fine)
