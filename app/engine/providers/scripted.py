"""The ``scripted`` provider: a fixed list of turns, for demos, tests and fixed procedures.

Config (docs/extending/providers.md)::

    {"provider": "scripted", "steps": [TURN, ...]}
    TURN = {"call": "tool.name", "args": {...}}
         | {"calls": [{"call": "tool.name", "args": {...}}, ...]}     # parallel calls
         | {"final": VALUE}
    any TURN may add "usage": {"input_tokens": N, "output_tokens": M,
                               "cache_read_tokens": N, "cache_write_tokens": N}
    (what the turn reports it consumed, so tests and demos can spend: docs/concepts/budgets.md)

Every string inside ``args`` and ``final`` (recursively through objects and lists; keys are
left alone) is a Jinja2 template, rendered in an immutable sandbox with:

    input     the run input
    results   tool results so far, in call order (``results[-1]`` is the latest)
    memories  the injected memories, ``[{key, value, tags}]``
    run       ``{"id", "depth"}``

A string that is exactly one expression, ``"{{ expr }}"`` with nothing around it, renders
to the expression's *native* value: ``{"final": "{{ results[-1] }}"}`` yields the result
object itself, ``"{{ input.n + 1 }}"`` a number. Anything else renders to a string. Native
values must be JSON (objects, lists, strings, numbers, booleans, null); referencing an
undefined name is an error rather than an empty string.

Templates render in the worker's pool of render subprocesses (``templates.py``) under an
output cap and a time budget, in the capped sandbox of ``sandbox.py``; a turn whose strings
hold no ``{`` skips the renderer. The provider keeps no state: the loop passes the index of the turn it wants (``ctx.turn``).
When the steps run out, the answer is the last tool result (``None`` if there was none).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateSyntaxError

from app.domain.errors import ValidationFailed
from app.engine.base import (
    FinalAnswer,
    ProviderResources,
    TemplateRenderer,
    ToolCall,
    ToolCalls,
    Turn,
    TurnContext,
    Usage,
)
from app.engine.providers.sandbox import CappedSandbox, compile_template, has_templates

if TYPE_CHECKING:
    from app.settings import Settings

PROVIDER = "scripted"
MAX_STEPS = 1_000
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# A turn cannot report more than this many tokens of one kind: far above any real model's
# context, low enough that sums over a tree stay exact in a BIGINT column.
MAX_USAGE_TOKENS = 10**9

# Validation compiles (never renders) templates in the API process. Compiling evaluates
# constant sub-expressions, which is why this is the capped sandbox too.
_VALIDATION_ENV = CappedSandbox()


# -- validation ---------------------------------------------------------------------------


def _invalid(message: str, key: str = "steps") -> ValidationFailed:
    return ValidationFailed(message, field=f"model.{key}" if key else "model")


@functools.lru_cache(maxsize=1024)
def _template_error(source: str) -> tuple[str | None, int] | None:
    """Why ``source`` does not parse (message, line), or None. Remembered per source: the
    worker validates an agent's config again for every run it executes, and compiling is
    most of what that costs (about 1 ms a template, profiled)."""
    try:
        compile_template(_VALIDATION_ENV, source)
    except TemplateSyntaxError as exc:
        return exc.message, exc.lineno
    return None


def _check_templates(value: Any, where: str) -> None:
    if isinstance(value, str):
        error = _template_error(value) if "{" in value else None  # plain text always parses
        if error is not None:
            message, line = error
            raise _invalid(f"{where}: template does not parse: {message} (line {line})")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _invalid(f"{where}: keys must be strings")
            _check_templates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_templates(item, f"{where}[{i}]")
    elif not (value is None or isinstance(value, bool | int | float)):
        raise _invalid(f"{where}: {type(value).__name__} is not JSON")


def _check_call(call: object, where: str) -> None:
    if not isinstance(call, dict):
        raise _invalid(f"{where} must be an object {{call, args}}")
    unknown = sorted(set(call) - {"call", "args"})
    if unknown:
        raise _invalid(f"{where} has unknown keys: {', '.join(map(str, unknown))} (allowed: call, args)")
    name = call.get("call")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(f"{where}.call must be a tool name")
    args = call.get("args", {})
    if not isinstance(args, dict):
        raise _invalid(f"{where}.args must be an object")
    _check_templates(args, f"{where}.args")


def _check_usage(usage: object, where: str) -> None:
    if not isinstance(usage, dict):
        raise _invalid(f"{where} must be an object {{input_tokens, output_tokens}}")
    unknown = sorted(set(usage) - set(USAGE_KEYS))
    if unknown:
        raise _invalid(
            f"{where} has unknown keys: {', '.join(map(str, unknown))} (allowed: {', '.join(USAGE_KEYS)})"
        )
    for key, count in usage.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_USAGE_TOKENS:
            raise _invalid(f"{where}.{key} must be a whole number from 0 to {MAX_USAGE_TOKENS}")


def _usage(turn: Mapping[str, Any]) -> Usage | None:
    usage = turn.get("usage")
    return None if usage is None else Usage(**usage)


def validate_scripted_config(cfg: object) -> dict[str, Any]:
    """Check a scripted model config; returns a copy. Raises ``ValidationFailed`` naming
    ``model.steps`` (or the key that is wrong)."""
    if not isinstance(cfg, dict):
        raise _invalid("model must be an object", key="")
    if cfg.get("provider") != PROVIDER:
        raise _invalid(f"model.provider must be {PROVIDER!r}", key="provider")
    unknown = sorted(set(cfg) - {"provider", "steps"})
    if unknown:
        message = f"model has unknown keys: {', '.join(map(str, unknown))} (allowed: provider, steps)"
        raise _invalid(message, key=str(unknown[0]))
    steps = cfg.get("steps")
    if not isinstance(steps, list):
        raise _invalid("model.steps must be a list of turns")
    if len(steps) > MAX_STEPS:
        raise _invalid(f"model.steps has {len(steps)} turns; at most {MAX_STEPS} are allowed")
    for i, turn in enumerate(steps):
        where = f"model.steps[{i}]"
        if not isinstance(turn, dict):
            raise _invalid(f"{where} must be an object")
        if "usage" in turn:
            _check_usage(turn["usage"], f"{where}.usage")
            turn = {k: v for k, v in turn.items() if k != "usage"}
        kinds = [k for k in ("call", "calls", "final") if k in turn]
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise _invalid(f"{where} needs exactly one of 'call', 'calls' or 'final' (found: {found})")
        if kinds == ["call"]:
            _check_call(turn, where)
        elif kinds == ["calls"]:
            if set(turn) != {"calls"}:
                raise _invalid(f"{where}: a 'calls' turn has only the key 'calls'")
            calls = turn["calls"]
            if not isinstance(calls, list) or not calls:
                raise _invalid(f"{where}.calls must be a non-empty list of {{call, args}}")
            for j, call in enumerate(calls):
                _check_call(call, f"{where}.calls[{j}]")
        else:
            if set(turn) != {"final"}:
                raise _invalid(f"{where}: a 'final' turn has only the key 'final'")
            _check_templates(turn["final"], f"{where}.final")
    return copy.deepcopy(cfg)


# -- the provider -------------------------------------------------------------------------


class ScriptedProvider:
    """The provider (the class: ``validate``, ``create``) and a run's model (an instance)."""

    name = PROVIDER
    # Local and quick (no network): the loop may compute the next turn inside its transaction.
    fast: bool = True

    def __init__(self, config: dict[str, Any], renderer: TemplateRenderer, *, checked: bool = False) -> None:
        """``checked``: ``config`` is what ``validate`` returned (so it is not checked again)."""
        self._steps: list[dict[str, Any]] = (config if checked else validate_scripted_config(config))["steps"]
        self._renderer = renderer

    @staticmethod
    def validate(config: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
        return validate_scripted_config(config)

    @classmethod
    def create(cls, config: dict[str, Any], resources: ProviderResources) -> ScriptedProvider:
        return cls(config, resources.templates, checked=True)

    async def next_turn(self, ctx: TurnContext) -> Turn:
        results = [item.result for item in ctx.history]
        if ctx.turn >= len(self._steps):
            return FinalAnswer(copy.deepcopy(results[-1]) if results else None)
        turn = self._steps[ctx.turn]
        where = f"scripted step {ctx.turn}"
        if "final" in turn:
            (value,) = await self._render([(turn["final"], f"{where}: final")], results, ctx)
            return FinalAnswer(value, usage=_usage(turn))
        calls = turn["calls"] if "calls" in turn else [turn]
        args = await self._render([(call.get("args", {}), f"{where}: args") for call in calls], results, ctx)
        return ToolCalls(
            [ToolCall(tool=call["call"], args=a) for call, a in zip(calls, args, strict=True)],
            usage=_usage(turn),
        )

    async def _render(self, items: list[tuple[Any, str]], results: list[Any], ctx: TurnContext) -> list[Any]:
        if not any(has_templates(tree) for tree, _ in items):
            return [copy.deepcopy(tree) for tree, _ in items]  # plain data: no round trip
        variables = {
            "input": ctx.input,
            "results": results,
            "memories": ctx.memories,
            "run": {"id": ctx.run_id, "depth": ctx.depth},
        }
        return await self._renderer.render(items, variables)
