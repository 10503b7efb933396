"""MCP servers end to end: a real MCP server (the SDK's server side, as a process of its own
on 127.0.0.1, streamable HTTP and stdio) registered through GraphQL, its tools called by runs
on a real worker, under the same policy and approvals as the built-ins."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.db import orm
from app.domain.mcp import Transport
from app.engine.mcp_client import McpRefused, McpUnavailable, ServerSpec, list_tools
from app.settings import Settings
from tests.support.graphql import pk, unique
from tests.support.runs import DECIDE, scripted_agent, start_run, wait_run

# Every test has a real worker; those that only register servers do not use it.
pytestmark = pytest.mark.usefixtures("worker")

SERVER_SCRIPT = str(Path(__file__).parents[1] / "support" / "mcp_server.py")
SECRET_ENV = "MCP_TEST_CRM_TOKEN"
SECRET = "crm-test-secret-4f9a1c"

SERVER_FIELDS = """
  id name transport url command enabled headers toolRisk lastSyncedAt lastError
  tools { name description risk annotations inputSchema }
"""
CREATE = f"mutation($input: CreateMcpServerInput!) {{ createMcpServer(input: $input) {{ {SERVER_FIELDS} }} }}"
UPDATE = f"""mutation($id: ID!, $input: UpdateMcpServerInput!) {{
  updateMcpServer(id: $id, input: $input) {{ {SERVER_FIELDS} }} }}"""
SYNC = f"mutation($id: ID!) {{ syncMcpServer(id: $id) {{ {SERVER_FIELDS} }} }}"
DELETE = "mutation($id: ID!) { deleteMcpServer(id: $id) }"
LIST = f"query {{ mcpServers(first: 50) {{ edges {{ node {{ {SERVER_FIELDS} }} }} }} }}"


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    """The session's settings, with a header variable and this Python allowed for MCP."""
    return settings.model_copy(
        update={
            "mcp_secret_envs": (SECRET_ENV,),
            "mcp_stdio_commands": (sys.executable,),
            # A stdio server's first session starts a Python process (slow on a loaded machine).
            "tool_timeout_s": 30.0,
        }
    )


@pytest.fixture(autouse=True)
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, f"Bearer {SECRET}")


