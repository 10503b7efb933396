"""The demo workspace of ``enverif dev``: its agents, first memory and schedule are data
(``demo.toml``); this module reads them and writes them into the database.

Seeding is idempotent: the ``demo`` workspace and its agents are reused when present (the
agents are put back to their demo definition, whose URLs carry this start's port; so is the
``crm`` MCP server's url, and its tools are listed from ``app.dev.crm`` in-process), and a
fresh admin token is minted on every start because tokens are stored hashed and cannot be
shown again. Memories and schedules are written once and then left as the demo's runs and
operators changed them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.clock import utcnow
from app.db.orm import Agent, McpServer, McpTool, Memory, Schedule, Workspace
from app.dev import crm
from app.domain.actors import SYSTEM
from app.domain.agent_versions import VERSIONED_FIELDS, changes_configuration
from app.domain.agents import (
    DEFAULT_MEMORY_MAX_CHARS,
    DEFAULT_MEMORY_MAX_ITEMS,
    AgentStatus,
    OverlapPolicy,
    Role,
)
from app.domain.budgets import parse_budget
from app.domain.errors import Conflict
from app.domain.mcp import Transport
from app.domain.policy import validate_policy
from app.domain.schedules import next_fire_at
from app.services import auth, memories
from app.services.agents import version_row
from app.services.mcp_servers import replace_tools, usable_tools

DEMO_WORKSPACE = "demo"
DEV_TOKEN_NAME = "enverif dev"
DEMO_FILE = Path(__file__).with_name("demo.toml")
# Stands for this dev stack's base URL in demo.toml's strings.
BASE_URL = "$BASE_URL"


@dataclass(frozen=True)
class DemoAgent:
    name: str
    description: str
    instructions: str
    model: dict[str, Any]
    tools: list[str]
    policy: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)  # docs/concepts/budgets.md


@dataclass(frozen=True)
class DemoMcpServer:
    name: str
    url: str


@dataclass(frozen=True)
class DemoMemory:
    agent: str
    key: str
    value: str
    tags: list[str]
    importance: float


@dataclass(frozen=True)
class DemoSchedule:
    agent: str
    cron: str
    timezone: str
    input: Any
    enabled: bool
    overlap_policy: str
    budget: dict[str, Any] | None = None


@cache
def _demo_data() -> dict[str, Any]:
    with DEMO_FILE.open("rb") as f:
        return tomllib.load(f)


def _with_base_url(value: Any, base_url: str) -> Any:
    if isinstance(value, str):
        return value.replace(BASE_URL, base_url)
    if isinstance(value, list):
        return [_with_base_url(v, base_url) for v in value]
    if isinstance(value, dict):
        return {k: _with_base_url(v, base_url) for k, v in value.items()}
    return value


def demo_agents(base_url: str) -> list[DemoAgent]:
    """The demo agents; ``base_url`` is where this dev stack answers (its /dev routes)."""
    return [DemoAgent(**_with_base_url(spec, base_url)) for spec in _demo_data()["agents"]]


def demo_mcp_servers(base_url: str) -> list[DemoMcpServer]:
    return [DemoMcpServer(**_with_base_url(spec, base_url)) for spec in _demo_data().get("mcp_servers", [])]


def demo_memories() -> list[DemoMemory]:
    return [DemoMemory(**spec) for spec in _demo_data().get("memories", [])]


def demo_schedules() -> list[DemoSchedule]:
    return [DemoSchedule(**spec) for spec in _demo_data().get("schedules", [])]


@dataclass(frozen=True)
class DemoSeed:
    workspace_id: int
    workspace: str
    token: str
    agents: list[str]


async def seed_demo(
    sessionmaker: async_sessionmaker[AsyncSession], *, base_url: str, reset: bool = False
) -> DemoSeed:
    """Create or reuse the demo workspace, mint a fresh admin token, and (re)write the agents."""
    if reset:
        async with sessionmaker() as session:
            # Every table hangs off workspaces with ON DELETE CASCADE: runs, steps, events,
            # memories, tokens and schedules of the demo go with it.
            await session.execute(delete(Workspace).where(Workspace.name == DEMO_WORKSPACE))
            await session.commit()

    token: str | None = None
    async with sessionmaker() as session:
        workspace = await session.scalar(select(Workspace).where(Workspace.name == DEMO_WORKSPACE))
    if workspace is None:
        try:
            async with sessionmaker() as session:
                workspace, token = await auth.create_workspace(session, name=DEMO_WORKSPACE)
        except Conflict:
            pass  # another `enverif dev` on this database created it just now: reuse it
    if token is None:
        async with sessionmaker() as session:
            token = await auth.create_token(
                session,
                workspace_name=DEMO_WORKSPACE,
                role=Role.ADMIN,
                # Token names are unique per workspace and every start mints one: stamp it.
                name=f"{DEV_TOKEN_NAME} {utcnow():%Y-%m-%d %H:%M:%S.%f}",
            )
            workspace = await session.scalar(select(Workspace).where(Workspace.name == DEMO_WORKSPACE))
    assert workspace is not None

    specs = demo_agents(base_url)
    async with sessionmaker() as session, session.begin():
        for server in demo_mcp_servers(base_url):
            await _upsert_mcp_server(session, workspace_id=workspace.id, spec=server)
    async with sessionmaker() as session:
        for spec in specs:
            await _upsert_agent(session, workspace_id=workspace.id, spec=spec)
        await session.commit()
    async with sessionmaker() as session, session.begin():
        await _seed_memories(session, workspace_id=workspace.id)
        await _seed_schedules(session, workspace_id=workspace.id)
    return DemoSeed(
        workspace_id=workspace.id, workspace=DEMO_WORKSPACE, token=token, agents=[s.name for s in specs]
    )


async def _upsert_agent(session: AsyncSession, *, workspace_id: int, spec: DemoAgent) -> None:
    policy = validate_policy(spec.policy)
    wanted: dict[str, Any] = {
        "description": spec.description,
        "instructions": spec.instructions,
        "status": AgentStatus.ACTIVE.value,
        "model": spec.model,
        "tools": spec.tools,
        "policy": policy,
        "budget": parse_budget(spec.budget) or None,
        "memory_max_items": DEFAULT_MEMORY_MAX_ITEMS,
        "memory_max_chars": DEFAULT_MEMORY_MAX_CHARS,
    }
    agent = await _agent_named(session, workspace_id=workspace_id, name=spec.name)
    now = utcnow()
    if agent is None:
        agent = Agent(
            workspace_id=workspace_id, name=spec.name, created_at=now, updated_at=now, version=1, **wanted
        )
        session.add(agent)
        await session.flush()
        # Like every agent write, with its version: the demo's runs are pinned to one
        # (docs/concepts/versions.md).
        session.add(version_row(agent, SYSTEM, now))
        return
    current = {key: getattr(agent, key) for key in VERSIONED_FIELDS}
    changed = False
    for key, value in wanted.items():
        if getattr(agent, key) != value:
            setattr(agent, key, value)
            changed = True
    if changed:
        agent.updated_at = now
        if changes_configuration(current, wanted):
            agent.version += 1
            session.add(version_row(agent, SYSTEM, now))


async def _upsert_mcp_server(session: AsyncSession, *, workspace_id: int, spec: DemoMcpServer) -> None:
    """The server at this start's url, with the tools its definitions list; ``enabled`` and
    ``toolRisk`` stay as an operator left them."""
    if spec.name != crm.SERVER_NAME:
        raise ValueError(f"demo.toml: the dev stack serves no MCP server named {spec.name!r}")
    tools, skipped = usable_tools(spec.name, await crm.tool_list())
    assert not skipped, skipped  # the demo's own tools are all offerable
    now = utcnow()
    row = await session.scalar(
        select(McpServer).where(McpServer.workspace_id == workspace_id, McpServer.name == spec.name)
    )
    if row is None:
        row = McpServer(
            workspace_id=workspace_id, name=spec.name, transport=Transport.STREAMABLE_HTTP.value, url=spec.url,
            command=None, enabled=True, headers={}, tool_risk={}, created_at=now,
        )  # fmt: skip
        session.add(row)
    row.url, row.last_synced_at, row.last_error, row.updated_at = spec.url, now, None, now
    await session.flush()
    await session.execute(delete(McpTool).where(McpTool.server_id == row.id))
    replace_tools(session, row, tools)


async def _agent_named(session: AsyncSession, *, workspace_id: int, name: str) -> Agent | None:
    return await session.scalar(select(Agent).where(Agent.workspace_id == workspace_id, Agent.name == name))


async def _seed_memories(session: AsyncSession, *, workspace_id: int) -> None:
    for spec in demo_memories():
        agent = await _agent_named(session, workspace_id=workspace_id, name=spec.agent)
        if agent is None:
            continue
        present = await session.scalar(
            select(Memory.id).where(Memory.agent_id == agent.id, Memory.key == spec.key)
        )
        if present is not None:
            continue
        # Neither a run nor a token wrote it: its first revision names nobody.
        await memories.remember(
            session,
            workspace_id=workspace_id,
            agent_id=agent.id,
            key=spec.key,
            value=spec.value,
            tags=spec.tags,
            importance=spec.importance,
            now=utcnow(),
            max_value_chars=len(spec.value),
        )


async def _seed_schedules(session: AsyncSession, *, workspace_id: int) -> None:
    """Each demo schedule, created while its agent has no schedule at all: an operator's
    changes to it are kept."""
    for spec in demo_schedules():
        agent = await _agent_named(session, workspace_id=workspace_id, name=spec.agent)
        if agent is None:
            continue
        if (
            await session.scalar(select(Schedule.id).where(Schedule.agent_id == agent.id).limit(1))
            is not None
        ):
            continue
        now = utcnow()
        session.add(
            Schedule(
                workspace_id=workspace_id,
                agent_id=agent.id,
                cron=spec.cron,
                timezone=spec.timezone,
                input=spec.input,
                enabled=spec.enabled,
                overlap_policy=OverlapPolicy(spec.overlap_policy).value,
                budget=parse_budget(spec.budget) or None,
                next_fire_at=next_fire_at(spec.cron, spec.timezone, after=now),
                last_fired_at=None,
                created_at=now,
                updated_at=now,
            )
        )
