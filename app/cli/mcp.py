"""``enverif mcp list | add | sync | remove``: a workspace's MCP servers, from the command line
(docs/extending/mcp.md). The same services as the GraphQL mutations, acting as the
workspace's admin; header values are never printed (only the variable names)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from app.cli import common
from app.cli.common import CliError, machine_admin
from app.graphql.ids import to_global_id

if TYPE_CHECKING:
    from app.db import orm
    from app.services.runtime import Runtime


def _describe(row: orm.McpServer, tools: int) -> dict[str, Any]:
    return {
        "id": to_global_id("McpServer", row.id),
        "name": row.name,
        "transport": row.transport,
        "target": row.url if row.url is not None else " ".join(row.command or []),
        "enabled": row.enabled,
        "headers": dict(row.headers or {}),
        "tools": tools,
        "last_synced_at": common.iso(row.last_synced_at),
        "last_error": row.last_error,
    }


def _headers(values: list[str] | None) -> dict[str, str] | None:
    if not values:
        return None
    headers: dict[str, str] = {}
    for value in values:
        header, sep, env = value.partition("=")
        if not sep or not header or not env:
            raise CliError(f"--header takes HEADER=VARIABLE, got {value!r}")
        headers[header] = env
    return headers


def _command(value: str | None) -> list[str] | None:
    if value is None:
        return None
    try:
        command = json.loads(value)
    except json.JSONDecodeError as exc:
        raise CliError(f"--command is not a JSON list: {exc}") from None
    if not isinstance(command, list):
        raise CliError('--command must be a JSON list, like ["/usr/bin/node", "server.js"]')
    return command


async def _counted(rt: Runtime, workspace_id: int, row: orm.McpServer) -> dict[str, Any]:
    from app.services import mcp_servers

    async with rt.sessionmaker() as session:
        counts = await mcp_servers.tool_counts(session, workspace_id=workspace_id)
    return _describe(row, counts.get(row.id, 0))


def cmd_list(args: argparse.Namespace) -> int:
    from app.services import mcp_servers
    from app.services.reads import PageRequest

    settings = common.settings(log=False)

    async def run(rt: Runtime) -> list[dict[str, Any]]:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            page = await mcp_servers.list_servers(
                session, workspace_id=workspace_id, page=PageRequest(limit=1_000, after_id=None)
            )
            counts = await mcp_servers.tool_counts(session, workspace_id=workspace_id)
        return [_describe(row, counts.get(row.id, 0)) for row in page.rows]

    servers = asyncio.run(common.with_runtime(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, "servers": servers}))
        return 0
    columns = ("id", "name", "transport", "target", "enabled", "tools", "last_synced_at", "last_error")
    common.print_rows(columns, servers, empty=f"Workspace {args.workspace!r} has no MCP servers.")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from app.domain.mcp import Transport
    from app.services import mcp_servers

    if (args.url is None) == (args.command is None):
        raise CliError("give --url (streamable HTTP) or --command (stdio), not both")
    draft = mcp_servers.ServerDraft(
        name=args.name,
        transport=Transport.STREAMABLE_HTTP if args.url is not None else Transport.STDIO,
        url=args.url,
        command=_command(args.command),
        enabled=not args.disabled,
        headers=_headers(args.header),
    )
    settings = common.settings(log=False)

    async def run(rt: Runtime) -> dict[str, Any]:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
        row = await mcp_servers.create_server(rt, machine_admin(workspace_id), draft)
        return await _counted(rt, workspace_id, row)

    server = asyncio.run(common.with_runtime(settings, run))
    if args.json:
        print(json.dumps(server))
    else:
        print(f"Added MCP server {server['name']!r} ({server['id']}) with {server['tools']} tools.")
        if server["last_error"]:
            print(server["last_error"])
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from app.services import mcp_servers

    settings = common.settings(log=False)

    async def run(rt: Runtime) -> dict[str, Any]:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            row = await mcp_servers.server_named(session, workspace_id=workspace_id, name=args.name)
        synced = await mcp_servers.sync_server(rt, machine_admin(workspace_id), server_id=row.id)
        return await _counted(rt, workspace_id, synced)

    server = asyncio.run(common.with_runtime(settings, run))
    failed = bool(server["last_error"]) and server["last_error"].startswith("could not list")
    if args.json:
        print(json.dumps(server))
    else:
        print(
            f"MCP server {server['name']!r}: {server['tools']} tools, last synced {server['last_synced_at']}."
        )
        if server["last_error"]:
            print(server["last_error"])
    return 1 if failed else 0


def cmd_remove(args: argparse.Namespace) -> int:
    from app.services import mcp_servers

    settings = common.settings(log=False)

    async def run(rt: Runtime) -> str:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            row = await mcp_servers.server_named(session, workspace_id=workspace_id, name=args.name)
        await mcp_servers.delete_server(rt, machine_admin(workspace_id), server_id=row.id)
        return to_global_id("McpServer", row.id)

    removed = asyncio.run(common.with_runtime(settings, run))
    if args.json:
        print(json.dumps({"id": removed, "name": args.name}))
    else:
        print(f"Removed MCP server {args.name!r} and its tools.")
    return 0


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "mcp", "list, add, sync and remove a workspace's MCP servers")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    c = common.add_command(sub, "list", "the workspace's MCP servers, newest first")
    common.add_workspace(c)
    common.add_json(c, '{"workspace", "servers": [...]}')
    c.set_defaults(handler=cmd_list)

    c = common.add_command(sub, "add", "register a server; its tools are listed first (as createMcpServer)")
    c.add_argument("name", metavar="NAME", help="[a-z][a-z0-9_-]{0,31}; its tools are mcp.NAME.<tool>")
    common.add_workspace(c)
    c.add_argument("--url", help="a streamable HTTP server's endpoint (default: none; give it or --command)")
    c.add_argument(
        "--command",
        metavar="JSON",
        help='a stdio server\'s command, ["/usr/bin/node", "server.js"] (default: none; give it or --url)',
    )
    c.add_argument(
        "--header",
        action="append",
        metavar="HEADER=VARIABLE",
        help="send HEADER with the value of VARIABLE (on ENVERIF_MCP_SECRET_ENVS); repeat for several "
        "(default: no headers)",
    )
    c.add_argument("--disabled", action="store_true", help="register it without offering its tools")
    common.add_json(c, '{"id", "name", "transport", "target", "enabled", "headers", "tools", ...}')
    c.set_defaults(handler=cmd_add)

    c = common.add_command(sub, "sync", "list a server's tools again (exit 1 when that failed)")
    c.add_argument("name", metavar="NAME", help="the server's name")
    common.add_workspace(c)
    common.add_json(c, "the server, as `mcp add --json` prints it")
    c.set_defaults(handler=cmd_sync)

    c = common.add_command(sub, "remove", "remove a server and its tools")
    c.add_argument("name", metavar="NAME", help="the server's name")
    common.add_workspace(c)
    common.add_json(c, '{"id", "name"}')
    c.set_defaults(handler=cmd_remove)
