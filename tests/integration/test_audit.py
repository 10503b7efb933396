"""The audit trail (docs/concepts/audit.md): every change through the API or the CLI writes
exactly one event with its actor, in a hash chain that ``enverif audit verify`` checks.
GraphQL over HTTP and the CLI, on the leg's database."""

from __future__ import annotations

import itertools
import json
from typing import Any

from sqlalchemy import text

from tests.support.cli import Enverif, in_thread
from tests.support.graphql import create_memory
from tests.support.runs import CANCEL_RUN, scripted_agent, start_run
from tests.support.schedules import create_schedule

EVENTS = """
query($first: Int, $action: String, $objectId: ID, $actorKind: ActorKind) {
  auditEvents(first: $first, action: $action, objectId: $objectId, actorKind: $actorKind) {
    edges { node { seq action objectType objectId summary diff hash prevHash actor { kind id name } } }
  }
}
"""
UPDATE_AGENT = "mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id } }"


async def _events(gql: Any, token: str, **filters: Any) -> list[dict[str, Any]]:
    data = await gql.ok(EVENTS, {"first": 100, **filters}, token=token)
    return [e["node"] for e in data["auditEvents"]["edges"]]


async def _one_new(gql: Any, workspace: Any, before: int) -> dict[str, Any]:
    events = await _events(gql, workspace.operator)
    new = [e for e in events if e["seq"] > before]
    assert len(new) == 1, new
    return new[0]


async def test_every_api_change_writes_exactly_one_event_with_its_actor(gql, workspace) -> None:
    seq = max(e["seq"] for e in await _events(gql, workspace.operator))  # the fixture's tokens
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    mutations = [
        ("agent.update", lambda: gql.ok(UPDATE_AGENT, {"id": agent, "input": {"instructions": "new"}}, token=workspace.admin)),
        ("agent.status", lambda: gql.ok(UPDATE_AGENT, {"id": agent, "input": {"status": "PAUSED"}}, token=workspace.admin)),
        ("agent.status", lambda: gql.ok(UPDATE_AGENT, {"id": agent, "input": {"status": "ACTIVE"}}, token=workspace.admin)),
        ("memory.create", lambda: create_memory(gql, workspace.operator, agent, key="k", value="v")),
        ("schedule.create", lambda: create_schedule(gql, workspace.operator, agent, cron="0 * * * *")),
        ("run.start", lambda: start_run(gql, workspace.operator, agent)),
        ("workspace.pause", lambda: gql.ok('mutation { pauseWorkspace(reason: "drill") { pausedAt } }', token=workspace.admin)),
        ("workspace.resume", lambda: gql.ok("mutation { resumeWorkspace { pausedAt } }", token=workspace.admin)),
        ("token.create", lambda: gql.ok('mutation { createApiToken(input: {role: "viewer", name: "ci"}) { token } }',
                                        token=workspace.admin)),
    ]  # fmt: skip
    seen: list[dict[str, Any]] = []
    first = await _one_new(gql, workspace, seq)
    assert first["action"] == "agent.create" and first["objectId"] == agent
    seq = first["seq"]
    results: list[Any] = []
    for action, mutate in mutations:
        results.append(await mutate())
        event = await _one_new(gql, workspace, seq)
        assert event["action"] == action, (action, event)
        assert event["actor"]["kind"] == "TOKEN" and event["actor"]["name"], event
        seen.append(event)
        seq = event["seq"]
    run_id = results[5]
    await gql.ok(CANCEL_RUN, {"id": run_id, "reason": "enough"}, token=workspace.operator)
    cancel = await _one_new(gql, workspace, seq)
    assert cancel["action"] == "run.cancel" and cancel["objectId"] == run_id
    assert seen[0]["diff"]["instructions"] == {"before": "test agent", "after": "new"}
    assert seen[1]["diff"] == {"status": {"before": "ACTIVE", "after": "PAUSED"}}
    # Filters, and the chain links each event to the one before.
    only = await _events(gql, workspace.operator, objectId=agent)
    assert {e["action"] for e in only} == {"agent.create", "agent.update", "agent.status"}
    ordered = sorted(await _events(gql, workspace.operator), key=lambda e: e["seq"])
    assert all(b["prevHash"] == a["hash"] for a, b in itertools.pairwise(ordered))
    viewer = await gql.error(EVENTS, {"first": 5}, token=workspace.viewer)
    assert viewer["extensions"]["code"] == "FORBIDDEN"
    too_many = await gql.error(EVENTS, {"first": 100_000}, token=workspace.operator)
    assert too_many["extensions"]["code"] == "VALIDATION_FAILED"


async def test_credentials_in_a_diff_are_redacted(gql, workspace) -> None:
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    await gql.ok(
        UPDATE_AGENT, {"id": agent, "input": {"instructions": f"use the key {secret}"}}, token=workspace.admin
    )
    [event] = await _events(gql, workspace.operator, action="agent.update")
    assert secret not in json.dumps(event)
    assert event["diff"]["instructions"]["after"].startswith("[redacted")


async def test_cli_changes_are_recorded_as_the_cli_and_verify_catches_an_edit(
    gql, workspace, enverif: Enverif, sessionmaker
) -> None:
    made = await in_thread(
        enverif, "token", "create", "--workspace", workspace.name, "--role", "viewer", "--json"
    )
    assert made.returncode == 0, made.stderr
    [event] = await _events(gql, workspace.operator, actorKind="CLI")
    assert event["action"] == "token.create" and event["actor"]["name"] and event["actor"]["id"] is None
    assert json.loads(made.stdout)["token"] not in json.dumps(event)  # the secret is never recorded

    ok = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    listed = await in_thread(enverif, "audit", "list", "--workspace", workspace.name, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["events"][0]["action"] == "token.create"

    async with sessionmaker() as session, session.begin():
        await session.execute(
            text("UPDATE audit_events SET summary = 'nothing happened' WHERE workspace_id = :w AND seq = 2"),
            {"w": workspace.id},
        )
    broken = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name)
    assert broken.returncode == 1 and "seq 2" in broken.stdout, broken.stdout


async def test_verify_catches_a_removed_event(gql, workspace, enverif: Enverif, sessionmaker) -> None:
    await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    async with sessionmaker() as session, session.begin():
        await session.execute(
            text("DELETE FROM audit_events WHERE workspace_id = :w AND seq = 3"), {"w": workspace.id}
        )
    broken = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name, "--json")
    assert broken.returncode == 1
    assert json.loads(broken.stdout)["broken_seq"] == 3
    async with sessionmaker() as session, session.begin():
        last = (await session.execute(text("SELECT MAX(seq) FROM audit_events WHERE workspace_id = :w"),
                                      {"w": workspace.id})).scalar_one()  # fmt: skip
        await session.execute(
            text("DELETE FROM audit_events WHERE workspace_id = :w AND seq >= 3"), {"w": workspace.id}
        )
    tail = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name, "--json")
    assert tail.returncode == 1 and json.loads(tail.stdout)["broken_seq"] == 3, (last, tail.stdout)
