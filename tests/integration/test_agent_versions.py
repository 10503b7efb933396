"""Pinned versions (docs/concepts/versions.md): a run keeps the configuration it started
with, whatever happens to its agent while it waits; memories stay as they were injected.
Through GraphQL with a real worker, on the leg's database."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from tests.integration.test_holds import PAUSE, RESUME
from tests.support.graphql import create_memory, pk
from tests.support.runs import DECIDE, agent_name, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

pytestmark = pytest.mark.usefixtures("worker")

UPDATE_AGENT = """
mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id version } }
"""
SET_STATUS = """
mutation($id: ID!, $status: AgentStatus!) { updateAgent(id: $id, input: {status: $status}) { id version status } }
"""
VERSIONS = """
query($id: ID!, $first: Int, $after: String) {
  agent(id: $id) {
    version
    versions(first: $first, after: $after) {
      edges { cursor node { id version instructions model tools memoryBudget { maxItems maxChars }
                            policy { default } createdBy { kind id name } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""
RUN_VERSION = """
query($id: ID!) {
  run(id: $id) {
    id status result
    agentVersion { id version instructions model }
    startedBy { kind id name }
    injectedMemories { id key value tags importance }
    steps { id status tool result }
    pendingApprovals { id }
    children { id status result agentVersion { version } }
  }
}
"""
NODE = "query($id: ID!) { node(id: $id) { id ... on AgentVersion { version } } }"


def _approve_then(url: str, final: Any) -> dict[str, Any]:
    return {
        "provider": "scripted",
        "steps": [{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}, {"final": final}],
    }


async def _approve(gql: Any, workspace: Any, run_id: str) -> None:
    await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    run = (await gql.ok(RUN_VERSION, {"id": run_id}, token=workspace.viewer))["run"]
    [pending] = run["pendingApprovals"]
    await gql.ok(DECIDE, {"id": pending["id"], "approve": True}, token=workspace.operator)


async def test_a_run_rewritten_mid_flight_finishes_on_its_pinned_version(gql, workspace) -> None:
    async with sink_server() as (_sink, url):
        agent = await scripted_agent(gql, workspace.admin, model=_approve_then(url, "old script"))
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        # Rewritten, paused and resumed, and rewritten again while the run waits.
        new = {"instructions": "new", "model": _approve_then(url, "new script"), "tools": ["webhook.post"]}
        assert (await gql.ok(UPDATE_AGENT, {"id": agent, "input": new}, token=workspace.admin))[
            "updateAgent"
        ]["version"] == 2
        await gql.ok(SET_STATUS, {"id": agent, "status": "PAUSED"}, token=workspace.admin)
        await gql.ok(SET_STATUS, {"id": agent, "status": "ACTIVE"}, token=workspace.admin)
        await _approve(gql, workspace, run_id)
        await wait_run(gql, workspace.viewer, run_id)
        later = await start_run(gql, workspace.operator, agent)
        await _approve(gql, workspace, later)
        await wait_run(gql, workspace.viewer, later)
        old = (await gql.ok(RUN_VERSION, {"id": run_id}, token=workspace.viewer))["run"]
        new_run = (await gql.ok(RUN_VERSION, {"id": later}, token=workspace.viewer))["run"]
    assert old["status"] == "SUCCEEDED" and old["result"] == "old script", old
    assert old["agentVersion"]["version"] == 1 and old["agentVersion"]["instructions"] == "test agent"
    assert old["agentVersion"]["model"]["steps"][1] == {"final": "old script"}
    assert new_run["result"] == "new script" and new_run["agentVersion"]["version"] == 2
    # A status change alone writes no version.
    agent_view = (await gql.ok(VERSIONS, {"id": agent}, token=workspace.viewer))["agent"]
    assert agent_view["version"] == 2
    assert [e["node"]["version"] for e in agent_view["versions"]["edges"]] == [2, 1]
    assert old["startedBy"]["kind"] == "TOKEN" and old["startedBy"]["name"]


async def test_versions_page_and_record_who_wrote_them(gql, workspace) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    for n in range(3):
        await gql.ok(
            UPDATE_AGENT, {"id": agent, "input": {"instructions": f"v{n + 2}"}}, token=workspace.admin
        )
    # An update that sets what is already there is no new version.
    same = await gql.ok(UPDATE_AGENT, {"id": agent, "input": {"instructions": "v4"}}, token=workspace.admin)
    assert same["updateAgent"]["version"] == 4
    renamed = await gql.ok(UPDATE_AGENT, {"id": agent, "input": {"description": "d"}}, token=workspace.admin)
    assert renamed["updateAgent"]["version"] == 4
    first = (await gql.ok(VERSIONS, {"id": agent, "first": 2}, token=workspace.viewer))["agent"]["versions"]
    assert [e["node"]["version"] for e in first["edges"]] == [4, 3] and first["pageInfo"]["hasNextPage"]
    rest = (
        await gql.ok(
            VERSIONS,
            {"id": agent, "first": 5, "after": first["pageInfo"]["endCursor"]},
            token=workspace.viewer,
        )
    )["agent"]["versions"]
    assert [e["node"]["version"] for e in rest["edges"]] == [2, 1] and not rest["pageInfo"]["hasNextPage"]
    v1 = rest["edges"][-1]["node"]
    assert v1["instructions"] == "test agent" and v1["createdBy"]["kind"] == "TOKEN"
    assert v1["createdBy"]["id"] and v1["createdBy"]["name"]
    assert (await gql.ok(NODE, {"id": v1["id"]}, token=workspace.viewer))["node"]["version"] == 1
    too_many = await gql.error(VERSIONS, {"id": agent, "first": 10_000}, token=workspace.viewer)
    assert too_many["extensions"]["code"] == "VALIDATION_FAILED"


async def test_a_child_created_after_an_update_pins_the_new_version(gql, workspace) -> None:
    async with sink_server() as (_sink, url):
        child_agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "child v1"}], tools=[])
        name = await agent_name(gql, workspace.viewer, child_agent)
        parent = await scripted_agent(
            gql,
            workspace.admin,
            model={
                "provider": "scripted",
                "steps": [
                    {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}},
                    {"call": "agents.delegate", "args": {"agent": name, "task": "go"}},
                    {"final": "{{ results[-1].result }}"},
                ],
            },
            tools=["webhook.post", "agents.delegate"],
        )
        run_id = await start_run(gql, workspace.operator, parent)
        await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        # The child does not exist yet: it is created after this update, and pins version 2.
        child_v2 = {"model": {"provider": "scripted", "steps": [{"final": "child v2"}]}}
        await gql.ok(UPDATE_AGENT, {"id": child_agent, "input": child_v2}, token=workspace.admin)
        await _approve(gql, workspace, run_id)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
        full = (await gql.ok(RUN_VERSION, {"id": run_id}, token=workspace.viewer))["run"]
    assert run["status"] == "SUCCEEDED" and run["result"] == "child v2", run
    [child] = full["children"]
    assert child["agentVersion"]["version"] == 2 and child["result"] == "child v2"


async def test_memories_stay_as_injected_when_edited_mid_run(gql, workspace) -> None:
    async with sink_server() as (_sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, model=_approve_then(url, "{{ memories | map(attribute='value') | list }}")
        )
        kept = await create_memory(
            gql, workspace.admin, agent, key="kept", value="as injected", tags=["t1"], importance=0.9
        )
        gone = await create_memory(
            gql, workspace.admin, agent, key="gone", value="deleted later", importance=0.8
        )
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
        await gql.ok(
            "mutation($id: ID!, $input: MemoryPatch!) { updateMemory(id: $id, input: $input) { id } }",
            {"id": kept["id"], "input": {"value": "edited", "tags": ["t2"], "importance": 0.1}},
            token=workspace.admin,
        )
        await gql.ok(
            "mutation($id: ID!) { deleteMemory(id: $id) }", {"id": gone["id"]}, token=workspace.admin
        )
        await _approve(gql, workspace, run_id)
        run = await wait_run(gql, workspace.viewer, run_id)
        full = (await gql.ok(RUN_VERSION, {"id": run_id}, token=workspace.viewer))["run"]
    assert run["status"] == "SUCCEEDED" and sorted(run["result"]) == ["as injected", "deleted later"], run
    shown = {m["key"]: m for m in full["injectedMemories"]}
    assert shown["kept"]["value"] == "as injected" and shown["kept"]["tags"] == ["t1"]
    assert shown["kept"]["importance"] == 0.9
    assert shown["gone"]["value"] == "deleted later"


RUN_FAILURE = "query($id: ID!) { run(id: $id) { status error errorCode heldReason pendingApprovals { id } } }"


async def _delete_version(sessionmaker: Any, agent: str, version: int) -> None:
    """What no mutation does: the pinned version's row removed by hand, in SQL."""
    async with sessionmaker() as session, session.begin():
        deleted = await session.execute(
            text("DELETE FROM agent_versions WHERE agent_id = :a AND version = :v"),
            {"a": pk(agent), "v": version},
        )
        assert deleted.rowcount == 1


async def test_a_run_whose_pinned_version_is_gone_fails_saying_so(gql, workspace, sessionmaker) -> None:
    async with sink_server() as (_sink, url):
        # Resumed: it waits for an approval while its version disappears.
        agent = await scripted_agent(gql, workspace.admin, model=_approve_then(url, "never"))
        waiting = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, waiting, "WAITING_APPROVAL")
        # First start: held in a paused workspace, so no worker has claimed it yet.
        await gql.ok(PAUSE, {"reason": "versions"}, token=workspace.admin)
        queued = await start_run(gql, workspace.operator, agent)
        await wait_run(gql, workspace.viewer, queued, "QUEUED")
        await _delete_version(sessionmaker, agent, 1)
        [pending] = (await gql.ok(RUN_FAILURE, {"id": waiting}, token=workspace.viewer))["run"][
            "pendingApprovals"
        ]
        await gql.ok(DECIDE, {"id": pending["id"], "approve": True}, token=workspace.operator)
        await gql.ok(RESUME, token=workspace.admin)
        ended = [await wait_run(gql, workspace.viewer, run_id) for run_id in (waiting, queued)]
        runs = [(await gql.ok(RUN_FAILURE, {"id": r["id"]}, token=workspace.viewer))["run"] for r in ended]
    for run in runs:
        assert run["status"] == "FAILED" and run["errorCode"] == "AGENT_VERSION_MISSING", run
        assert "version 1" in run["error"] and run["heldReason"] is None, run
