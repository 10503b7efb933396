"""The tool registry: which tools exist in this process, and which ones an agent offers.

An agent's ``tools`` field is a list of glob patterns (``["http.*", "webhook.post"]``); the
model is offered every registered tool whose name matches one of them. Patterns naming no
registered tool simply match nothing, so an agent can list a plugin that is not installed.

Tools come from three places: the built-ins here, ``extra`` tools the caller adds (the
engine's database-backed tools, so this module stays free of DB code), and plugins from the
``enverif.tools`` entry-point group. Adding a tool is one module with a class that satisfies
``app.engine.base.Tool`` plus one entry point; a broken plugin is logged and skipped so it can
never keep the server from starting.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from app.domain.mcp import PREFIX as MCP_PREFIX
from app.domain.policy import RiskClass, tool_matches
from app.engine.base import Tool, ToolKind, ToolSpec
from app.engine.tools.agents import AgentsListTool, DelegateTool
from app.engine.tools.http import HttpGetTool, WebhookPostTool
from app.engine.tools.memory import memory_tools
from app.settings import Settings

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "enverif.tools"
# Dotted names of letters, digits, '_' and '-': no glob characters, and short enough to map
# onto provider function names (OpenAI allows 64 characters).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
MAX_TOOL_NAME_CHARS = 64


def check_tool(tool: object) -> Tool:
    """Return ``tool`` if it satisfies the ``Tool`` protocol, else raise ``TypeError``."""
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not TOOL_NAME.match(name) or len(name) > MAX_TOOL_NAME_CHARS:
        raise TypeError(f"tool name {name!r} must be a dotted name of letters, digits, '_' or '-'")
    if not isinstance(getattr(tool, "risk", None), RiskClass):
        raise TypeError(f"tool {name!r}: risk must be a RiskClass")
    if not isinstance(getattr(tool, "description", None), str):
        raise TypeError(f"tool {name!r}: description must be a string")
    if not isinstance(getattr(tool, "parameters", None), dict):
        raise TypeError(f"tool {name!r}: parameters must be a JSON schema object")
    if not inspect.iscoroutinefunction(getattr(tool, "run", None)):
        raise TypeError(f"tool {name!r}: run must be an async method")
    if not isinstance(getattr(tool, "kind", ToolKind.IO), ToolKind):
        raise TypeError(f"tool {name!r}: kind must be a ToolKind")
    timeout_s = getattr(tool, "timeout_s", None)
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or timeout_s <= 0):  # fmt: skip
        raise TypeError(f"tool {name!r}: timeout_s must be a positive number of seconds or None")
    return tool  # type: ignore[return-value]


# The two attributes a plugin may leave out (they came after the first plugins), read in one
# place: a tool without ``kind`` does plain I/O, one without ``timeout_s`` gets the default.
def tool_kind(tool: Tool) -> ToolKind:
    kind: ToolKind = getattr(tool, "kind", ToolKind.IO)
    return kind


def tool_timeout_s(tool: Tool, default_s: float) -> float:
    timeout_s: float | None = getattr(tool, "timeout_s", None)
    return float(timeout_s) if timeout_s is not None else default_s


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    # Trimmed and case-folded on both sides, as policy rules are (app.domain.policy.tool_key).
    return any(tool_matches(name, pattern) for pattern in patterns)


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool. Names are unique: a second tool may not shadow the first."""
        check_tool(tool)
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        """This registry and ``tools`` (a run's MCP tools, ``app.engine.tools.mcp``), as a new
        registry: the worker's own is shared by every run and stays as it is. A name already
        taken keeps its tool."""
        merged = ToolRegistry()
        merged._tools = dict(self._tools)
        for tool in tools:
            merged._tools.setdefault(tool.name, tool)
        return merged

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def offered(self, patterns: Sequence[str], name: str) -> bool:
        """Whether an agent with these patterns offers ``name`` (models may ask for others)."""
        return name in self._tools and matches_any(name, patterns)

    def specs(self, patterns: Sequence[str]) -> list[ToolSpec]:
        """The tools an agent offers, sorted by name so prompts are stable."""
        return [
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters, risk=t.risk)
            for name, t in sorted(self._tools.items())
            if matches_any(name, patterns)
        ]

    def risk_of(self, name: str) -> RiskClass:
        """The risk class of a registered tool; ``KeyError`` for unknown names."""
        tool = self._tools.get(name)
        if tool is None:
            raise KeyError(f"no tool named {name!r}")
        return tool.risk

    async def aclose(self) -> None:
        """Close every tool that holds resources (HTTP clients and the like)."""
        for tool in self._tools.values():
            close = getattr(tool, "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception:
                log.exception("closing tool %s failed", tool.name)


def load_plugin(entry_point: EntryPoint, settings: Settings) -> Tool:
    """Load one ``enverif.tools`` entry point: a Tool instance, or a factory taking settings."""
    obj: Any = entry_point.load()
    if not isinstance(obj, type):
        try:
            return check_tool(obj)
        except TypeError:
            if not callable(obj):
                raise
    # A class or a function: call it with the settings and expect a tool back.
    return check_tool(obj(settings))


def default_registry(settings: Settings, *, extra: Iterable[Tool] = ()) -> ToolRegistry:
    """Built-ins, then ``extra`` (the engine's own tools), then plugins.

    A plugin that fails to load, is not a valid tool, or reuses a taken name is logged and
    skipped: plugins must not be able to replace a built-in (say, a ``http.get`` without the
    private-network guard) nor to take the server down.
    """
    builtins = [
        HttpGetTool(settings),
        WebhookPostTool(settings),
        AgentsListTool(settings),
        DelegateTool(settings),
        *memory_tools(),
    ]
    registry = ToolRegistry([*builtins, *extra])
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            tool = load_plugin(entry_point, settings)
            if tool.name.startswith(MCP_PREFIX):
                raise ValueError(f"{MCP_PREFIX}* names belong to the workspace's MCP servers")
            registry.register(tool)
        except Exception:
            log.exception("skipping tool plugin %r (%s)", entry_point.name, entry_point.value)
            continue
        log.info("loaded tool plugin %s from %s", tool.name, entry_point.value)
    return registry


async def registered_tool_names(settings: Settings) -> frozenset[str]:
    """The name of every tool a worker of this installation registers (built-ins and the
    plugins that load), for checks outside the engine: a policy rule must match one."""
    return frozenset(await registered_tool_risks(settings))


async def registered_tool_risks(settings: Settings) -> dict[str, RiskClass]:
    """Every tool a worker of this installation registers, with its risk class (the policy
    preview decides by it, as the engine does)."""
    registry = default_registry(settings)
    try:
        return {name: registry.risk_of(name) for name in registry.names()}
    finally:
        await registry.aclose()


async def registered_tool_specs(settings: Settings) -> dict[str, ToolSpec]:
    """Every registered tool's spec by name (for checking arguments outside the engine: an
    operator's edit of a call)."""
    registry = default_registry(settings)
    try:
        return {spec.name: spec for spec in registry.specs(["*"])}
    finally:
        await registry.aclose()
