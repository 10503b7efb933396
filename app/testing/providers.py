"""Checks for model providers (``app.engine.base.Provider``, the ``enverif.providers``
entry-point group) and the models they build.

``check_provider`` holds a provider to what the engine relies on: the registry would load it;
``validate`` returns a JSON config it accepts again unchanged (what is stored is checked again
in every worker) and refuses with ``ValidationFailed`` naming ``model`` or ``model.<key>``; it
does no I/O; ``create`` builds a ``Model`` with a ``fast`` flag; and ``next_turn`` answers
with a ``ToolCalls`` of named calls with JSON arguments, or a ``FinalAnswer`` of a JSON
value, and fails only with ``ProviderError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from app.domain.errors import ValidationFailed
from app.engine.base import (
    FinalAnswer,
    HistoryItem,
    Model,
    Provider,
    ProviderError,
    ProviderResources,
    ToolCalls,
    ToolSpec,
    TurnContext,
)
from app.engine.providers import Providers
from app.engine.providers import check_provider as registry_check
from app.settings import Settings
from app.testing.checks import ConformanceError, require, require_json


def turn_context(
    *,
    turn: int = 0,
    history: list[HistoryItem] | None = None,
    tools: list[ToolSpec] | None = None,
    input: Any = None,
    instructions: str = "You are tested for conformance.",
    memories: list[dict[str, Any]] | None = None,
) -> TurnContext:
    """A ``TurnContext`` as the engine builds it for a run's ``turn``."""
    return TurnContext(run_id=1, depth=0, instructions=instructions, input=input, memories=memories or [],
                       tools=tools or [], history=history or [], turn=turn)  # fmt: skip


async def check_provider(
    provider: object,
    *,
    valid: Iterable[Mapping[str, Any]],
    invalid: Iterable[Mapping[str, Any]] = (),
    settings: Settings | None = None,
    contexts: Iterable[TurnContext] | None = None,
    resources: ProviderResources | None = None,
) -> list[Any]:
    """Validate ``valid`` and ``invalid`` configs, build a model of each valid one and ask it
    for a turn in each of ``contexts`` (by default, one first turn with no tools); returns
    the turns in that order. ``resources`` default to a worker's (``Providers``: the guarded
    HTTP client, a template pool), opened and closed here."""
    settings = settings or Settings(http_allow_private_networks=True)
    try:
        checked: Provider = registry_check(provider)
    except TypeError as exc:
        raise ConformanceError(f"the registry would skip this provider: {exc}") from None
    name = checked.name
    for config in invalid:
        _check_refused(checked, config, settings)
    configs = [_check_valid(checked, config, settings) for config in valid]
    require(configs, f"provider {name!r}: give at least one valid config")
    asks = list(contexts) if contexts is not None else [turn_context()]
    if resources is not None:
        return [await _ask(checked, c, resources, asks) for c in configs]
    async with Providers(settings) as shared:
        return [turn for c in configs for turn in await _ask(checked, c, shared.resources, asks)]


def _check_refused(provider: Provider, config: Mapping[str, Any], settings: Settings) -> None:
    try:
        provider.validate(config, settings)
    except ValidationFailed as exc:
        field = exc.field or ""
        require(field == "model" or field.startswith("model."),
                f"provider {provider.name!r}: a refusal must name the field model or model.<key>, "
                f"not {exc.field!r} ({exc.message})")  # fmt: skip
        return
    except Exception as exc:
        raise ConformanceError(
            f"provider {provider.name!r}: validate raised {type(exc).__name__} for {dict(config)!r}; "
            "refuse with ValidationFailed(message, field='model.<key>')"
        ) from exc
    raise ConformanceError(f"provider {provider.name!r} accepted a config it should refuse: {dict(config)!r}")


def _check_valid(provider: Provider, config: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    where = f"provider {provider.name!r}"
    require(
        not inspect.iscoroutinefunction(provider.validate), f"{where}: validate must not be async (no I/O)"
    )
    try:
        stored = provider.validate(config, settings)
    except ValidationFailed as exc:
        raise ConformanceError(f"{where} refused a valid config ({exc.field}: {exc.message})") from None
    require(isinstance(stored, dict), f"{where}: validate must return the config to store (a dict)")
    require(stored.get("provider") == provider.name, f"{where}: the stored config must keep 'provider'")
    require_json(stored, max_bytes=1_000_000, what=f"{where}: the stored config")
    try:
        again = provider.validate(stored, settings)
    except ValidationFailed as exc:
        raise ConformanceError(f"{where} refuses the config it stored ({exc.field}: {exc.message})") from None
    require(again == stored, f"{where}: validating the stored config again changed it (workers re-validate)")
    return stored


async def _ask(
    provider: Provider, config: dict[str, Any], resources: ProviderResources, asks: list[TurnContext]
) -> list[Any]:
    where = f"provider {provider.name!r}"
    model: Model = provider.create(config, resources)
    require(isinstance(getattr(model, "fast", None), bool), f"{where}: the model needs a bool 'fast'")
    require(
        inspect.iscoroutinefunction(getattr(model, "next_turn", None)), f"{where}: next_turn must be async"
    )
    turns = []
    for ctx in asks:
        try:
            turn = await model.next_turn(ctx)
        except ProviderError as exc:
            turns.append(exc)
            continue
        except Exception as exc:
            raise ConformanceError(
                f"{where}: next_turn raised {type(exc).__name__}: {exc} (a model that cannot answer "
                "raises ProviderError; anything else is a crash)"
            ) from exc
        turns.append(_check_turn(where, turn, resources.settings))
    return turns


def _check_turn(where: str, turn: object, settings: Settings) -> Any:
    cap = settings.max_result_bytes
    if isinstance(turn, FinalAnswer):
        require_json(turn.value, max_bytes=cap, what=f"{where}: the final answer")
        return turn
    require(
        isinstance(turn, ToolCalls), f"{where}: next_turn must return ToolCalls or FinalAnswer, not {turn!r}"
    )
    assert isinstance(turn, ToolCalls)
    require(turn.calls, f"{where}: a ToolCalls turn needs at least one call")
    for call in turn.calls:
        require(isinstance(call.tool, str) and call.tool, f"{where}: a call must name its tool")
        require(isinstance(call.args, dict), f"{where}: the arguments of {call.tool!r} must be an object")
        require_json(call.args, max_bytes=cap, what=f"{where}: the arguments of {call.tool!r}")
    return turn


__all__ = ["check_provider", "turn_context"]