@dataclass
class CrmServer:
    """The test MCP server process; ``restart`` kills it and starts a new one on the port."""

    port: int
    log: Path
    token: str | None = None
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(raw) for raw in self.log.read_text().splitlines() if raw]
        return [c for c in lines if tool is None or c["tool"] == tool]

    async def start(self) -> None:
        command = [sys.executable, SERVER_SCRIPT, "--log", str(self.log), "--http", str(self.port)]
        if self.token:
            command += ["--token", self.token]
        command += self.extra
        # Popen returns once the process exists (no waiting on it here).
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                assert self.proc.poll() is None, "the MCP test server exited"
                assert time.monotonic() < deadline, "the MCP test server did not start"
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    async def restart(self) -> None:
        self.stop()
        await self.start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def crm_server(
    tmp_path: Path, *, token: str | None = None, extra: tuple[str, ...] = ()
) -> AsyncIterator[CrmServer]:
    server = CrmServer(
        port=free_port(), log=tmp_path / f"calls-{unique('log')}.jsonl", token=token, extra=extra
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def crm(tmp_path: Path) -> AsyncIterator[CrmServer]:
    async with crm_server(tmp_path) as server:
        yield server


def stdio_command(log: Path) -> list[str]:
    return [sys.executable, SERVER_SCRIPT, "--log", str(log), "--stdio"]


async def register(gql: Any, token: str, **fields: Any) -> dict[str, Any]:
    data = await gql.ok(CREATE, {"input": {"name": unique("crm").replace("-", "_"), **fields}}, token=token)
    server: dict[str, Any] = data["createMcpServer"]
    return server


def tools_by_name(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"].rsplit(".", 1)[1]: t for t in server["tools"]}


# -- registering ------------------------------------------------------------------------


async def test_create_lists_the_tools_with_their_risk_and_leaves_out_what_cannot_be_offered(
    gql, workspace, crm
) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    tools = tools_by_name(server)
    assert set(tools) == {"search_companies", "create_lead", "send_email", "lookup_owner", "export", "slow"}
    assert tools["search_companies"]["risk"] == "READ"
    assert tools["search_companies"]["annotations"] == {"readOnlyHint": True}
    assert tools["create_lead"]["risk"] == "DESTRUCTIVE"  # no annotations: the spec's defaults
    assert tools["send_email"]["risk"] == "EXTERNAL_WRITE"
    assert tools["create_lead"]["inputSchema"]["required"] == ["company", "email"]
    assert tools["create_lead"]["name"] == f"mcp.{server['name']}.create_lead"
    assert "'bad.name' is not letters, digits" in server["lastError"]
    assert server["lastSyncedAt"] is not None and server["enabled"] is True

    listed = await gql.ok(LIST, token=workspace.viewer)
    assert [e["node"]["id"] for e in listed["mcpServers"]["edges"]] == [server["id"]]

    changed = await gql.ok(
        UPDATE, {"id": server["id"], "input": {"toolRisk": {"search_companies": "EXTERNAL_WRITE"}}},
        token=workspace.admin,
    )  # fmt: skip
    assert tools_by_name(changed["updateMcpServer"])["search_companies"]["risk"] == "EXTERNAL_WRITE"
    assert changed["updateMcpServer"]["toolRisk"] == {"search_companies": "EXTERNAL_WRITE"}


TOOLS = "query($names: [String!]) { tools(names: $names) { id name description risk inputSchema server } }"


async def test_tools_lists_every_tool_with_its_schema_and_the_workspaces_mcp_tools_only(
    gql, workspace, make_workspace, crm, settings
) -> None:
    """``tools`` is what the inbox edits a call against: the built-ins' schemas are the ones
    the engine checks, a connector's come from its server, and another workspace's are absent."""
    from app.engine.tools.registry import registered_tool_specs

    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    other = await make_workspace()
    tools = {t["name"]: t for t in (await gql.ok(TOOLS, token=workspace.viewer))["tools"]}
    specs = await registered_tool_specs(settings)
    for name, spec in specs.items():
        assert tools[name]["inputSchema"] == spec.parameters, name
        assert (tools[name]["risk"], tools[name]["server"]) == (spec.risk.value, None)
    assert tools["webhook.post"]["inputSchema"]["required"] == ["url", "payload"]
    lead = tools[f"mcp.{server['name']}.create_lead"]
    assert (lead["server"], lead["risk"]) == (server["name"], "DESTRUCTIVE")
    assert lead["inputSchema"]["required"] == ["company", "email"]
    assert list(tools) == sorted(tools)
    assert len({t["id"] for t in tools.values()}) == len(tools)
    theirs = (await gql.ok(TOOLS, token=other.viewer))["tools"]
    assert not [t for t in theirs if t["name"].startswith("mcp.")]
    only = await gql.ok(TOOLS, {"names": ["http.get", lead["name"], "no.such"]}, token=workspace.viewer)
    assert [t["name"] for t in only["tools"]] == sorted(["http.get", lead["name"]])
    await gql.ok(UPDATE, {"id": server["id"], "input": {"enabled": False}}, token=workspace.admin)
    after = await gql.ok(TOOLS, {"names": [lead["name"]]}, token=workspace.viewer)
    assert after["tools"] == []  # a disabled server's tools are offered to no agent


async def test_only_admins_register_and_names_are_unique(gql, workspace, crm) -> None:
    error = await gql.error(
        CREATE,
        {"input": {"name": "crm", "transport": "STREAMABLE_HTTP", "url": crm.url}},
        token=workspace.operator,
    )
    assert error["extensions"]["code"] == "FORBIDDEN"
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    again = await gql.error(
        CREATE, {"input": {"name": server["name"], "transport": "STREAMABLE_HTTP", "url": crm.url}},
        token=workspace.admin,
    )  # fmt: skip
    assert again["extensions"]["code"] == "CONFLICT"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"name": "Bad.Name"}, "name", "a-z"),
        ({"url": None}, "url", "required"),
        ({"url": "ftp://127.0.0.1/mcp"}, "url", "http or https"),
        ({"headers": {"Authorization": "HOME"}}, "headers", "ENVERIF_MCP_SECRET_ENVS"),
        ({"headers": {"Authorization": "Bearer x"}}, "headers", "environment variable"),
        ({"toolRisk": {"search_companies": "HARMLESS"}}, "toolRisk", "one of"),
        ({"transport": "STDIO", "url": None, "command": ["/bin/sh", "-c", "true"]}, "command",
         "ENVERIF_MCP_STDIO_COMMANDS"),
    ],
)  # fmt: skip
async def test_bad_input_is_refused_with_the_field(gql, workspace, crm, fields, field, words) -> None:
    base = {"name": unique("crm").replace("-", "_"), "transport": "STREAMABLE_HTTP", "url": crm.url}
    error = await gql.error(CREATE, {"input": {**base, **fields}}, token=workspace.admin)
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": field}, error
    assert words in error["message"]
    assert (await gql.ok(LIST, token=workspace.admin))["mcpServers"]["edges"] == []


