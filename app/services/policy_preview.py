"""What would be decided: the effective decision for one tool along a run path of agents,
as a new run down that path would see it (docs/concepts/policy.md, "Previewing a decision").

The same pure code the engine decides by (``app.domain.policy``): each agent's current
policy, root first, the strictest wins; the risk class is the registered tool's, or an MCP
tool's as its last sync and the server's ``toolRisk`` say.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import orm
from app.domain.errors import ValidationFailed
from app.domain.mcp import PREFIX as MCP_PREFIX
from app.domain.mcp import effective_risk
from app.domain.policy import (
    AgentDecision,
    EffectiveDecision,
    PolicyLink,
    RiskClass,
    decide_for_agent,
    effective_decision,
    parse_policy,
)
from app.engine.tools.registry import registered_tool_risks
from app.services.auth import Principal
from app.services.reads import get_owned
from app.services.runtime import Runtime

MAX_PATH_AGENTS = 10  # deeper than any tree the delegation depth cap allows


@dataclass(frozen=True, slots=True)
class LinkDecision:
    agent_id: int
    agent_name: str
    decision: AgentDecision


@dataclass(frozen=True, slots=True)
class Preview:
    tool: str
    risk: RiskClass
    effective: EffectiveDecision
    links: list[LinkDecision]  # root first, each agent's own decision


async def preview(rt: Runtime, principal: Principal, *, tool: str, agent_ids: list[int]) -> Preview:
    """The decision a call of ``tool`` would get in a run of ``agent_ids[-1]`` delegated down
    ``agent_ids`` (root first). Readable by every role: it changes nothing."""
    tool = tool.strip()
    if not agent_ids:
        raise ValidationFailed("a run path names at least one agent", field="agentIds")
    if len(agent_ids) > MAX_PATH_AGENTS:
        raise ValidationFailed(f"a run path has at most {MAX_PATH_AGENTS} agents", field="agentIds")
    async with rt.read_sessionmaker() as session:
        agents = [
            await get_owned(session, orm.Agent, workspace_id=principal.workspace_id, pk=pk)
            for pk in agent_ids
        ]
        if tool.startswith(MCP_PREFIX):
            risk = await _mcp_risk(session, principal.workspace_id, tool)
        else:
            risk = await _registered_risk(rt, tool)
    chain = [PolicyLink(agent.name, parse_policy(agent.policy)) for agent in agents]
    return Preview(
        tool=tool,
        risk=risk,
        effective=effective_decision(chain, tool, risk),
        links=[
            LinkDecision(agent.id, link.agent_name, decide_for_agent(link.policy, tool, risk))
            for agent, link in zip(agents, chain, strict=True)
        ],
    )


async def _registered_risk(rt: Runtime, tool: str) -> RiskClass:
    if rt.tool_risks is None:
        rt.tool_risks = await registered_tool_risks(rt.settings)
    risk = rt.tool_risks.get(tool)
    if risk is None:
        raise ValidationFailed(f"no registered tool is called {tool!r}", field="tool")
    return risk


async def _mcp_risk(session: AsyncSession, workspace_id: int, tool: str) -> RiskClass:
    server_name, _, tool_name = tool.removeprefix(MCP_PREFIX).partition(".")
    stmt = (
        select(orm.McpTool, orm.McpServer)
        .join(orm.McpServer, orm.McpServer.id == orm.McpTool.server_id)
        .where(
            orm.McpServer.workspace_id == workspace_id,
            orm.McpServer.name == server_name,
            orm.McpTool.name == tool_name,
        )
    )
    found = (await session.execute(stmt)).first()
    if found is None:
        raise ValidationFailed(f"no MCP server of this workspace lists a tool {tool!r}", field="tool")
    mcp_tool, server = found
    return effective_risk(mcp_tool.name, mcp_tool.annotations, server.tool_risk or {})
