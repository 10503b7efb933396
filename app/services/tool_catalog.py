"""Every tool an agent of a workspace can be offered, with the JSON Schema of its arguments:
the tools this installation's workers register (built-ins and ``enverif.tools`` plugins) and
the tools the workspace's enabled MCP servers listed at their last sync. The console's inbox
checks an edited call against it before sending the edit; ``decideApproval`` checks the
arguments again on the server (docs/console.md, "Approvals").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from app.db import orm
from app.domain.mcp import agent_tool_name, effective_risk
from app.domain.policy import RiskClass
from app.services.auth import Principal
from app.services.runtime import Runtime

if TYPE_CHECKING:
    from app.engine.base import ToolSpec


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str | None
    risk: RiskClass
    input_schema: dict[str, Any]
    server: str | None  # the MCP server a connector's tool comes from; None: registered


async def registered_specs(rt: Runtime) -> dict[str, ToolSpec]:
    """The registered tools' specs (risk, argument schema) by name, loaded once per process.
    A connector's (``mcp.``) tool is not among them: its schema lives with its server."""
    if rt.tool_specs is None:
        from app.engine.tools.registry import registered_tool_specs  # the engine loads plugins

        rt.tool_specs = await registered_tool_specs(rt.settings)
    return rt.tool_specs


async def workspace_tools(
    rt: Runtime, principal: Principal, *, names: Collection[str] | None = None
) -> list[ToolInfo]:
    """The workspace's tools by name (only ``names`` when given; unknown names are left out)."""
    wanted = None if names is None else set(names)
    found = [
        ToolInfo(name=spec.name, description=spec.description, risk=spec.risk,
                 input_schema=spec.parameters, server=None)
        for spec in (await registered_specs(rt)).values()
        if wanted is None or spec.name in wanted
    ]  # fmt: skip
    async with rt.read_sessionmaker() as session:
        rows = await session.execute(
            select(orm.McpServer.name, orm.McpServer.tool_risk, orm.McpTool)
            .join(orm.McpTool, orm.McpTool.server_id == orm.McpServer.id)
            .where(orm.McpServer.workspace_id == principal.workspace_id, orm.McpServer.enabled.is_(True))
        )  # fmt: skip
        for server, overrides, tool in rows:
            name = agent_tool_name(server, tool.name)
            if wanted is None or name in wanted:
                risk = effective_risk(tool.name, tool.annotations, overrides or {})
                found.append(ToolInfo(name=name, description=tool.description, risk=risk,
                                      input_schema=tool.input_schema, server=server))  # fmt: skip
    return sorted(found, key=lambda t: t.name)