async def test_an_unreachable_server_is_refused_and_nothing_is_stored(gql, workspace) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    error = await gql.error(
        CREATE, {"input": {"name": "down", "transport": "STREAMABLE_HTTP", "url": url}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "url"}
    assert "could not list" in error["message"]
    assert (await gql.ok(LIST, token=workspace.admin))["mcpServers"]["edges"] == []


async def test_a_server_that_does_not_speak_mcp_is_refused(gql, workspace) -> None:
    from tests.support.servers import sink_server

    async with sink_server() as (_sink, url):
        error = await gql.error(
            CREATE, {"input": {"name": "garbage", "transport": "STREAMABLE_HTTP", "url": url + "/page"}},
            token=workspace.admin,
        )  # fmt: skip
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "url"}


async def test_loopback_is_refused_without_the_private_network_setting(settings, crm) -> None:
    strict = settings.model_copy(update={"http_allow_private_networks": False})
    spec = ServerSpec(0, 0, "crm", Transport.STREAMABLE_HTTP, crm.url, None, ())
    with pytest.raises((McpRefused, McpUnavailable), match="non-public address"):
        await list_tools(spec, strict, timeout_s=5)
    assert crm.calls() == []


async def test_header_secrets_come_from_the_environment_and_are_never_stored_or_shown(
    gql, workspace, sessionmaker, tmp_path
) -> None:
    async with crm_server(tmp_path, token=SECRET) as server:
        without = await gql.error(
            CREATE, {"input": {"name": "locked", "transport": "STREAMABLE_HTTP", "url": server.url}},
            token=workspace.admin,
        )  # fmt: skip
        assert without["extensions"]["field"] == "url"  # the server said 401
        created = await register(
            gql,
            workspace.admin,
            transport="STREAMABLE_HTTP",
            url=server.url,
            headers={"Authorization": SECRET_ENV},
        )
        assert created["headers"] == {"Authorization": SECRET_ENV}
        assert created["tools"]
        listed = await gql.raw(LIST, token=workspace.admin)
    assert SECRET not in json.dumps(listed) and SECRET not in json.dumps(created)
    async with sessionmaker() as session:
        row = await session.scalar(select(orm.McpServer).where(orm.McpServer.id == pk(created["id"])))
        assert row is not None and SECRET not in json.dumps([row.headers, row.url, row.last_error])


async def test_sync_lists_again_and_keeps_the_tools_when_the_server_is_down(gql, workspace, crm) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    crm.stop()
    synced = (await gql.ok(SYNC, {"id": server["id"]}, token=workspace.admin))["syncMcpServer"]
    assert "could not list" in synced["lastError"]
    assert synced["lastSyncedAt"] == server["lastSyncedAt"]
    assert len(synced["tools"]) == len(server["tools"])
    await crm.start()
    synced = (await gql.ok(SYNC, {"id": server["id"]}, token=workspace.admin))["syncMcpServer"]
    assert "could not list" not in (synced["lastError"] or "")
    assert synced["lastSyncedAt"] > server["lastSyncedAt"]


AUDIT = """query($objectId: ID) { auditEvents(first: 20, objectId: $objectId) {
  edges { node { action summary diff actor { kind name } } } } }"""


