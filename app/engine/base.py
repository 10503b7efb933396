"""Plug points of the run loop: model providers and tools.

The loop (``app/engine/loop.py``) owns persistence; providers and tools never touch the
database. A provider turns the run's history into the next turn; a tool turns arguments into
a JSON result. Both are Protocols so third parties can add their own.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from app.domain.policy import RiskClass
from app.domain.run_events import EventType

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


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


class ToolKind(enum.StrEnum):
    """How a tool runs (and so what a crash can do to it)."""

    # Plain I/O (HTTP and the like): runs outside any transaction; its step row (and so its
    # idempotency key) exists before it runs, and its result is recorded after.
    IO = "IO"
    # Changes Enverif's own state (memory writes, delegation): runs inside its step's fenced
    # transaction through ``ToolContext.writer`` and commits together with its result and
    # events, so a crash leaves neither, and a worker that lost its lease writes nothing.
    STATE = "STATE"


class RunWriter(Protocol):
    """What a STATE tool writes through: the open, fenced transaction of its step. Never
    begin, commit or roll back ``session``; raising (``ToolError`` or anything else) undoes
    the tool's writes and events, and the step fails with the error."""

    @property
    def session(self) -> AsyncSession: ...
    @property
    def now(self) -> datetime: ...  # the database's clock
    @property
    def workspace_id(self) -> int: ...
    @property
    def agent_id(self) -> int: ...
    @property
    def run_id(self) -> int: ...
    @property
    def step_id(self) -> int: ...

    @property
    def run(self) -> Any: ...  # the locked ``app.db.orm.Run`` row (depth, policy chain)

    @property
    def agents(self) -> Mapping[str, Any]:
        """Agents of this workspace (``app.db.orm.Agent``) by the exact name a call gave,
        read before this transaction when the loop could (``agents.delegate``); a name
        missing here may still exist: look it up through ``session``."""

    def emit(self, type: EventType, *, payload: dict[str, Any]) -> None:
        """Append an event about this run to its tree's log, in this transaction."""

    async def start_child(self, *, agent: Any, task: str, input: dict[str, Any]) -> int:
        """Create a QUEUED child run of ``agent`` (an ``app.db.orm.Agent`` of this workspace)
        for this step, enqueued after commit; returns its id. The tool then returns
        ``ChildStarted(id)`` and the step waits for the child's outcome."""


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """A STATE tool's result that says: this step waits for child run ``run_id``; its
    outcome ``{status, result, error, runId}`` becomes the step's result when it ends."""

    run_id: int


@dataclass(frozen=True, slots=True)
class ToolContext:
    workspace_id: int
    agent_id: int
    run_id: int
    # The idempotency key for side-effecting tools. None for READ calls that the loop runs
    # before their step row exists (see engine.loop: batched reads have no side effects).
    step_id: int | None
    settings: Any  # app.settings.Settings
    writer: RunWriter | None = None  # STATE tools only


class Tool(Protocol):
    name: str
    description: str
    risk: RiskClass
    parameters: dict[str, Any]
    # Optional for plugins written before they existed (see registry.tool_kind/tool_timeout_s):
    # ``kind`` defaults to IO, ``timeout_s`` to ENVERIF_TOOL_TIMEOUT_S.
    kind: ToolKind
    timeout_s: float | None

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any: ...


class ToolError(Exception):
    """A tool's refusal or failure, shown to the model as ``{"error": {"code", "message"}}``.

    ``redacted_arguments``: the call's arguments as they may be kept, when the tool refused
    them for holding a secret; a STATE tool's step then stores these instead, in the
    transaction that records the refusal."""

    def __init__(self, code: str, message: str, *, redacted_arguments: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.redacted_arguments = redacted_arguments

    def as_result(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}
