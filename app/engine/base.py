"""Plug points of the run loop: model providers and tools.

The loop (``app/engine/loop.py``) owns persistence; providers and tools never touch the
database. A provider turns the run's history into the next turn; a tool turns arguments into
a JSON result. Both are Protocols so third parties can add their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from app.domain.policy import RiskClass


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """A turn that asks for one or more tool calls (executed in order, results in call order)."""

    calls: list[ToolCall]


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    value: Any


Turn = ToolCalls | FinalAnswer


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One finished (or refused) tool call as the model sees it."""

    tool: str
    args: dict[str, Any]
    status: str  # StepStatus value
    result: Any  # what the model sees: the tool result, or {"error": {...}} for failures/denials


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments
    risk: RiskClass


@dataclass(frozen=True, slots=True)
class TurnContext:
    run_id: int
    depth: int
    instructions: str
    input: Any
    memories: list[dict[str, Any]]  # [{key, value, tags}]
    tools: list[ToolSpec]  # the tools this agent is offered
    history: list[HistoryItem] = field(default_factory=list)
    turn: int = 0  # index of the turn being asked for (0 = first)


class Provider(Protocol):
    # True for a provider that is local and quick (scripted): the loop then computes the next
    # turn before committing the previous result, and batches allowed READ calls. False for
    # one that goes over the network (openai): results are recorded before each call.
    fast: bool

    async def next_turn(self, ctx: TurnContext) -> Turn: ...


class ProviderError(Exception):
    """The model could not produce a turn (after retries): the run fails with this message."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    workspace_id: int
    agent_id: int
    run_id: int
    # The idempotency key for side-effecting tools. None for READ calls that the loop runs
    # before their step row exists (see engine.loop: batched reads have no side effects).
    step_id: int | None
    settings: Any  # app.settings.Settings


class Tool(Protocol):
    name: str
    description: str
    risk: RiskClass
    parameters: dict[str, Any]

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any: ...


class ToolError(Exception):
    """A tool's refusal or failure, shown to the model as ``{"error": {"code", "message"}}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_result(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}