async def test_every_server_change_is_audited_with_its_actor_and_risk_overrides_named(
    gql, workspace, crm
) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url,
                            toolRisk={"send_email": "DESTRUCTIVE"})  # fmt: skip
    name, sid = server["name"], server["id"]
    override = {"search_companies": "EXTERNAL_WRITE"}
    await gql.ok(UPDATE, {"id": sid, "input": {"toolRisk": override}}, token=workspace.admin)
    await gql.ok(UPDATE, {"id": sid, "input": {"toolRisk": override}}, token=workspace.admin)  # no change
    await gql.ok(SYNC, {"id": sid}, token=workspace.admin)
    await gql.ok(DELETE, {"id": sid}, token=workspace.admin)
    data = await gql.ok(AUDIT, {"objectId": sid}, token=workspace.operator)
    events = [e["node"] for e in data["auditEvents"]["edges"]][::-1]
    assert [e["action"] for e in events] == [
        "mcp_server.create", "mcp_server.update", "mcp_server.sync", "mcp_server.delete",
    ]  # fmt: skip
    assert all(e["actor"]["kind"] == "TOKEN" and e["actor"]["name"] for e in events), events
    created, updated, synced, deleted = events
    assert created["diff"]["toolRisk"] == {"before": None, "after": {"send_email": "DESTRUCTIVE"}}
    assert f"mcp.{name}.send_email: its annotations -> DESTRUCTIVE" in created["summary"]
    assert updated["diff"] == {"toolRisk": {"before": {"send_email": "DESTRUCTIVE"}, "after": override}}
    assert f"mcp.{name}.search_companies: its annotations -> EXTERNAL_WRITE" in updated["summary"]
    assert f"mcp.{name}.send_email: DESTRUCTIVE -> its annotations" in updated["summary"]
    assert synced["diff"] is None and "tools" in synced["summary"]  # the same tools: nothing changed
    assert deleted["diff"]["url"] == {"before": crm.url, "after": None}


# -- runs ---------------------------------------------------------------------------------


def _step_pk(step: dict[str, Any]) -> str:
    return str(pk(step["id"]))


async def test_a_read_tool_runs_at_once_and_a_write_waits_for_approval_and_runs_once(
    gql, workspace, crm
) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, workspace.admin, tools=[f"{prefix}.*"],
        steps=[
            {"call": f"{prefix}.search_companies", "args": {"query": "Acme"}},
            {"call": f"{prefix}.create_lead", "args": {"company": "Acme", "email": "a@acme.test"}},
            {"final": "{{ results[-1] }}"},
        ],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    search, lead = run["steps"]
    assert search["status"] == "SUCCEEDED" and search["decision"] == "ALLOW"
    assert search["result"]["isError"] is False
    assert search["result"]["structuredContent"] == {"companies": [{"name": "Acme GmbH", "employees": 12}]}
    assert search["result"]["content"][0]["type"] == "text"
    assert lead["status"] == "WAITING_APPROVAL" and "DESTRUCTIVE" in lead["decisionReason"]
    assert crm.calls("create_lead") == []  # nothing is sent before an operator says so

    [pending] = run["pendingApprovals"]
    await gql.ok(DECIDE, {"id": pending["id"], "approve": True}, token=workspace.operator)
    run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["structuredContent"] == {"lead": "lead-Acme", "timesSeenWithThisKey": 1}
    [call] = crm.calls("create_lead")
    assert call["key"] == _step_pk(run["steps"][1])  # _meta.idempotencyKey is the step id
    # A READ call of a fast (scripted) model runs before its step row exists: no key to send.
    assert [c["key"] for c in crm.calls("search_companies")] == [None]


