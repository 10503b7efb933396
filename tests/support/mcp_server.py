"""A small CRM as a real MCP server, built with the official SDK's server side (MCPServer,
the SDK's FastMCP), for the MCP tests. Run as a process of its own, so a test can kill it
and start it again:

    python tests/support/mcp_server.py --log CALLS.jsonl --http PORT [--token T] [--lead-delay S]
    python tests/support/mcp_server.py --log CALLS.jsonl --stdio

Every tool call appends one JSON line to ``--log`` (tool, arguments, the ``_meta``
idempotency key, the process id), so a test can count calls per key across restarts.
``--lead-delay``: ``create_lead`` answers only after S seconds. ``--token``: requests without ``Authorization: Bearer T`` are answered 401. Listens on
127.0.0.1 only. Standalone on purpose: a stdio server is started with only the SDK's
minimal environment, so it imports nothing from the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations


def build(log_path: Path, *, lead_delay_s: float = 0.0) -> MCPServer:
    server = MCPServer("crm")

    def record(tool: str, args: dict[str, Any], ctx: Context | None) -> int:
        meta = ctx.request_context.meta if ctx is not None else None
        key = (meta or {}).get("idempotencyKey")
        line = {"tool": tool, "args": args, "key": key, "pid": os.getpid()}
        with log_path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        calls = [json.loads(raw) for raw in log_path.read_text().splitlines() if raw]
        return sum(1 for c in calls if c["tool"] == tool and key is not None and c["key"] == key)

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def search_companies(query: str, ctx: Context) -> dict[str, Any]:
        """Find companies whose name contains the query."""
        record("search_companies", {"query": query}, ctx)
        return {"companies": [{"name": f"{query} GmbH", "employees": 12}]}

    @server.tool()  # no annotations: the spec's defaults make it destructive
    async def create_lead(company: str, email: str, ctx: Context) -> dict[str, Any]:
        """Create a sales lead."""
        seen = record("create_lead", {"company": company, "email": email}, ctx)
        await asyncio.sleep(lead_delay_s)  # held open: a test kills the worker meanwhile
        return {"lead": f"lead-{company}", "timesSeenWithThisKey": seen}

    @server.tool(annotations=ToolAnnotations(destructiveHint=False, openWorldHint=True))
    def send_email(to: str, body: str, ctx: Context) -> str:
        """Send an e-mail."""
        record("send_email", {"to": to}, ctx)
        return f"sent to {to}"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_owner(company: str, ctx: Context) -> str:
        """Who owns a company's account; fails for unknown companies."""
        record("lookup_owner", {"company": company}, ctx)
        raise ToolError(f"no company named {company!r}")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def export(size: int, ctx: Context) -> str:
        """A large export."""
        record("export", {"size": size}, ctx)
        return "x" * size

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def slow(seconds: float, ctx: Context) -> str:
        """Takes its time."""
        record("slow", {"seconds": seconds}, ctx)
        await asyncio.sleep(seconds)
        return "late"

    # A tool that cannot become an agent tool: mcp.crm.bad.name would be ambiguous. (A
    # schema that is not JSON Schema the SDK's server refuses to list at all: see the unit
    # test of app.services.mcp_servers.usable_tools.)
    @server.tool(name="bad.name", annotations=ToolAnnotations(readOnlyHint=True))
    def bad_name() -> str:
        return "never offered"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--http", type=int)
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--token")
    parser.add_argument("--lead-delay", type=float, default=0.0)
    args = parser.parse_args()
    server = build(args.log, lead_delay_s=args.lead_delay)
    if args.stdio:
        asyncio.run(server.run_stdio_async())
        return
    import uvicorn

    app: Any = server.streamable_http_app()
    if args.token:
        app = _require_token(app, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning", lifespan="on")


def _require_token(app: Any, token: str) -> Any:
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    main()
