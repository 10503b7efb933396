"""The scripted provider (docs/extending/providers.md): template rendering, turn selection, config validation.

Templates render through a real ``TemplatePool`` (its subprocesses are local, no services):
one for the whole module, on a module-scoped event loop, as a worker keeps one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import ValidationFailed
from app.engine.base import FinalAnswer, HistoryItem, ProviderError, ToolCall, ToolCalls, TurnContext, Usage
from app.engine.providers import BUILTIN_PROVIDERS, Providers, templates, validate_model_config
from app.engine.providers.openai import OpenAIProvider
from app.engine.providers.sandbox import CappedSandbox, Renderer, RenderError, is_linear
from app.engine.providers.scripted import ScriptedProvider, validate_scripted_config
from app.engine.providers.templates import TemplatePool
from app.settings import Settings

# Async tests share the module's event loop, which the pools are bound to.
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

SETTINGS = Settings()
POOLS: dict[str, TemplatePool] = {}


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _pools() -> AsyncIterator[None]:
    """The pool the helpers use ("pool": linear templates in-process, as in a worker), and
    one that sends every template to a subprocess, to check both paths agree."""
    POOLS["pool"] = TemplatePool(size=2, timeout_ms=200, max_output_bytes=1_048_576)
    POOLS["subprocess"] = TemplatePool(
        size=1, timeout_ms=2_000, max_output_bytes=1_048_576, inline_linear=False
    )
    yield
    for pool in POOLS.values():
        await pool.aclose()


RUN_INPUT = {"url": "http://127.0.0.1:8080/site/a", "n": 2, "tags": ["x", "y"], "who": {"name": "Ada"}}
MEMORIES = [
    {"key": "tz", "value": "Europe/Paris", "tags": ["prefs"]},
    {"key": "lang", "value": "fr", "tags": []},
]
HISTORY = [
    HistoryItem(
        "http.get", {"url": "http://127.0.0.1:8080/site/a"}, "SUCCEEDED", {"status": 200, "body": "hello"}
    ),
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


def scripted(*steps: Any, pool: str = "pool") -> ScriptedProvider:
    return ScriptedProvider({"provider": "scripted", "steps": list(steps)}, POOLS[pool])


async def final_of(template: Any, context: TurnContext | None = None, *, pool: str = "pool") -> Any:
    turn = await scripted({"final": template}, pool=pool).next_turn(context or ctx())
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
        ("{{ '{:*^7}'.format(run.id) }}", "**41***"),  # '*' as fill in str.format is fine
        ("{{ '%5.1f|%-3s|%03d' % (1.25, 'a', 7) }}", "  1.2|a  |007"),
        ("{{ '%(n)s' % input }}", "2"),
        # anything else -> a string
        ("id={{ run.id }}", "id=41"),
        (" {{ run.id }}", " 41"),
        ("{{ run.id }}{{ run.depth }}", "412"),
        ("{{ input.who.name }} has {{ input.tags | length }} tags", "Ada has 2 tags"),
        ("{{ results[-1] | tojson }}", '{"memories": [{"key": "k", "value": "v"}]}'),
        ("{% for t in input.tags %}{{ t }};{% endfor %}", "x;y;"),
        ("{% if input.n > 1 %}many{% else %}one{% endif %}", "many"),
        # fromjson reads a tool's text answer (an http.get body) as JSON
        ("{{ ('{\"a\": [1, 2]}' | fromjson).a }}", [1, 2]),
        (
            '{{ \'[{"d": "x", "s": 80}, {"d": "y", "s": 9}]\' | fromjson | selectattr(\'s\', \'ge\', 70) | map(attribute=\'d\') | list }}',
            ["x"],
        ),
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
@pytest.mark.parametrize("pool", ["pool", "subprocess"])
@MODULE_LOOP
async def test_final_templates(template: Any, expected: Any, pool: str) -> None:
    assert await final_of(template, pool=pool) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"url": "{{ input.url }}"}, {"url": "http://127.0.0.1:8080/site/a"}),
        ({"url": "{{ input.url }}?n={{ input.n }}"}, {"url": "http://127.0.0.1:8080/site/a?n=2"}),
        (
            {
                "url": "http://127.0.0.1:8080/hook",
                "payload": {"last": "{{ results[-1] }}", "run": "{{ run.id }}"},
            },
            {"url": "http://127.0.0.1:8080/hook", "payload": {"last": HISTORY[-1].result, "run": 41}},
        ),
        ({"items": ["{{ input.tags[0] }}", ["{{ input.tags[1] }}"]]}, {"items": ["x", ["y"]]}),
        (
            {"key": "last-tz", "value": "{{ memories[0].value }}", "importance": 0.5},
            {"key": "last-tz", "value": "Europe/Paris", "importance": 0.5},
        ),
        ({}, {}),
    ],
)
@MODULE_LOOP
async def test_call_arguments_are_rendered(args: dict[str, Any], expected: dict[str, Any]) -> None:
    turn = await scripted({"call": "tool.x", "args": args}).next_turn(ctx())
    assert turn == ToolCalls([ToolCall("tool.x", expected)])


@MODULE_LOOP
async def test_results_start_empty_and_follow_the_history() -> None:
    provider = scripted({"final": "{{ results }}"})
    assert await provider.next_turn(ctx(history=[])) == FinalAnswer([])
    assert await provider.next_turn(ctx()) == FinalAnswer([h.result for h in HISTORY])


@MODULE_LOOP
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
        ("{{ 'not json' | fromjson }}", "Expecting value"),
        ("{{ 'NaN' | fromjson }}", "NaN is not JSON"),
        ("{{ 3 | fromjson }}", "fromjson takes a string"),
    ],
)
@pytest.mark.parametrize("pool", ["pool", "subprocess"])
@MODULE_LOOP
async def test_template_errors_are_provider_errors(template: str, fragment: str, pool: str) -> None:
    with pytest.raises(ProviderError) as info:
        await final_of(template, pool=pool)
    message = str(info.value)
    assert "scripted step 0" in message
    assert fragment in message


@MODULE_LOOP
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


@MODULE_LOOP
async def test_a_turn_reports_its_usage() -> None:
    from app.engine.base import Usage

    model = scripted({"call": "a", "usage": {"input_tokens": 12, "output_tokens": 3}}, {"final": 1})
    assert (await model.next_turn(ctx(turn=0))).usage == Usage(input_tokens=12, output_tokens=3)
    assert (await model.next_turn(ctx(turn=1))).usage is None


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        (0, ToolCalls([ToolCall("http.get", {"url": "http://127.0.0.1:8080/site/a"})])),
        (1, ToolCalls([ToolCall("memory.search", {"query": "tz"}), ToolCall("agents.list", {})])),
        (2, FinalAnswer({"ok": True, "status": 200})),
        # past the end: the last result
        (3, FinalAnswer({"memories": [{"key": "k", "value": "v"}]})),
        (99, FinalAnswer({"memories": [{"key": "k", "value": "v"}]})),
    ],
)
@MODULE_LOOP
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
@MODULE_LOOP
async def test_steps_running_out_answer_the_last_result(
    steps: list[Any], history: list[HistoryItem], expected: Any
) -> None:
    turn = await scripted(*steps).next_turn(ctx(turn=len(steps), history=history))
    assert turn == FinalAnswer(expected)


@MODULE_LOOP
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
        {"provider": "scripted", "steps": [{"call": "a", "usage": {"input_tokens": 5, "output_tokens": 0}}]},
        {"provider": "scripted", "steps": [{"final": 1, "usage": {"cache_read_tokens": 7}}]},
    ],
)
def test_valid_configs(config: dict[str, Any]) -> None:
    assert validate_scripted_config(config) == config
    assert validate_model_config(config, SETTINGS) == config


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
        (cfg({"final": 1, "note": "x"}), "only the keys 'final' and 'usage'"),
        (cfg({"final": "{{ results[-1] }"}), "steps[0].final: template does not parse"),
        (cfg({"final": "{% if x %}open"}), "template does not parse"),
        (cfg({"call": "a", "args": {"u": ["ok", "{{ 1 + }}"]}}), "args.u[1]: template does not parse"),
        (cfg({"final": "{{ x | no_such_filter }}"}), "no_such_filter"),
        (cfg(*[{"final": 1}] * 1001), "at most 1000"),
        (cfg({"final": 1, "usage": 5}), "steps[0].usage must be an object"),
        (cfg({"final": 1, "usage": {"tokens": 5}}), "usage has unknown keys: tokens"),
        (
            cfg({"final": 1, "usage": {"input_tokens": -1}}),
            "usage.input_tokens must be an integer between 0 and",
        ),
        (
            cfg({"final": 1, "usage": {"input_tokens": 1.5}}),
            "usage.input_tokens must be an integer between 0 and",
        ),
        (
            cfg({"final": 1, "usage": {"output_tokens": True}}),
            "usage.output_tokens must be an integer between 0 and",
        ),
    ],
)
def test_invalid_configs(config: Any, fragment: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_scripted_config(config)
    # The field names the key that is wrong; a step's problem is the steps'.
    expected = {
        "must be an object": "model",
        "must be 'scripted'": "model.provider",
        "unknown keys: model": "model.model",
    }
    assert info.value.field == expected.get(fragment, "model.steps")
    assert fragment in info.value.message


# -- dispatch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [{"provider": "gemini"}, {"steps": []}, {"provider": None}, "scripted", None]
)
def test_unknown_provider_names_the_allowed_ones(config: Any) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_model_config(config, SETTINGS)
    assert info.value.code == "VALIDATION_FAILED"
    assert info.value.field == ("model.provider" if isinstance(config, dict) else "model")
    assert [p.name for p in BUILTIN_PROVIDERS] == ["scripted", "openai", "anthropic"]
    if isinstance(config, dict):
        assert "scripted, openai, anthropic" in info.value.message


@MODULE_LOOP
async def test_providers_dispatch_and_mark_fast() -> None:
    async with Providers(SETTINGS) as providers:
        scripted_provider = providers.for_model({"provider": "scripted", "steps": []})
        openai_provider = providers.for_model({"provider": "openai", "model": "m"})
    assert isinstance(scripted_provider, ScriptedProvider) and scripted_provider.fast is True
    assert isinstance(openai_provider, OpenAIProvider) and openai_provider.fast is False


@pytest.mark.parametrize(
    "config",
    [
        {"provider": "nope"},
        {"provider": "scripted", "steps": [{}]},
        # a stored row from before the key allowlist: refused before anything is sent
        {"provider": "openai", "model": "m", "api_key_env": "HOME"},
    ],
)
@MODULE_LOOP
async def test_providers_refuse_bad_stored_configs(config: Any) -> None:
    async with Providers(SETTINGS) as providers:
        with pytest.raises(ValidationFailed) as info:
            providers.for_model(config)
    assert info.value.field is not None and info.value.field.startswith("model")


# -- caps and the time budget -------------------------------------------------------------

# Each of these once built far more than the caps (or ran for seconds) inside the worker.
BOMBS = [
    ("{{ 'a'|center(20000000) }}", "center would be longer than 1048576"),
    ("{{ '%20000000s'|format(1) }}", "format width 20000000"),
    ("{{ '{:>20000000}'.format(1) }}", "format width 20000000"),
    ("{{ '{:.20000000f}'.format(1.0) }}", "format width 20000000"),
    ("{{ '%20000000s' % 1 }}", "format width 20000000"),
    ("{{ '%.20000000f' % 1.0 }}", "format width 20000000"),
    ("{{ '%*s' % (20000000, 1) }}", "'*' widths are not allowed"),
    (
        "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "namespace value would be longer",
    ),
    (
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
        "would be longer than 1048576",
    ),
    ("{{ ((2**1000)**1000)**10 }}", "integer above 64000 bits"),
    ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}", "bits"),
    ("{{ 'a'.center(2000000000) }}", "center() would be longer"),
    ("{{ ('a'|attr('center'))(2000000000) }}", "center() would be longer"),
    ("{{ (1).to_bytes(2000000000, 'big') }}", "to_bytes() would be longer"),
    ("{{ ('a' * 1000000)|replace('a', 'aa') }}", "replace would be longer"),
    ("{{ ('a' * 1000000).replace('a', 'aa') }}", "replace() would be longer"),
    ("{{ range(100000)|join('a' * 100) }}", "join would be longer"),
    ("{{ [1, 2]|batch(1000000000, 0)|list }}", "batch would be longer"),
    ("{{ 'ab'|indent(100000000) }}", "indent would be longer"),
    ("{{ 'a\tb'.expandtabs(100000000) }}", "expandtabs() would be longer"),
    ("{{ lipsum(100000) }}", "'lipsum' is undefined"),
    ("{{ 5|round(-1000000000) }}", "round() precision is limited"),
    ("{{ 5|round(1000000000, 'floor') }}", "round() precision is limited"),
    # output: counted while generated, and the rendered value as JSON
    (
        "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}",
        "rendered text",
    ),
    ("{{ ['a' * 600000, 'a' * 600000] }}", "rendered output is larger than 1048576"),
]


@MODULE_LOOP
@pytest.mark.parametrize(("template", "fragment"), BOMBS)
@pytest.mark.parametrize("pool", ["pool", "subprocess"])
async def test_size_caps_stop_templates_early(template: str, fragment: str, pool: str) -> None:
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        await final_of(template, pool=pool)
    assert fragment in str(info.value)
    # Refused by a cap, before the time budget would have killed it (slack: busy CI).
    assert time.monotonic() - started < 3


CPU_LOOPS = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ range(100000)|map('string')|map('center', 1000)|map('length')|sum * 0 }}"
    "{% for i in range(100000) %}{% for j in range(1000) %}{{ '' }}{% endfor %}{% endfor %}",
]


@MODULE_LOOP
@pytest.mark.parametrize("template", CPU_LOOPS)
async def test_cpu_loops_are_killed_at_the_budget_and_the_pool_recovers(template: str) -> None:
    pool = POOLS["pool"]
    await final_of("{% for t in input.tags %}{{ t }}{% endfor %}")  # a warm child: no start-up below
    killed = pool.killed
    started = time.monotonic()
    with pytest.raises(ProviderError, match="longer than the template budget of 200 ms"):
        await final_of(template)
    elapsed = time.monotonic() - started
    # 200 ms of CPU, at most 2 s of wall-clock time on a busy machine; without the budget: hours.
    assert 0.2 <= elapsed < 3, elapsed
    assert pool.killed == killed + 1
    # The killed child was replaced: templates keep rendering.
    assert await final_of("{% for t in input.tags %}{{ t }};{% endfor %}") == "x;y;"


@MODULE_LOOP
async def test_a_slow_template_does_not_hold_up_another_render() -> None:
    """Rendering never blocks the event loop: a quick render finishes while another burns.

    A pool of its own with a 2 s budget, so the window is wide even on a busy machine."""
    pool = TemplatePool(size=2, timeout_ms=2_000, max_output_bytes=1_048_576)
    loop = {"final": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}
    quick = {"final": "{% for t in input.tags %}{{ t }}{% endfor %}"}
    try:
        # Warm: two renders at once, so both children are started before the timing below.
        await asyncio.gather(*(ScriptedProvider(cfg(quick), pool).next_turn(ctx()) for _ in range(2)))
        slow = asyncio.ensure_future(ScriptedProvider(cfg(loop), pool).next_turn(ctx()))
        await asyncio.sleep(0.05)  # the slow one holds a child now
        started = time.monotonic()
        assert await ScriptedProvider(cfg(quick), pool).next_turn(ctx()) == FinalAnswer("xy")
        quick_s = time.monotonic() - started
        assert not slow.done(), "the quick render should finish while the slow one still burns"
        with pytest.raises(ProviderError, match="template budget of 2000 ms"):
            await slow
        assert quick_s < 1.0
    finally:
        await pool.aclose()


@pytest.mark.parametrize(
    ("template", "linear"),
    [
        ("plain", True),
        ("{{ input.url }}", True),
        ("{{ results[-1].body }}", True),
        ("a {{ input.n + 1 }} {{ input.tags|length }}", True),
        ("{% if input.n > 1 %}{{ run.id }}{% else %}x{% endif %}", True),
        ("{{ input.who.name|default('x')|upper }}", True),
        ("{{ input.n|round(-1000000000) }}", False),  # round(5, -10**9) computes 10**10**9
        ("{% for t in input.tags %}{{ t }}{% endfor %}", False),
        ("{{ 'a' ~ input.url }}", False),
        ("{{ 'a' * 3 }}", False),
        ("{{ 2 ** 3 }}", False),
        ("{{ '%s' % 1 }}", False),
        ("{{ 'a'.upper() }}", False),
        ("{{ input.tags|join(',') }}", False),
        ("{% set x = 1 %}{{ x }}", False),
        ("{{ unclosed", False),
    ],
)
def test_linear_templates_are_recognised(template: str, linear: bool) -> None:
    assert is_linear(CappedSandbox(), template) is linear


@given(width=st.integers(min_value=0, max_value=5_000))
def test_format_widths_are_capped_exactly(width: int) -> None:
    renderer = Renderer(max_len=2_000)
    for template in (f"{{{{ '%{width}s' % 'x' }}}}", f"{{{{ '{{:>{width}}}'.format('x') }}}}"):
        if width <= 2_000:
            assert len(renderer.render_tree(template, {}, "t")) == max(width, 1)
        else:
            with pytest.raises(RenderError, match="format width"):
                renderer.render_tree(template, {}, "t")


@given(n=st.integers(min_value=0, max_value=3_000), text=st.text(max_size=5))
def test_sequence_repetition_is_capped_exactly(n: int, text: str) -> None:
    renderer = Renderer(max_len=2_000)
    variables = {"s": text, "n": n}
    if len(text) * n <= 2_000:
        assert renderer.render_tree("{{ s * n }}", variables, "t") == text * n
    else:
        with pytest.raises(RenderError, match="longer than 2000"):
            renderer.render_tree("{{ s * n }}", variables, "t")


def test_a_render_process_stops_itself_when_nobody_kills_it() -> None:
    """A worker killed mid-render leaves no process burning CPU: the child has its own limit."""
    child = subprocess.Popen(
        [sys.executable, str(Path(templates.__file__).with_name("render_child.py")), "1048576", "0", "300"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.read(1) == b"R"
        loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        payload = json.dumps({"items": [[loop, "final"]], "v": {}}).encode()
        child.stdin.write(len(payload).to_bytes(4, "big") + payload)
        child.stdin.flush()
        assert child.wait(timeout=20) == 3  # 300 ms of CPU, then it exits on its own
    finally:
        child.kill()
        child.wait()


# -- live output --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("final", "chunk", "pieces"),
    [
        ("hello world", 4, ["hell", "o wo", "rld"]),
        ("{{ input.who.name }} says hi", 64, ["Ada says hi"]),
        ({"n": "{{ input.n }}"}, 3, ['{"n', '": ', "2}"]),  # not text: streamed as its JSON
        ("hello", 0, []),  # 0: not streamed
        ("", 8, []),
    ],
)
async def test_a_final_answer_streams_in_chunks(final: Any, chunk: int, pieces: list[str]) -> None:
    seen: list[str] = []

    async def on_text(text: str) -> None:
        seen.append(text)

    model = ScriptedProvider(
        cfg({"call": "http.get", "args": {}}, {"final": final}), POOLS["pool"], chunk_chars=chunk
    )
    context = ctx(turn=1)
    streaming = TurnContext(
        **{**{f: getattr(context, f) for f in context.__dataclass_fields__}, "on_text": on_text}
    )
    turn = await model.next_turn(streaming)
    assert isinstance(turn, FinalAnswer) and seen == pieces
    assert await model.next_turn(ctx(turn=0)) == ToolCalls([ToolCall("http.get", {})])  # calls never stream
    assert seen == pieces


# -- usage --------------------------------------------------------------------------------


async def test_any_turn_may_report_usage() -> None:
    model = scripted(
        {"call": "http.get", "args": {}, "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"calls": [{"call": "http.get", "args": {}}], "usage": {"cache_read_tokens": 7}},
        {"final": "ok", "usage": {"input_tokens": 1, "output_tokens": 1, "cache_write_tokens": 3}},
        {"final": "no usage"},
    )
    turns = [await model.next_turn(ctx(turn=i)) for i in range(4)]
    assert [t.usage for t in turns] == [
        Usage(input_tokens=10, output_tokens=2),
        Usage(cache_read_tokens=7),
        Usage(input_tokens=1, output_tokens=1, cache_write_tokens=3),
        None,
    ]


@pytest.mark.parametrize(
    ("usage", "says"),
    [
        ([1], "usage must be an object"),
        ({"input": 1}, "usage has unknown keys: input"),
        ({"input_tokens": -1}, "usage.input_tokens must be an integer"),
        ({"output_tokens": 1.5}, "usage.output_tokens must be an integer"),
        ({"output_tokens": True}, "usage.output_tokens must be an integer"),
    ],
)
def test_bad_usage_is_refused(usage: Any, says: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_scripted_config(cfg({"final": 1, "usage": usage}))
    assert info.value.field == "model.steps" and says in info.value.message
