"""The audit trail (docs/concepts/audit.md): every change through the API or the CLI writes
exactly one event with its actor, in a hash chain that ``enverif audit verify`` checks.
GraphQL over HTTP and the CLI, on the leg's database."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from app.db import orm
from app.domain.actors import Actor, ActorKind
from app.services import audit
from app.services.sweeper import sweep
from tests.support.cli import Enverif, in_thread
from tests.support.graphql import create_memory
from tests.support.runs import CANCEL_RUN, DECIDE, scripted_agent, start_run, wait_run
from tests.support.schedules import create_schedule, make_due, tick_cli

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
    sealed = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name)  # seals them
    assert sealed.returncode == 0, sealed.stdout
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


async def _verify(enverif: Enverif, workspace: Any) -> dict[str, Any]:
    done = await in_thread(enverif, "audit", "verify", "--workspace", workspace.name, "--json")
    return {"exit": done.returncode, **json.loads(done.stdout)}


async def test_prune_removes_the_oldest_events_and_verify_goes_on_from_the_checkpoint(
    gql, workspace, enverif: Enverif, sessionmaker
) -> None:
    await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    kept_before = len(await _events(gql, workspace.operator))  # seals them
    await asyncio.sleep(0.2)
    cutoff = datetime.now(UTC)
    await asyncio.sleep(0.2)
    newer = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])

    done = await in_thread(enverif, "audit", "prune", "--workspace", workspace.name,
                           "--before", cutoff.isoformat(), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    pruned = json.loads(done.stdout)
    assert pruned["pruned"] == kept_before and pruned["through_seq"] == kept_before, pruned
    events = await _events(gql, workspace.operator)
    assert [e["action"] for e in events] == ["audit.prune", "agent.create"]
    checkpoint, survivor = events
    assert survivor["objectId"] == newer and survivor["seq"] == kept_before + 1
    assert checkpoint["actor"]["kind"] == "CLI" and checkpoint["diff"]["checkpoint"]["seq"] == kept_before
    assert checkpoint["diff"]["checkpoint"]["hash"] == survivor["prevHash"]
    assert await _verify(enverif, workspace) == {
        "exit": 0, "workspace": workspace.name, "ok": True, "events": 2, "broken_seq": None, "why": None,
    }  # fmt: skip

    # Nothing older: nothing removed and nothing recorded.
    none = await in_thread(enverif, "audit", "prune", "--workspace", workspace.name, "--before", "2020-01-01")
    assert none.returncode == 0 and "no audit events older" in none.stdout, none.stdout
    assert len(await _events(gql, workspace.operator)) == 2

    # A later prune removes the earlier checkpoint too; the chain still holds.
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    again = await in_thread(
        enverif, "audit", "prune", "--workspace", workspace.name, "--before", future, "--json"
    )
    assert json.loads(again.stdout)["pruned"] == 2, again.stdout
    [only] = await _events(gql, workspace.operator)
    assert only["action"] == "audit.prune" and only["diff"]["checkpoint"]["seq"] == kept_before + 2
    assert (await _verify(enverif, workspace))["ok"] is True

    bad = await in_thread(enverif, "audit", "prune", "--workspace", workspace.name, "--before", "last week")
    assert bad.returncode == 2 and "not an ISO date" in bad.stderr, bad.stderr


async def test_verify_catches_events_removed_after_a_prune(
    gql, workspace, enverif: Enverif, sessionmaker
) -> None:
    for _ in range(2):
        await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    await _events(gql, workspace.operator)
    await asyncio.sleep(0.2)
    cutoff = datetime.now(UTC).isoformat()
    await asyncio.sleep(0.2)
    for _ in range(2):
        await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    done = await in_thread(
        enverif, "audit", "prune", "--workspace", workspace.name, "--before", cutoff, "--json"
    )
    through = json.loads(done.stdout)["through_seq"]
    async with sessionmaker() as session, session.begin():
        await session.execute(
            text("DELETE FROM audit_events WHERE workspace_id = :w AND seq = :s"),
            {"w": workspace.id, "s": through + 1},
        )
    broken = await _verify(enverif, workspace)
    assert broken["exit"] == 1 and broken["broken_seq"] == through + 1, broken


async def test_an_append_is_one_statement_and_the_sweeper_seals_it(
    workspace, engine, sessionmaker, runtime
) -> None:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    async with sessionmaker() as session, session.begin():
        await session.execute(text("SELECT 1"))  # the transaction is open before counting
        event.listen(engine.sync_engine, "before_cursor_execute", count)
        try:
            row = await audit.append(
                session, workspace_id=workspace.id, actor=Actor(ActorKind.SYSTEM, None, "test"),
                action="agent.update", object_type="Agent", object_id=None, summary="counted",
            )  # fmt: skip
            await session.flush()
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("INSERT"), statements
    report = await sweep(runtime)
    assert report.sealed_audit >= 1
    async with sessionmaker() as session:
        sealed = await session.get(orm.AuditEvent, row.id)
        assert sealed is not None and sealed.seq is not None and sealed.hash is not None
        unsealed = await session.scalar(
            text("SELECT COUNT(*) FROM audit_events WHERE workspace_id = :w AND seq IS NULL"),
            {"w": workspace.id},
        )
    assert unsealed == 0


UPDATE_MEMORY = "mutation($id: ID!, $input: MemoryPatch!) { updateMemory(id: $id, input: $input) { id } }"
DELETE_MEMORY = "mutation($id: ID!) { deleteMemory(id: $id) }"
UPDATE_SCHEDULE = (
    "mutation($id: ID!, $input: SchedulePatch!) { updateSchedule(id: $id, input: $input) { id } }"
)
DELETE_SCHEDULE = "mutation($id: ID!) { deleteSchedule(id: $id) }"
CREATE_TOKEN = 'mutation { createApiToken(input: {role: "viewer", name: "short-lived"}) { apiToken { id } } }'
REVOKE_TOKEN = "mutation($id: ID!) { revokeApiToken(id: $id) { id } }"
CANCEL_RUNS = "mutation($agentId: ID!) { cancelRuns(filter: {agentId: $agentId}) { id } }"
DECIDED = "query($id: ID!) { node(id: $id) { ... on Approval { status decidedBy { kind id name } } } }"


@pytest.mark.usefixtures("worker")
async def test_the_other_changes_each_write_one_event_with_their_actor(
    gql, workspace, enverif: Enverif, settings, sessionmaker
) -> None:
    """The changes the first test leaves out: memory and schedule edits and deletes, a token
    revoked, an approval decided, cancelRuns, a schedule firing, and CLI runs and tokens."""
    seq = max(e["seq"] for e in await _events(gql, workspace.operator))
    # A webhook post that is refused, so nothing is sent anywhere.
    steps = [
        {"call": "webhook.post", "args": {"url": "http://127.0.0.1:9/hook", "payload": {}}},
        {"final": "x"},
    ]
    agent = await scripted_agent(gql, workspace.admin, steps=steps)
    seq = (await _one_new(gql, workspace, seq))["seq"]
    memory = await create_memory(gql, workspace.operator, agent, key="k", value="v", tags=["a"])
    seq = (await _one_new(gql, workspace, seq))["seq"]
    schedule = await create_schedule(gql, workspace.operator, agent, cron="0 0 1 1 *")
    seq = (await _one_new(gql, workspace, seq))["seq"]
    token = (await gql.ok(CREATE_TOKEN, token=workspace.admin))["createApiToken"]["apiToken"]["id"]
    seq = (await _one_new(gql, workspace, seq))["seq"]
    run = await start_run(gql, workspace.operator, agent)
    seq = (await _one_new(gql, workspace, seq))["seq"]
    [approval] = (await wait_run(gql, workspace.viewer, run, "WAITING_APPROVAL"))["pendingApprovals"]

    api_changes = [
        ("memory.update", lambda: gql.ok(UPDATE_MEMORY, {"id": memory["id"], "input": {
            "key": "k2", "tags": ["a", "b"], "importance": 0.9}}, token=workspace.operator)),
        ("memory.delete", lambda: gql.ok(DELETE_MEMORY, {"id": memory["id"]}, token=workspace.operator)),
        ("schedule.update", lambda: gql.ok(UPDATE_SCHEDULE, {"id": schedule["id"], "input": {"cron": "0 0 2 1 *"}},
                                           token=workspace.operator)),
        ("token.revoke", lambda: gql.ok(REVOKE_TOKEN, {"id": token}, token=workspace.admin)),
        ("approval.decide", lambda: gql.ok(DECIDE, {"id": approval["id"], "approve": False}, token=workspace.operator)),
    ]  # fmt: skip
    seen: dict[str, dict[str, Any]] = {}
    for action, change in api_changes:
        await change()
        event = await _one_new(gql, workspace, seq)
        assert event["action"] == action and event["actor"]["kind"] == "TOKEN" and event["actor"]["name"], (
            event
        )
        seen[action], seq = event, event["seq"]
    assert seen["memory.update"]["diff"]["key"] == {"before": "k", "after": "k2"}
    assert seen["memory.update"]["diff"]["tags"] == {"before": ["a"], "after": ["a", "b"]}
    assert seen["memory.update"]["diff"]["importance"]["after"] == 0.9
    decided = (await gql.ok(DECIDED, {"id": approval["id"]}, token=workspace.operator))["node"]
    assert decided["status"] == "REJECTED" and decided["decidedBy"]["kind"] == "TOKEN", decided
    assert decided["decidedBy"]["name"] == seen["approval.decide"]["actor"]["name"]
    await wait_run(gql, workspace.viewer, run)

    # A schedule firing is recorded as the schedule.
    await make_due(sessionmaker, schedule, ago=timedelta(days=400))
    await tick_cli(settings)
    fired = await _one_new(gql, workspace, seq)
    assert fired["action"] == "schedule.fire" and fired["actor"]["kind"] == "SCHEDULE", fired
    seq = fired["seq"]
    await gql.ok(DELETE_SCHEDULE, {"id": schedule["id"]}, token=workspace.operator)
    seq = (await _one_new(gql, workspace, seq))["seq"]

    # cancelRuns: one run.cancel per run it cancels. (The workspace is paused: runs stay queued.)
    await gql.ok('mutation { pauseWorkspace(reason: "drill") { pausedAt } }', token=workspace.admin)
    queued = [await start_run(gql, workspace.operator, agent) for _ in range(2)]
    seq = max(e["seq"] for e in await _events(gql, workspace.operator))
    cancelled = (await gql.ok(CANCEL_RUNS, {"agentId": agent}, token=workspace.operator))["cancelRuns"]
    assert set(queued) <= {r["id"] for r in cancelled}  # and the schedule's run, held too
    cancels = [e for e in await _events(gql, workspace.operator) if e["seq"] > seq]
    assert sorted(e["objectId"] for e in cancels) == sorted(r["id"] for r in cancelled)
    assert {(e["action"], e["actor"]["kind"]) for e in cancels} == {("run.cancel", "TOKEN")}
    seq = max(e["seq"] for e in cancels)

    # The CLI's changes are the CLI's.
    await gql.ok("mutation { resumeWorkspace { pausedAt } }", token=workspace.admin)
    seq = (await _one_new(gql, workspace, seq))["seq"]
    name = (await gql.ok("query($id: ID!) { node(id: $id) { ... on Agent { name } } }", {"id": agent},
                         token=workspace.operator))["node"]["name"]  # fmt: skip
    ws = ("--workspace", workspace.name)
    started = await in_thread(enverif, "runs", "start", *ws, "--agent", name, "--json")
    assert started.returncode == 0, started.stderr
    cli_run = json.loads(started.stdout)["run_id"]
    cli_changes = [
        ("run.cancel", ("runs", "cancel", cli_run, *ws)),
        ("token.create", ("token", "create", *ws, "--role", "viewer", "--name", "cli-made")),
        ("token.revoke", ("token", "revoke", *ws, "--name", "cli-made")),
    ]
    start_event = await _one_new(gql, workspace, seq)
    assert (start_event["action"], start_event["actor"]["kind"]) == ("run.start", "CLI")
    seq = start_event["seq"]
    for action, args in cli_changes:
        done = await in_thread(enverif, *args)
        assert done.returncode == 0, done.stderr
        event = await _one_new(gql, workspace, seq)
        assert (event["action"], event["actor"]["kind"]) == (action, "CLI"), event
        seq = event["seq"]
    assert (await _verify(enverif, workspace))["ok"] is True


async def test_concurrent_changes_and_readers_leave_one_gap_free_chain(
    gql, workspace, enverif: Enverif
) -> None:
    """Appends take no lock and readers seal as they come: however they interleave, every
    event is sealed once, numbered without a gap, and the chain verifies."""
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])

    async def change(i: int) -> None:
        await create_memory(gql, workspace.operator, agent, key=f"k{i}", value=f"v{i}")

    async def read() -> None:
        await _events(gql, workspace.operator)

    await asyncio.gather(*(change(i) for i in range(16)), *(read() for _ in range(8)))
    events = await _events(gql, workspace.operator)
    assert sorted(e["seq"] for e in events) == list(range(1, len(events) + 1))
    assert sum(e["action"] == "memory.create" for e in events) == 16
    assert (await _verify(enverif, workspace))["ok"] is True
