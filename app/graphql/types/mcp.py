"""McpServer: an MCP server a workspace registered, and the tools its last sync listed
(docs/extending/mcp.md). ``headers`` shows variable names only: values are never stored."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.mcp import Transport, agent_tool_name, effective_risk
from app.domain.policy import RiskClass
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.graphql.types.node import NODE_ID, Connection, Node, keyset_connection
from app.services import mcp_servers
from app.services.reads import PageRequest


def _json(value: Any) -> Any:
    """A stored JSON value, as the JSON scalar passes it through."""
    return value


@strawberry.type(name="McpTool", description="A tool of an MCP server, as its last sync listed it.")
class McpTool:
    name: str = strawberry.field(description="The agent tool's name: mcp.<server>.<tool>.")
    description: str | None = strawberry.field(
        description="What the tool does, as the MCP server describes it."
    )
    risk: RiskClass = strawberry.field(
        description="From the tool's annotations (readOnlyHint, destructiveHint, openWorldHint), or the server's toolRisk."
    )
    annotations: JSON | None = strawberry.field(
        description="The tool's MCP annotations (readOnlyHint, destructiveHint, ...), as listed."
    )
    input_schema: JSON = strawberry.field(description="The JSON Schema of the tool's arguments, as listed.")


@strawberry.type(
    name="McpServer",
    description="An MCP server the workspace registered; its tools can be offered to agents: docs/extending/mcp.md.",
)
class McpServer(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    name: str = strawberry.field(
        description="Unique in the workspace; its tools are named mcp.<name>.<tool>."
    )
    transport: Transport = strawberry.field(description="How Enverif reaches it.")
    url: str | None = strawberry.field(description="STREAMABLE_HTTP: where it is; null for STDIO.")
    command: list[str] | None = strawberry.field(
        description="STDIO: the program and its arguments Enverif starts; null for STREAMABLE_HTTP."
    )
    enabled: bool = strawberry.field(description="False: its tools are not offered to agents.")
    headers: JSON = strawberry.field(
        description="Header name -> environment variable name (never its value)."
    )
    tool_risk: JSON = strawberry.field(description="Tool name -> RiskClass, set by an admin.")
    last_synced_at: datetime | None = strawberry.field(description="When the tools were last listed.")
    last_error: str | None = strawberry.field(
        description="Why the last sync failed, or which listed tools were left out."
    )
    created_at: datetime = strawberry.field(description="When it was registered.")
    updated_at: datetime = strawberry.field(description="When its registration last changed.")
    row: strawberry.Private[orm.McpServer]

    @classmethod
    def from_row(cls, row: orm.McpServer) -> McpServer:
        return cls(
            id=strawberry.ID(to_global_id("McpServer", row.id)),
            name=row.name,
            transport=Transport(row.transport),
            url=row.url,
            command=row.command,
            enabled=row.enabled,
            headers=_json(row.headers or {}),
            tool_risk=_json(row.tool_risk or {}),
            last_synced_at=row.last_synced_at,
            last_error=row.last_error,
            created_at=row.created_at,
            updated_at=row.updated_at,
            row=row,
        )

    @strawberry.field(description="The tools an agent may be offered, by name.")
    async def tools(self, info: Info) -> list[McpTool]:
        async with info.context.session() as session:
            rows = await mcp_servers.server_tools(
                session, workspace_id=self.row.workspace_id, server_id=self.row.id
            )
        overrides = self.row.tool_risk or {}
        return [
            McpTool(
                name=agent_tool_name(self.row.name, t.name),
                description=t.description,
                risk=effective_risk(t.name, t.annotations, overrides),
                annotations=_json(t.annotations),
                input_schema=_json(t.input_schema),
            )
            for t in rows
        ]


@strawberry.type(name="McpServerConnection", description="A page of MCP servers (Relay cursor connection).")
class McpServerConnection(Connection[McpServer]):
    pass


async def mcp_server_connection(info: Info, *, page: PageRequest) -> McpServerConnection:
    principal = await info.context.principal()
    stmt = mcp_servers.servers_query(principal.workspace_id)
    return await keyset_connection(
        info, McpServerConnection, stmt, page, McpServer.from_row, id_column=orm.McpServer.id
    )
