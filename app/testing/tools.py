"""Checks for tools (``app.engine.base.Tool``, the ``enverif.tools`` entry-point group).

``check_tool_shape`` is what the registry refuses a plugin for, said as a test failure, plus
what the model and the policy need of the declaration (a description, an object schema of
the arguments). ``check_tool_call`` runs one call the way the engine does (under its
timeout) and holds the outcome to the engine's rules: a result is strict JSON under the
size cap; a refusal is a ``ToolError`` with an upper-snake-case code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.domain.model_errors import CODE_PATTERN
from app.engine.base import Tool, ToolContext, ToolError
from app.engine.tools.registry import check_tool as registry_check
from app.engine.tools.registry import tool_timeout_s
from app.settings import Settings
from app.testing.checks import ConformanceError, require, require_json


@dataclass(frozen=True, slots=True)
class ToolCase:
    """One call to make: its arguments, and either ``error`` (the code the tool must refuse
    with) or, by default, success. ``step_id`` is the idempotency key the engine would pass
    (None only for READ calls run ahead of their step)."""

    args: dict[str, Any]
    error: str | None = None
    step_id: int | None = 1
    context: dict[str, Any] = field(default_factory=dict)  # other ToolContext fields to set


def tool_context(settings: Settings, *, step_id: int | None = 1, **fields: Any) -> ToolContext:
    """A ``ToolContext`` as the engine builds it for an I/O call (no writer)."""
    values: dict[str, Any] = {"workspace_id": 1, "agent_id": 1, "run_id": 1, "step_id": step_id,
                              "settings": settings, **fields}  # fmt: skip
    return ToolContext(**values)


def check_tool_shape(tool: object) -> Tool:
    """The declaration: name, risk, kind, timeout, description and the arguments' schema."""
    try:
        checked = registry_check(tool)
    except TypeError as exc:
        raise ConformanceError(f"the registry would skip this tool: {exc}") from None
    require(checked.description.strip(), f"tool {checked.name!r}: the model needs a description")
    _check_schema(checked.name, checked.parameters)
    return checked


def _check_schema(name: str, schema: dict[str, Any]) -> None:
    where = f"tool {name!r}: parameters"
    require_json(schema, max_bytes=1_000_000, what=f"{where} (a JSON schema)")
    require(schema.get("type") == "object", f"{where} must describe an object (\"type\": \"object\"): "
            "the model's arguments are always one")  # fmt: skip
    properties = schema.get("properties", {})
    require(isinstance(properties, dict), f"{where}.properties must be an object")
    for key, spec in properties.items():
        require(isinstance(spec, dict), f"{where}.properties.{key} must be a schema (an object)")
    required = schema.get("required", [])
    require(isinstance(required, list) and all(isinstance(r, str) for r in required),
            f"{where}.required must be a list of names")  # fmt: skip
    missing = sorted(set(required) - set(properties))
    require(not missing or not properties, f"{where}.required names no property: {', '.join(missing)}")
    extra = schema.get("additionalProperties", True)
    require(isinstance(extra, bool | dict), f"{where}.additionalProperties must be a boolean or a schema")


async def check_tool_call(
    tool: Tool, args: dict[str, Any], *, settings: Settings, ctx: ToolContext | None = None
) -> Any:
    """Call the tool once as the engine does; the result, or the ``ToolError`` it refused
    with (returned, not raised). ``ConformanceError`` for anything the engine would have to
    turn into a failed step on its own: a timeout, a crash, a result that is not storable."""
    ctx = ctx or tool_context(settings)
    limit_s = tool_timeout_s(tool, settings.tool_timeout_s)
    try:
        async with asyncio.timeout(limit_s):
            result = await tool.run(ctx, dict(args))
    except ToolError as exc:
        require(isinstance(exc.message, str), f"tool {tool.name!r}: ToolError.message must be a string")
        require(isinstance(exc.code, str) and CODE_PATTERN.match(exc.code),
                f"tool {tool.name!r}: ToolError code {exc.code!r} must be UPPER_SNAKE_CASE")  # fmt: skip
        return exc
    except TimeoutError:
        raise ConformanceError(
            f"tool {tool.name!r} did not finish within its timeout of {limit_s:g} s"
        ) from None
    except Exception as exc:
        raise ConformanceError(
            f"tool {tool.name!r} raised {type(exc).__name__}: {exc} (refuse with ToolError(code, message); "
            "anything else is a TOOL_FAILED step)"
        ) from exc
    return require_json(result, max_bytes=settings.max_result_bytes, what=f"tool {tool.name!r}: the result")


async def check_tool(
    tool: object, *, cases: Iterable[ToolCase] = (), settings: Settings | None = None
) -> None:
    """``check_tool_shape``, then every case through ``check_tool_call``, each answered as
    the case expects. A STATE tool's cases can only be refusals made before its first write
    (its writes need a run's transaction, ``ToolContext.writer``)."""
    checked = check_tool_shape(tool)
    settings = settings or Settings(http_allow_private_networks=True)
    for case in cases:
        ctx = tool_context(settings, step_id=case.step_id, **case.context)
        outcome = await check_tool_call(checked, case.args, settings=settings, ctx=ctx)
        if case.error is None:
            require(not isinstance(outcome, ToolError),
                    f"tool {checked.name!r} refused {case.args!r}: {getattr(outcome, 'code', '')} "
                    f"{getattr(outcome, 'message', '')}")  # fmt: skip
        else:
            code = outcome.code if isinstance(outcome, ToolError) else None
            require(code == case.error, f"tool {checked.name!r} with {case.args!r}: expected the refusal "
                    f"{case.error}, got {'the result ' + repr(outcome) if code is None else code}")  # fmt: skip


__all__ = ["ToolCase", "check_tool", "check_tool_call", "check_tool_shape", "tool_context"]
