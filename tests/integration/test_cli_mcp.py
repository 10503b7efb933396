"""``enverif mcp list | add | sync | remove --workspace W`` as an operator runs them, against a
real MCP server process on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.test_mcp import crm_server
from tests.support.cli import Enverif, assert_one_line_error, in_thread

PRIVATE = {"ENVERIF_HTTP_ALLOW_PRIVATE_NETWORKS": "true"}


async def test_add_list_sync_and_remove_a_server(enverif: Enverif, workspace: Any, tmp_path: Path) -> None:
    ws = ("--workspace", workspace.name)
    async with crm_server(tmp_path) as crm:
        added = await in_thread(enverif, "mcp", "add", "crm", *ws, "--url", crm.url, "--json", **PRIVATE)
        assert added.returncode == 0, added.stderr
        server = json.loads(added.stdout)
        assert server["name"] == "crm" and server["transport"] == "STREAMABLE_HTTP" and server["tools"] == 6
        assert "bad.name" in server["last_error"]

        listed = await in_thread(enverif, "mcp", "list", *ws, "--json")
        assert listed.returncode == 0, listed.stderr
        assert [s["id"] for s in json.loads(listed.stdout)["servers"]] == [server["id"]]
        table = await in_thread(enverif, "mcp", "list", *ws)
        assert "crm" in table.stdout and crm.url in table.stdout

        synced = await in_thread(enverif, "mcp", "sync", "crm", *ws, **PRIVATE)
        assert synced.returncode == 0, synced.stderr
        assert "6 tools" in synced.stdout
        crm.stop()
        down = await in_thread(enverif, "mcp", "sync", "crm", *ws, "--json", **PRIVATE)
        assert down.returncode == 1
        assert json.loads(down.stdout)["tools"] == 6  # the last good sync's tools stay
        assert "could not list" in json.loads(down.stdout)["last_error"]

    removed = await in_thread(enverif, "mcp", "remove", "crm", *ws, "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout) == {"id": server["id"], "name": "crm"}
    empty = await in_thread(enverif, "mcp", "list", *ws)
    assert "has no MCP servers" in empty.stdout

    audited = await in_thread(enverif, "audit", "list", *ws, "--json")
    events = [e for e in json.loads(audited.stdout)["events"] if e["action"].startswith("mcp_server.")]
    assert [e["action"] for e in events] == [
        "mcp_server.delete", "mcp_server.sync", "mcp_server.sync", "mcp_server.create",
    ]  # fmt: skip
    assert {e["actor"] for e in events} == {events[0]["actor"]} and events[0]["actor"].startswith("CLI")
    assert "it failed" in events[1]["summary"]


async def test_refusals_are_one_line_errors(enverif: Enverif, workspace: Any, tmp_path: Path) -> None:
    ws = ("--workspace", workspace.name)
    async with crm_server(tmp_path) as crm:
        header = await in_thread(
            enverif, "mcp", "add", "crm", *ws, "--url", crm.url, "--header", "Authorization=HOME", **PRIVATE
        )
        assert_one_line_error(header, "ENVERIF_MCP_SECRET_ENVS")
        guarded = await in_thread(enverif, "mcp", "add", "crm", *ws, "--url", crm.url)  # private networks off
        assert_one_line_error(guarded, "non-public address")
        stdio = await in_thread(enverif, "mcp", "add", "files", *ws, "--command", '["/bin/sh", "-c", "true"]')
        assert_one_line_error(stdio, "ENVERIF_MCP_STDIO_COMMANDS")
        both = await in_thread(enverif, "mcp", "add", "x", *ws)
        assert_one_line_error(both, "--url")
        missing = await in_thread(enverif, "mcp", "sync", "nope", *ws)
        assert_one_line_error(missing, "no MCP server named 'nope'")
    assert crm.calls() == []
