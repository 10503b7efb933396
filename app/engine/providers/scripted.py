"""The ``scripted`` provider: a fixed list of turns, for demos, tests and fixed procedures.

Config (DESIGN §5)::

    {"provider": "scripted", "steps": [TURN, ...]}
    TURN = {"call": "tool.name", "args": {...}}
         | {"calls": [{"call": "tool.name", "args": {...}}, ...]}     # parallel calls
         | {"final": VALUE}

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

The provider keeps no state: the loop passes the index of the turn it wants (``ctx.turn``).
When the steps run out, the answer is the last tool result (``None`` if there was none).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.domain.errors import ValidationFailed
from app.engine.base import FinalAnswer, ProviderError, ToolCall, ToolCalls, Turn, TurnContext

PROVIDER = "scripted"
MAX_STEPS = 1_000
# Bounds what a template can build with `*`/`**`: the sandbox limits range() but not these.
MAX_SEQUENCE_LEN = 1_000_000
MAX_EXPONENT = 1_000


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, op: str, left: Any, right: Any) -> Any:
        if op == "*":
            for seq, n in ((left, right), (right, left)):
                if (
                    isinstance(seq, str | list | tuple)
                    and isinstance(n, int)
                    and len(seq) * n > MAX_SEQUENCE_LEN
                ):
                    raise SecurityError(f"'*' would build a sequence longer than {MAX_SEQUENCE_LEN}")
        if op == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"exponents above {MAX_EXPONENT} are not allowed")
        return super().call_binop(context, op, left, right)


# Autoescape stays off: the output is JSON data and tool arguments, not HTML.
_ENV = _Sandbox(undefined=StrictUndefined, autoescape=False)


# -- templates ----------------------------------------------------------------------------


def _single_expression(source: str) -> str | None:
    """The inner expression when ``source`` is exactly ``{{ expr }}``, else ``None``."""
    if not (source.startswith("{{") and source.endswith("}}")):
        return None
    try:
        tree = _ENV.parse(source)
    except TemplateSyntaxError:
        return None
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return None  # e.g. "{{ a }} and {{ b }}"
    if isinstance(body[0].nodes[0], nodes.TemplateData):
        return None
    inner = source[2:-2]
    # Whitespace-control markers belong to the delimiters ("{{- x -}}"), not the expression.
    if inner[:1] in ("-", "+"):
        inner = inner[1:]
    if inner[-1:] in ("-", "+"):
        inner = inner[:-1]
    return inner


def _compile(source: str) -> Callable[[dict[str, Any]], Any]:
    """Compile one string; raises ``TemplateSyntaxError`` for templates that don't parse."""
    if "{" not in source:
        return lambda _variables: source  # plain text: nothing to render
    expression = _single_expression(source)
    if expression is not None:
        compiled = _ENV.compile_expression(expression, undefined_to_none=False)
        return lambda variables: compiled(**variables)
    template = _ENV.from_string(source)
    return lambda variables: template.render(variables)


def _to_json(value: Any, where: str) -> Any:
    """Check a rendered value is JSON and return a plain copy (no aliasing of run state)."""
    if isinstance(value, Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming what was undefined
        raise ProviderError(f"{where} is undefined")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return str(value)  # drops str subclasses such as Markup
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ProviderError(f"{where} has a non-string key {key!r}; JSON keys are strings")
            out[key] = _to_json(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise ProviderError(
        f"{where} rendered to a {type(value).__name__}, which is not JSON "
        "(try a filter such as |list or |string)"
    )


def _render(value: Any, variables: dict[str, Any], where: str) -> Any:
    if isinstance(value, str):
        try:
            rendered = _compile(value)(variables)
        except ProviderError:
            raise
        except Exception as exc:  # template errors, sandbox refusals, errors in expressions
            raise ProviderError(f"{where}: template {value!r} failed: {type(exc).__name__}: {exc}") from exc
        try:
            return _to_json(rendered, where)
        except ProviderError:
            raise
        except Exception as exc:  # UndefinedError raised by str(StrictUndefined)
            raise ProviderError(f"{where}: template {value!r} failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(value, dict):
        return {key: _render(item, variables, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_render(item, variables, f"{where}[{i}]") for i, item in enumerate(value)]
    return copy.deepcopy(value)


# -- validation ---------------------------------------------------------------------------


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed(message, field="model")


def _check_templates(value: Any, where: str) -> None:
    if isinstance(value, str):
        try:
            _compile(value)
        except TemplateSyntaxError as exc:
            raise _invalid(f"{where}: template does not parse: {exc.message} (line {exc.lineno})") from exc
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


def validate_scripted_config(cfg: object) -> dict[str, Any]:
    """Check a scripted model config; returns a copy. Raises ``ValidationFailed(field="model")``."""
    if not isinstance(cfg, dict):
        raise _invalid("model must be an object")
    if cfg.get("provider") != PROVIDER:
        raise _invalid(f"model.provider must be {PROVIDER!r}")
    unknown = sorted(set(cfg) - {"provider", "steps"})
    if unknown:
        raise _invalid(f"model has unknown keys: {', '.join(map(str, unknown))} (allowed: provider, steps)")
    steps = cfg.get("steps")
    if not isinstance(steps, list):
        raise _invalid("model.steps must be a list of turns")
    if len(steps) > MAX_STEPS:
        raise _invalid(f"model.steps has {len(steps)} turns; at most {MAX_STEPS} are allowed")
    for i, turn in enumerate(steps):
        where = f"model.steps[{i}]"
        if not isinstance(turn, dict):
            raise _invalid(f"{where} must be an object")
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
    # Pure and local (no I/O): the loop may compute the next turn inside its transaction.
    fast = True

    def __init__(self, config: dict[str, Any]) -> None:
        self._steps: list[dict[str, Any]] = validate_scripted_config(config)["steps"]

    async def next_turn(self, ctx: TurnContext) -> Turn:
        results = [item.result for item in ctx.history]
        if ctx.turn >= len(self._steps):
            return FinalAnswer(copy.deepcopy(results[-1]) if results else None)
        variables = {
            "input": ctx.input,
            "results": results,
            "memories": ctx.memories,
            "run": {"id": ctx.run_id, "depth": ctx.depth},
        }
        turn = self._steps[ctx.turn]
        where = f"scripted step {ctx.turn}"
        if "final" in turn:
            return FinalAnswer(_render(turn["final"], variables, f"{where}: final"))
        calls = turn["calls"] if "calls" in turn else [turn]
        return ToolCalls(
            [
                ToolCall(tool=call["call"], args=_render(call.get("args", {}), variables, f"{where}: args"))
                for call in calls
            ]
        )
