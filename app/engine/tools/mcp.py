"""MCP servers' tools as agent tools: ``mcp.<server>.<tool>`` (docs/extending/mcp.md).

Each run reads its workspace's enabled servers and the tools their last sync stored, and
adds them to the worker's registry for that run only (``ToolRegistry.with_tools``): from
there on they are tools like any other, under the same planner, policy chain, ceilings,
approvals and loop guard. They are I/O tools: the step (and so the idempotency key, sent as
``_meta.idempotencyKey``) exists before the call, and a call cut off by a crash is made again
with the same key.

The arguments are checked against the tool's ``inputSchema`` before anything is sent
(``INVALID_ARGUMENTS``); the result the model sees is ``{"content", "structuredContent",
"isError": false}``, and a result with ``isError`` is the error ``MCP_TOOL_ERROR``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jsonschema
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import orm
from app.domain.mcp import PREFIX, agent_tool_name, effective_risk
from app.domain.model_errors import ModelErrorCode
from app.domain.policy import RiskClass
from app.engine.base import ToolContext, ToolError, ToolKind
from app.engine.mcp_client import (
    McpConnections,
    McpRefused,
    McpTooLarge,
    McpUnavailable,
    ServerSpec,
    describe,
    mcp_error,
)

# What the model reads of a failed tool's text, at most (the message is capped again).
MAX_ERROR_TEXT_CHARS = 2_000


def might_offer_mcp(patterns: Sequence[str]) -> bool:
    """Whether any of an agent's tool patterns could match an ``mcp.`` name: if none can,
    the run does not read the workspace's servers at all."""
    for pattern in patterns:
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]  # what a match must start with
        if literal.startswith(PREFIX) or PREFIX.startswith(literal):
            return True
    return False


class McpTool:
    """One tool of one server, for one run."""

    kind = ToolKind.IO
    timeout_s: float | None = None  # ENVERIF_TOOL_TIMEOUT_S

    def __init__(
        self,
        spec: ServerSpec,
        row: orm.McpTool,
        *,
        risk: RiskClass,
        connections: McpConnections,
    ) -> None:
        self.spec = spec
        self.tool = row.name
        self.name = agent_tool_name(spec.name, row.name)
        self.description = row.description or f"{row.name} (MCP server {spec.name})"
        self.parameters: dict[str, Any] = dict(row.input_schema)
        self.risk = risk
        self._connections = connections
        self._validator: Any = None

    def _check(self, args: dict[str, Any]) -> None:
        if self._validator is None:
            cls = jsonschema.validators.validator_for(self.parameters)
            self._validator = cls(self.parameters)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            raise ToolError(
                ModelErrorCode.INVALID_ARGUMENTS, f"{self.name}: {where}: {error.message}"[:1_000]
            )

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        if not isinstance(args, dict):
            raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, "arguments must be an object")
        self._check(args)
        # A READ call batched before its step exists has no step id; it has no side effect
        # to deduplicate either, so it is sent without a key.
        key = None if ctx.step_id is None else str(ctx.step_id)
        try:
            result = await self._connections.call_tool(
                self.spec, self.tool, args, key=key, timeout_s=ctx.settings.tool_timeout_s
            )
        except McpRefused as exc:
            raise ToolError(ModelErrorCode.MCP_ERROR, f"{self.name}: refused here: {exc}") from None
        except McpTooLarge as exc:
            raise ToolError(ModelErrorCode.TOO_LARGE, f"{self.name}: {exc}") from None
        except McpUnavailable as exc:
            raise ToolError(ModelErrorCode.MCP_ERROR, f"{self.name}: {exc}") from None
        except mcp_error() as exc:
            raise ToolError(ModelErrorCode.MCP_ERROR, f"{self.name}: {describe(exc)}") from None
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        content = dumped.get("content", [])
        if result.is_error:
            text = " ".join(
                c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"
            )
            raise ToolError(
                ModelErrorCode.MCP_TOOL_ERROR,
                f"{self.name}: {text.strip()[:MAX_ERROR_TEXT_CHARS] or 'the tool reported an error'}",
            )
        return {"content": content, "structuredContent": dumped.get("structuredContent"), "isError": False}


async def workspace_tools(
    session: AsyncSession, *, workspace_id: int, connections: McpConnections
) -> list[McpTool]:
    """The tools of the workspace's enabled servers, as their last sync stored them."""
    rows = (
        await session.execute(
            select(orm.McpServer, orm.McpTool)
            .join(orm.McpTool, orm.McpTool.server_id == orm.McpServer.id)
            .where(orm.McpServer.workspace_id == workspace_id, orm.McpServer.enabled.is_(True))
            .order_by(orm.McpServer.id, orm.McpTool.name)
        )
    ).all()
    specs: dict[int, ServerSpec] = {}
    tools: list[McpTool] = []
    for server, tool in rows:
        spec = specs.setdefault(server.id, ServerSpec.of_row(server))
        risk = effective_risk(tool.name, tool.annotations, server.tool_risk or {})
        tools.append(McpTool(spec, tool, risk=risk, connections=connections))
    return tools
