"""Plug points of the run loop: model providers and tools.

The loop (``app/engine/loop.py``) owns persistence; providers and tools never touch the
database. A provider (``Provider``, the ``enverif.providers`` entry-point group) checks an
agent's model config and builds a ``Model`` for a run, which turns the run's history into
the next turn; a tool (``Tool``, the ``enverif.tools`` group) turns arguments into a JSON
result. All are Protocols so third parties can add their own; ``enverif.testing`` checks
that a plugin keeps to them.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from app.domain.engine_rules import HistoryItem as HistoryItem  # part of the plugin API
from app.domain.model_errors import ModelErrorCode, model_error
from app.domain.policy import RiskClass
from app.domain.provider_errors import ProviderErrorCode
from app.domain.run_events import EventType

if TYPE_CHECKING:
    import httpx
    import httpx2
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.settings import Settings


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """What one model turn consumed, as its provider reported it:
    the remote providers read it from the vendor's response, the scripted one from a turn's
    ``"usage"``. Cost is not here: it is computed from the deployment's prices."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """A turn that asks for one or more tool calls (executed in order, results in call order)."""

    calls: list[ToolCall]
    usage: Usage | None = None  # None: the model reported nothing


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    value: Any
    usage: Usage | None = None


# What a model answers. Facts about the turn as a whole (``usage``) are keyword fields with a
# default on both kinds, so a model that does not report them is unchanged.
Turn = ToolCalls | FinalAnswer


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
    # Live output (``runOutput``): a model that produces text as it goes awaits this with
    # each new piece, in order. Not stored: the turn's result still carries the whole text.
    # None when nobody listens (a test, a script): a model then need not stream at all.
    on_text: Callable[[str], Awaitable[None]] | None = None


class Model(Protocol):
    """One agent's configured model, as a provider built it for a run (``Provider.create``).

    ``next_turn`` is asked outside any transaction and may be interrupted (the run's lease
    was lost); it raises ``ProviderError`` when it cannot produce a turn. A model that streams
    text as it comes passes each piece to ``TurnContext.on_text`` (optional: a model that
    does not stream never calls it)."""

    # True for a model that is local and quick (scripted): the loop then computes the next
    # turn before committing the previous result, and batches allowed READ calls. False for
    # one that goes over the network (openai): results are recorded before each call.
    fast: bool

    async def next_turn(self, ctx: TurnContext) -> Turn: ...


class TemplateRenderer(Protocol):
    """Renders scripted templates: (template tree, where) pairs with the run's variables
    (``app.engine.providers.templates.TemplatePool`` in a worker)."""

    async def render(self, items: list[tuple[Any, str]], variables: dict[str, Any]) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class ProviderResources:
    """What every model of a worker shares for the worker's lifetime, created at start-up and
    closed at shutdown (``app.engine.providers.Providers``): a provider makes no clients of
    its own."""

    settings: Settings
    # The guarded client (``app.engine.net``): private addresses refused where the socket
    # opens, no cookies. A remote model sends every request through it.
    http: httpx.AsyncClient
    templates: TemplateRenderer  # the scripted provider's render pool
    # The same guard on httpx2, for SDKs built on it (the ``openai`` and ``anthropic`` SDKs).
    sdk_http: httpx2.AsyncClient | None = None


class Provider(Protocol):
    """A model provider: what an ``enverif.providers`` entry point names (an object, or a
    class with a static ``validate`` and a class method ``create``).

    ``validate`` runs when an agent is written (the API) and again when a run starts (the
    worker: the deployment's settings may have narrowed since), and does no I/O. It returns
    the config to store, or raises ``app.domain.errors.ValidationFailed`` with
    ``field="model.<key>"`` naming what is wrong. ``create`` builds a run's model from a
    config ``validate`` returned."""

    name: str  # the model config's "provider": [a-z][a-z0-9_-]{0,31}

    def validate(self, config: Mapping[str, Any], settings: Settings) -> dict[str, Any]: ...

    def create(self, config: dict[str, Any], resources: ProviderResources) -> Model: ...


class ProviderError(Exception):
    """The model could not produce a turn (after retries): the run fails with this message
    and ``code`` (a ``ProviderErrorCode``, or a plugin's own in upper
    snake case). The message must not quote what a remote end sent."""

    def __init__(
        self, message: str, *, code: ProviderErrorCode | str = ProviderErrorCode.PROVIDER_FAILED
    ) -> None:
        super().__init__(message)
        self.code = str(code)


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
    """A tool's refusal or failure, shown to the model as ``{"error": {"code", "message"}}``
    (``app.domain.model_errors``). Built-in tools use a ``ModelErrorCode``; a plugin may use
    a code of its own, in upper snake case (``CRM_DOWN``).

    ``redacted_arguments``: the call's arguments as they may be kept, when the tool refused
    them for holding a secret; a STATE tool's step then stores these instead, in the
    transaction that records the refusal."""

    def __init__(
        self, code: ModelErrorCode | str, message: str, *, redacted_arguments: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.redacted_arguments = redacted_arguments

    def as_result(self) -> dict[str, Any]:
        return model_error(self.code, self.message)