async def test_is_error_results_bad_arguments_and_vanished_tools_are_errors_the_model_sees(
    gql, workspace, crm, sessionmaker
) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    prefix = f"mcp.{server['name']}"
    # A tool the server does not have, as if it vanished between sync and call.
    async with sessionmaker() as session, session.begin():
        session.add(orm.McpTool(workspace_id=workspace.id, server_id=pk(server["id"]), name="gone",
                                description=None, annotations={"readOnlyHint": True},
                                input_schema={"type": "object"}))  # fmt: skip
    agent = await scripted_agent(
        gql, workspace.admin, tools=[f"{prefix}.*"],
        steps=[
            {"call": f"{prefix}.lookup_owner", "args": {"company": "Acme"}},
            {"call": f"{prefix}.search_companies", "args": {"query": 5}},
            {"call": f"{prefix}.search_companies", "args": {"query": "x", "extra": True}},
            {"call": f"{prefix}.gone", "args": {}},
            {"call": f"{prefix}.export", "args": {"size": 2_000_000}},
            {"final": "done"},
        ],
    )  # fmt: skip
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "SUCCEEDED", run
    owner, wrong_type, _extra, gone, big = run["steps"][:5]
    assert owner["status"] == "FAILED"
    assert owner["result"]["error"]["code"] == "MCP_TOOL_ERROR"
    assert "no company named 'Acme'" in owner["result"]["error"]["message"]
    assert wrong_type["result"]["error"]["code"] == "INVALID_ARGUMENTS"
    assert "query" in wrong_type["result"]["error"]["message"]
    assert gone["status"] == "FAILED" and gone["result"]["error"]["code"] in ("MCP_TOOL_ERROR", "MCP_ERROR")
    assert big["result"]["error"]["code"] == "TOO_LARGE", big["result"]  # capped like any result
    # Arguments the schema refuses never reach the server; the SDK's generated schemas allow
    # extra properties, so the third call did (and the server ignored "extra").
    assert [c["args"] for c in crm.calls("search_companies")] == [{"query": "x"}]


async def test_a_parents_require_approval_ceiling_holds_over_a_read_tool(gql, workspace, crm) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, workspace.admin, tools=[f"{prefix}.*"],
        policy={"default": "ALLOW", "rules": [{"tool": f"{prefix}.search_companies", "decision": "REQUIRE_APPROVAL"}]},
        steps=[{"call": f"{prefix}.search_companies", "args": {"query": "Acme"}}, {"final": "done"}],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    assert run["steps"][0]["decision"] == "REQUIRE_APPROVAL"
    assert crm.calls() == []


async def test_a_parents_require_approval_ceiling_holds_over_a_childs_mcp_call(gql, workspace, crm) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    prefix = f"mcp.{server['name']}"
    child = unique("child")
    await scripted_agent(
        gql, workspace.admin, name=child, tools=[f"{prefix}.*"], policy={"default": "ALLOW", "rules": []},
        steps=[{"call": f"{prefix}.search_companies", "args": {"query": "Acme"}}, {"final": "done"}],
    )  # fmt: skip
    parent = await scripted_agent(
        gql, workspace.admin, tools=["agents.*"],
        policy={"default": "ALLOW", "rules": [{"tool": "mcp.*", "decision": "REQUIRE_APPROVAL"}]},
        steps=[{"call": "agents.delegate", "args": {"agent": child, "task": "find Acme"}}, {"final": "done"}],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, parent)
    await wait_run(gql, workspace.viewer, run_id, "WAITING_CHILD")
    listed = await gql.ok(
        "query { approvals(status: PENDING, first: 10) { edges { node { id tool run { id depth } } } } }",
        token=workspace.viewer,
    )
    deadline = time.monotonic() + 20
    while not listed["approvals"]["edges"] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        listed = await gql.ok(
            "query { approvals(status: PENDING, first: 10) { edges { node { id tool run { id depth } } } } }",
            token=workspace.viewer,
        )
    [approval] = [e["node"] for e in listed["approvals"]["edges"]]
    assert approval["tool"] == f"{prefix}.search_companies" and approval["run"]["depth"] == 1
    assert crm.calls() == []  # the child's own ALLOW did not beat the parent's ceiling
    await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=workspace.operator)
    run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert len(crm.calls("search_companies")) == 1


