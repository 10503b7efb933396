"""The scripted provider (DESIGN §5): template rendering, turn selection, config validation."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.errors import ValidationFailed
from app.engine.base import FinalAnswer, HistoryItem, ProviderError, ToolCall, ToolCalls, TurnContext
from app.engine.providers import PROVIDERS, provider_for, validate_model_config
from app.engine.providers.openai import OpenAIProvider
from app.engine.providers.scripted import ScriptedProvider, validate_scripted_config
from app.settings import Settings

RUN_INPUT = {"url": "https://example.com/a", "n": 2, "tags": ["x", "y"], "who": {"name": "Ada"}}
MEMORIES = [
    {"key": "tz", "value": "Europe/Paris", "tags": ["prefs"]},
    {"key": "lang", "value": "fr", "tags": []},
]
HISTORY = [
    HistoryItem("http.get", {"url": "https://example.com/a"}, "SUCCEEDED", {"status": 200, "body": "hello"}),
    HistoryItem(
        "webhook.post", {"url": "u", "payload": {}}, "DENIED", {"error": {"code": "DENIED", "message": "-"}}
    ),
    HistoryItem("memory.search", {}, "SUCCEEDED", {"memories": [{"key": "k", "value": "v"}]}),
]


def ctx(turn: int = 0, history: list[HistoryItem] | None = None, run_input: Any = RUN_INPUT) -> TurnContext:
    return TurnContext(
        run_id=41,
        depth=2,
        instructions="be brief",
        input=run_input,
        memories=MEMORIES,
        tools=[],
        history=HISTORY if history is None else history,
        turn=turn,
    )


def cfg(*steps: Any) -> dict[str, Any]:
    return {"provider": "scripted", "steps": list(steps)}


def scripted(*steps: Any) -> ScriptedProvider:
    return ScriptedProvider({"provider": "scripted", "steps": list(steps)})


async def final_of(template: Any, context: TurnContext | None = None) -> Any:
    turn = await scripted({"final": template}).next_turn(context or ctx())
    assert isinstance(turn, FinalAnswer)
    return turn.value


# -- templates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # exactly one expression -> the native value
        ("{{ results[-1] }}", {"memories": [{"key": "k", "value": "v"}]}),
        ("{{ results[0] }}", {"status": 200, "body": "hello"}),
        ("{{ results[0].status }}", 200),
        ("{{ results[1].error.code }}", "DENIED"),
        ("{{ input }}", RUN_INPUT),
        ("{{ input.n + 1 }}", 3),
        ("{{ input.n / 4 }}", 0.5),
        ("{{ input.tags }}", ["x", "y"]),
        ("{{ input.tags | length }}", 2),
        ("{{ results | length }}", 3),
        ("{{ input.n > 1 }}", True),
        ("{{ none }}", None),
        ("{{ memories }}", MEMORIES),
        ("{{ memories[0].value }}", "Europe/Paris"),
        ("{{ memories | map(attribute='key') | list }}", ["tz", "lang"]),
        ("{{ run }}", {"id": 41, "depth": 2}),
        ("{{ run.id }}", 41),
        ("{{ run.depth }}", 2),
        ("{{- run.id -}}", 41),
        ("{{ {'a': input.n, 'b': [run.id]} }}", {"a": 2, "b": [41]}),
        ("{{ (1, 2) }}", [1, 2]),
        ("{{ '}}' }}", "}}"),
        # anything else -> a string
        ("id={{ run.id }}", "id=41"),
        (" {{ run.id }}", " 41"),
        ("{{ run.id }}{{ run.depth }}", "412"),
        ("{{ input.who.name }} has {{ input.tags | length }} tags", "Ada has 2 tags"),
        ("{{ results[-1] | tojson }}", '{"memories": [{"key": "k", "value": "v"}]}'),
        ("{% for t in input.tags %}{{ t }};{% endfor %}", "x;y;"),
        ("{% if input.n > 1 %}many{% else %}one{% endif %}", "many"),
        ("<b>&</b>", "<b>&</b>"),
        ("{{ '<b>&</b>' }}", "<b>&</b>"),  # no autoescape
        ("x {{ '<i>' }}", "x <i>"),
        # no template at all
        ("plain text", "plain text"),
        ("", ""),
        # non-strings pass through untouched
        (7, 7),
        (None, None),
        (True, True),
        # recursion through objects and lists; keys are not templates
        (
            {
                "{{ key }}": "{{ run.id }}",
                "list": ["{{ input.n }}", "n={{ input.n }}", 3, {"deep": "{{ run }}"}],
            },
            {"{{ key }}": 41, "list": [2, "n=2", 3, {"deep": {"id": 41, "depth": 2}}]},
        ),
    ],
)
async def test_final_templates(template: Any, expected: Any) -> None:
    assert await final_of(template) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"url": "{{ input.url }}"}, {"url": "https://example.com/a"}),
        ({"url": "{{ input.url }}?n={{ input.n }}"}, {"url": "https://example.com/a?n=2"}),
        (
            {"url": "https://h.example/x", "payload": {"last": "{{ results[-1] }}", "run": "{{ run.id }}"}},
            {"url": "https://h.example/x", "payload": {"last": HISTORY[-1].result, "run": 41}},
        ),
        ({"items": ["{{ input.tags[0] }}", ["{{ input.tags[1] }}"]]}, {"items": ["x", ["y"]]}),
        (
            {"key": "last-tz", "value": "{{ memories[0].value }}", "importance": 0.5},
            {"key": "last-tz", "value": "Europe/Paris", "importance": 0.5},
        ),
        ({}, {}),
    ],
)
async def test_call_arguments_are_rendered(args: dict[str, Any], expected: dict[str, Any]) -> None:
    turn = await scripted({"call": "tool.x", "args": args}).next_turn(ctx())
    assert turn == ToolCalls([ToolCall("tool.x", expected)])


async def test_results_start_empty_and_follow_the_history() -> None:
    provider = scripted({"final": "{{ results }}"})
    assert await provider.next_turn(ctx(history=[])) == FinalAnswer([])
    assert await provider.next_turn(ctx()) == FinalAnswer([h.result for h in HISTORY])


async def test_rendered_values_do_not_alias_run_state() -> None:
    history = [HistoryItem("t", {}, "SUCCEEDED", {"list": [1]})]
    turn = await scripted({"final": "{{ results[-1] }}"}).next_turn(ctx(history=history))
    assert isinstance(turn, FinalAnswer)
    turn.value["list"].append(2)
    assert history[0].result == {"list": [1]}


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{{ nope }}", "'nope' is undefined"),
        ("x{{ nope }}", "'nope' is undefined"),
        ("{{ results[10] }}", "no element 10"),
        ("{{ input.missing.deeper }}", "missing"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ range(3) }}", "not JSON"),
        ("{{ input.tags.index }}", "not JSON"),
        ("{{ input.tags.append }}", "SecurityError"),
        ("{{ input.tags.append(3) }}", "SecurityError"),  # the sandbox is immutable
        ("{{ ''.__class__ }}", "__class__"),
        ("{{ 'x' * 10000000 }}", "SecurityError"),
        ("{{ 10 ** 100000 }}", "SecurityError"),
        ("{{ {1: 2} }}", "non-string key"),
    ],
)
async def test_template_errors_are_provider_errors(template: str, fragment: str) -> None:
    with pytest.raises(ProviderError) as info:
        await final_of(template)
    message = str(info.value)
    assert "scripted step 0" in message
    assert fragment in message


async def test_template_error_names_the_argument_path() -> None:
    provider = scripted(
        {"calls": [{"call": "a.b", "args": {}}, {"call": "c.d", "args": {"p": ["ok", "{{ nope }}"]}}]}
    )
    with pytest.raises(ProviderError, match=r"args\.p\[1\]"):
        await provider.next_turn(ctx())


# -- turns --------------------------------------------------------------------------------

STEPS: list[Any] = [
    {"call": "http.get", "args": {"url": "{{ input.url }}"}},
    {"calls": [{"call": "memory.search", "args": {"query": "tz"}}, {"call": "agents.list"}]},
    {"final": {"ok": True, "status": "{{ results[0].status }}"}},
]


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        (0, ToolCalls([ToolCall("http.get", {"url": "https://example.com/a"})])),
        (1, ToolCalls([ToolCall("memory.search", {"query": "tz"}), ToolCall("agents.list", {})])),
        (2, FinalAnswer({"ok": True, "status": 200})),
        # past the end: the last result
        (3, FinalAnswer({"memories": [{"key": "k", "value": "v"}]})),
        (99, FinalAnswer({"memories": [{"key": "k", "value": "v"}]})),
    ],
)
async def test_turn_index_picks_the_step(turn: int, expected: Any) -> None:
    assert await scripted(*STEPS).next_turn(ctx(turn=turn)) == expected


@pytest.mark.parametrize(
    ("steps", "history", "expected"),
    [
        ([], [], None),  # no steps, no results
        ([], HISTORY, {"memories": [{"key": "k", "value": "v"}]}),
        ([{"call": "x.y"}], HISTORY[:1], {"status": 200, "body": "hello"}),
        ([{"call": "x.y"}], HISTORY[:2], {"error": {"code": "DENIED", "message": "-"}}),
    ],
)
async def test_steps_running_out_answer_the_last_result(
    steps: list[Any], history: list[HistoryItem], expected: Any
) -> None:
    turn = await scripted(*steps).next_turn(ctx(turn=len(steps), history=history))
    assert turn == FinalAnswer(expected)


async def test_provider_is_stateless() -> None:
    provider = scripted(*STEPS)
    first = await provider.next_turn(ctx(turn=0))
    await provider.next_turn(ctx(turn=2))
    assert await provider.next_turn(ctx(turn=0)) == first


# -- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"provider": "scripted", "steps": []},
        {"provider": "scripted", "steps": STEPS},
        {"provider": "scripted", "steps": [{"call": "agents.list"}]},
        {"provider": "scripted", "steps": [{"final": None}]},
        {"provider": "scripted", "steps": [{"final": [1, {"a": "{{ run.id }}"}]}]},
        {"provider": "scripted", "steps": [{"final": "{% raw %}{{ not rendered }}{% endraw %}"}]},
    ],
)
def test_valid_configs(config: dict[str, Any]) -> None:
    assert validate_scripted_config(config) == config
    assert validate_model_config(config) == config


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ([], "must be an object"),
        ({"provider": "openai", "steps": []}, "must be 'scripted'"),
        ({"provider": "scripted"}, "steps must be a list"),
        ({"provider": "scripted", "steps": {"final": 1}}, "steps must be a list"),
        ({"provider": "scripted", "steps": [], "model": "x"}, "unknown keys: model"),
        (cfg("final"), "steps[0] must be an object"),
        (cfg({}), "exactly one of 'call', 'calls' or 'final' (found: none)"),
        (cfg({"final": 1}, {"call": "a", "final": 2}), "steps[1] needs exactly one"),
        (cfg({"call": "a", "calls": []}), "found: call, calls"),
        (cfg({"call": "a", "arg": {}}), "unknown keys: arg"),
        (cfg({"call": ""}), "steps[0].call must be a tool name"),
        (cfg({"call": 3}), "call must be a tool name"),
        (cfg({"call": "a", "args": []}), "steps[0].args must be an object"),
        (cfg({"call": "a", "args": "{{ input }}"}), "args must be an object"),
        (cfg({"calls": []}), "non-empty list"),
        (cfg({"calls": {"call": "a"}}), "non-empty list"),
        (cfg({"calls": [{"call": "a"}, {"args": {}}]}), "calls[1].call must be"),
        (cfg({"calls": [{"call": "a", "args": 1}]}), "calls[0].args must be an object"),
        (cfg({"final": 1, "note": "x"}), "only the key 'final'"),
        (cfg({"final": "{{ results[-1] }"}), "steps[0].final: template does not parse"),
        (cfg({"final": "{% if x %}open"}), "template does not parse"),
        (cfg({"call": "a", "args": {"u": ["ok", "{{ 1 + }}"]}}), "args.u[1]: template does not parse"),
        (cfg({"final": "{{ x | no_such_filter }}"}), "no_such_filter"),
        (cfg(*[{"final": 1}] * 1001), "at most 1000"),
    ],
)
def test_invalid_configs(config: Any, fragment: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_scripted_config(config)
    assert info.value.field == "model"
    assert fragment in info.value.message


# -- dispatch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [{"provider": "gemini"}, {"steps": []}, {"provider": None}, "scripted", None]
)
def test_unknown_provider_names_the_allowed_ones(config: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_model_config(config)
    assert info.value.field == "model"
    assert PROVIDERS == ("scripted", "openai")
    if isinstance(config, dict):
        assert "scripted, openai" in info.value.message


def test_provider_for_dispatches() -> None:
    settings = Settings()
    assert isinstance(provider_for({"provider": "scripted", "steps": []}, settings), ScriptedProvider)
    assert isinstance(provider_for({"provider": "openai", "model": "m"}, settings), OpenAIProvider)


@pytest.mark.parametrize("config", [{"provider": "nope"}, {"provider": "scripted", "steps": [{}]}])
def test_provider_for_refuses_bad_stored_configs(config: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        provider_for(config, Settings())
    assert info.value.field == "model"
