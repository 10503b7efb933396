"""``agents.list`` and ``agents.delegate`` (docs/concepts/delegation.md): STATE tools, run inside their step's
fenced transaction, so a child run exists exactly when its parent's step says it does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.orm import Agent
from app.domain import input_schema
from app.domain.delegation import Refusal, Target, check_delegation, delegable, parse_request
from app.domain.errors import ValidationFailed
from app.domain.model_errors import ModelErrorCode
from app.domain.policy import RiskClass
from app.engine.base import ChildStarted, ToolContext, ToolError, ToolKind
from app.settings import Settings

DELEGATE = "agents.delegate"
MAX_LISTED = 200


def _ancestors(run: Any) -> list[int]:
    """Agent ids from the root down to this run (its snapshotted policy chain)."""
    return [int(link["agent_id"]) for link in run.policy_chain if "agent_id" in link]


def _target(agent: Agent) -> Target:
    return Target(id=agent.id, name=agent.name, status=agent.status)


class AgentsListTool:
    name = "agents.list"
    description = "List the agents this run may delegate to (name and description)."
    risk = RiskClass.READ
    kind = ToolKind.STATE
    timeout_s: float | None = None
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        assert ctx.writer is not None
        rows = await ctx.writer.session.scalars(
            select(Agent).where(Agent.workspace_id == ctx.workspace_id).order_by(Agent.name).limit(MAX_LISTED)
        )
        agents = {a.id: a for a in rows}
        offered = delegable([_target(a) for a in agents.values()], _ancestors(ctx.writer.run))
        return {"agents": [{"name": t.name, "description": agents[t.id].description} for t in offered]}


class DelegateTool:
    name = DELEGATE
    description = (
        "Delegate a task to another agent: starts a child run of that agent and waits for it. "
        "The result is the child's outcome {status, result, error, runId}."
    )
    risk = RiskClass.INTERNAL_WRITE
    kind = ToolKind.STATE
    # Its only write is the child's INSERT, its last act (``TreeTx.create_run``): a call
    # that fails has written nothing, so no savepoint (two statements a delegation) is needed.
    needs_savepoint = False
    timeout_s: float | None = None
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "description": "name of the agent to delegate to"},
            "task": {"type": "string", "description": "what the child should do"},
            "input": {"type": "object", "description": "extra input for the child run"},
        },
        "required": ["agent", "task"],
        "additionalProperties": False,
    }

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        writer = ctx.writer
        assert writer is not None
        request = parse_request(args)
        if isinstance(request, Refusal):
            raise ToolError(request.code, request.message)
        # Looked up in this run's workspace only: another workspace's agent is unknown here.
        # Usually the loop read it already, before the transaction (``read_targets``).
        agent = writer.agents.get(request.agent)
        if agent is None:
            agent = await writer.session.scalar(
                select(Agent).where(Agent.workspace_id == ctx.workspace_id, Agent.name == request.agent)
            )
        refusal = check_delegation(
            name=request.agent,
            target=None if agent is None else _target(agent),
            ancestors=_ancestors(writer.run),
            child_depth=writer.run.depth + 1,
            max_depth=self.settings.max_delegation_depth,
        )
        if refusal is not None:
            raise ToolError(refusal.code, refusal.message)
        assert agent is not None
        try:
            # The child's input meets its agent's inputSchema as a startRun's would.
            input_schema.check_input(agent.input_schema, request.child_input())
        except ValidationFailed as exc:
            raise ToolError(
                ModelErrorCode.INVALID_ARGUMENTS,
                f"agent {agent.name!r} does not take this input: {exc.message}",
            ) from None
        child_id = await writer.start_child(agent=agent, task=request.task, input=request.child_input())
        return ChildStarted(child_id)


async def read_targets(
    sessionmaker: async_sessionmaker[AsyncSession], workspace_id: int, calls: Iterable[Mapping[str, Any]]
) -> dict[str, Agent]:
    """The agents that these ``agents.delegate`` calls (their arguments) name, by the name
    as given, read in one query before the transaction that runs the calls: not one lookup
    per call while the tree's lock is held. Names the database matches only loosely (a
    case-insensitive collation) are left out, and the tool looks them up itself."""
    names = set()
    for args in calls:
        request = parse_request(args)
        if not isinstance(request, Refusal):
            names.add(request.agent)
    if not names:
        return {}
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(Agent).where(Agent.workspace_id == workspace_id, Agent.name.in_(sorted(names)))
        )
        return {agent.name: agent for agent in rows if agent.name in names}