async def test_the_server_restarted_mid_run_gets_a_new_session(gql, workspace, crm) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url)
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, workspace.admin, tools=[f"{prefix}.*"],
        steps=[
            {"call": f"{prefix}.search_companies", "args": {"query": "Acme"}},
            {"call": f"{prefix}.send_email", "args": {"to": "a@acme.test", "body": "hi"}},
            {"call": f"{prefix}.search_companies", "args": {"query": "Beta"}},
            {"final": "done"},
        ],
    )  # fmt: skip
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
    first_pid = crm.calls("search_companies")[0]["pid"]
    await crm.restart()  # the worker's session is unknown to the new process
    await gql.ok(DECIDE, {"id": run["pendingApprovals"][0]["id"], "approve": True}, token=workspace.operator)
    run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert all(s["status"] == "SUCCEEDED" for s in run["steps"]), [
        (s["status"], s["result"]) for s in run["steps"]
    ]
    [email] = crm.calls("send_email")
    assert email["pid"] != first_pid and email["key"] == _step_pk(run["steps"][1])
    assert [c["args"]["query"] for c in crm.calls("search_companies")] == ["Acme", "Beta"]


async def test_a_stdio_server_runs_as_a_child_process(gql, workspace, tmp_path) -> None:
    log = tmp_path / "stdio-calls.jsonl"
    server = await register(gql, workspace.admin, transport="STDIO", url=None, command=stdio_command(log))
    assert server["transport"] == "STDIO" and server["command"] == stdio_command(log)
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, workspace.admin, tools=[f"{prefix}.search_*"],
        steps=[
            {"call": f"{prefix}.search_companies", "args": {"query": "Acme"}},
            {"call": f"{prefix}.send_email", "args": {"to": "x", "body": "y"}},  # not offered
            {"final": "{{ results[0].structuredContent }}"},
        ],
    )  # fmt: skip
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["steps"][0]["status"] == "SUCCEEDED", run["steps"][0]
    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == {"companies": [{"name": "Acme GmbH", "employees": 12}]}
    assert run["steps"][1]["result"]["error"]["code"] == "UNKNOWN_TOOL"
    calls = [json.loads(raw) for raw in log.read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["search_companies"]
    assert calls[0]["args"] == {"query": "Acme"}


async def test_workspace_b_can_neither_see_nor_call_workspace_as_servers(gql, make_workspace, crm) -> None:
    a, b = await make_workspace(), await make_workspace()
    server = await register(gql, a.admin, transport="STREAMABLE_HTTP", url=crm.url)
    assert (await gql.ok(LIST, token=b.admin))["mcpServers"]["edges"] == []
    for mutation, variables in [(SYNC, {"id": server["id"]}), (DELETE, {"id": server["id"]}),
                                (UPDATE, {"id": server["id"], "input": {"enabled": False}})]:  # fmt: skip
        error = await gql.error(mutation, variables, token=b.admin)
        assert error["extensions"]["code"] == "NOT_FOUND"
    node = "query($id: ID!) { node(id: $id) { id ... on McpServer { name } } }"
    assert (await gql.ok(node, {"id": server["id"]}, token=a.viewer))["node"]["name"] == server["name"]
    assert (await gql.ok(node, {"id": server["id"]}, token=b.admin))["node"] is None
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, b.admin, tools=["mcp.*"],
        steps=[{"call": f"{prefix}.search_companies", "args": {"query": "Acme"}}, {"final": "done"}],
    )  # fmt: skip
    run = await wait_run(gql, b.viewer, await start_run(gql, b.operator, agent))
    assert run["steps"][0]["result"]["error"]["code"] == "UNKNOWN_TOOL"
    assert crm.calls() == []


async def test_a_disabled_or_deleted_server_offers_nothing(gql, workspace, crm) -> None:
    server = await register(gql, workspace.admin, transport="STREAMABLE_HTTP", url=crm.url, enabled=False)
    prefix = f"mcp.{server['name']}"
    agent = await scripted_agent(
        gql, workspace.admin, tools=["mcp.*"],
        steps=[{"call": f"{prefix}.search_companies", "args": {"query": "Acme"}}, {"final": "done"}],
    )  # fmt: skip
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["steps"][0]["result"]["error"]["code"] == "UNKNOWN_TOOL"
    deleted = await gql.ok(DELETE, {"id": server["id"]}, token=workspace.admin)
    assert deleted["deleteMcpServer"] == server["id"]
    assert (await gql.ok(LIST, token=workspace.admin))["mcpServers"]["edges"] == []
    assert crm.calls() == []
