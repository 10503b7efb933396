"""The conformance kit (``enverif.testing``) on our own plugins: the built-in tools and
providers pass it; the misbehaving test plugins (``tests/support/plugin_tools.py``) are
caught by it, each for the rule it breaks; and the kit's own rules fail what they should.

No I/O here: the calls are refusals made before a tool opens a connection, and the scripted
and test providers answer locally. (The HTTP tools' successful calls and the openai
provider are checked against loopback servers in ``tests/integration``.)"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from app.engine.providers.scripted import ScriptedProvider
from app.engine.tools.registry import default_registry
from app.settings import Settings
from enverif import FinalAnswer, RiskClass, ToolError, ValidationFailed
from enverif.testing import (
    ConformanceError,
    ToolCase,
    check_provider,
    check_tool,
    check_tool_call,
    check_tool_shape,
    turn_context,
)
from tests.support.plugin_providers import EchoProvider
from tests.support.plugin_tools import DatetimeTool, HangingTool, HugeTool

pytest_plugins = ["enverif.testing.fixtures"]

SETTINGS = Settings(http_allow_private_networks=True)
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


@pytest.fixture
async def builtin_tools() -> AsyncIterator[dict[str, Any]]:
    registry = default_registry(SETTINGS)
    yield {name: registry.get(name) for name in registry.names()}
    await registry.aclose()


# -- tools --------------------------------------------------------------------------------

# Refusals each built-in makes before it touches the network or the database.
BUILTIN_CASES: dict[str, list[ToolCase]] = {
    "http.get": [
        ToolCase({}, error="INVALID_ARGUMENTS"),
        ToolCase({"url": "http://127.0.0.1:9/", "extra": 1}, error="INVALID_ARGUMENTS"),
        ToolCase({"url": "ftp://127.0.0.1/file"}, error="URL_REFUSED"),
        ToolCase({"url": "/relative"}, error="INVALID_ARGUMENTS"),
    ],
    "webhook.post": [
        ToolCase({"url": "http://127.0.0.1:9/hook"}, error="INVALID_ARGUMENTS"),
        # The engine always gives a write its step as the key; without one it must not send.
        ToolCase({"url": "http://127.0.0.1:9/hook", "payload": {}}, error="NO_IDEMPOTENCY_KEY", step_id=None),
    ],
    "memory.search": [
        ToolCase({"limit": 0}, error="VALIDATION_FAILED"),
        ToolCase({"x": 1}, error="VALIDATION_FAILED"),
    ],
    "memory.remember": [ToolCase({"key": "k"}, error="VALIDATION_FAILED")],
    "memory.forget": [ToolCase({"key": 3}, error="VALIDATION_FAILED")],
    "agents.list": [],
    "agents.delegate": [],  # every call needs the run's writer (a STATE tool)
}


async def test_every_built_in_tool_conforms(builtin_tools: dict[str, Any]) -> None:
    assert set(builtin_tools) == set(BUILTIN_CASES)
    for name, tool in builtin_tools.items():
        await check_tool(tool, cases=BUILTIN_CASES[name], settings=SETTINGS)


async def test_the_misbehaving_test_plugins_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVERIF_TEST_PLUGIN_LOG", str(tmp_path / "calls.log"))
    for plugin in (DatetimeTool, HugeTool, HangingTool):
        check_tool_shape(plugin(SETTINGS))  # their declarations are fine
    with pytest.raises(ConformanceError, match=r"not JSON: a value of type datetime \(NOT_JSON\)"):
        await check_tool_call(DatetimeTool(SETTINGS), {}, settings=SETTINGS)
    with pytest.raises(ConformanceError, match=r"over the cap of \d+ bytes \(TOO_LARGE\)"):
        await check_tool_call(HugeTool(SETTINGS), {}, settings=SETTINGS)
    with pytest.raises(ConformanceError, match="did not finish within its timeout of 1 s"):
        await check_tool_call(HangingTool(SETTINGS), {}, settings=SETTINGS)


async def test_the_manuals_example_plugin_conforms() -> None:
    """``docs/extending/tools.md`` shows this check on its example; it holds."""
    spec = importlib.util.spec_from_file_location("text_stats_tool", EXAMPLES / "text_stats_tool.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    await check_tool(module.TextStatsTool(SETTINGS), settings=SETTINGS, cases=[
        ToolCase({"text": "two words"}),
        ToolCase({"text": 3}, error="INVALID_ARGUMENTS"),
    ])  # fmt: skip


class Shape:
    name = "test.shape"
    description = "a tool for the kit's own checks"
    risk = RiskClass.READ
    timeout_s: float | None = None
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }

    def __init__(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self, key, value)

    async def run(self, ctx: Any, args: dict[str, Any]) -> Any:
        if "q" not in args:
            raise ToolError("MISSING_Q", "q is required")
        if args["q"] == "crash":
            raise KeyError("boom")
        if args["q"] == "bad code":
            raise ToolError("not a code", "x")
        return {"q": args["q"]}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"name": "has space"}, "the registry would skip"),
        ({"risk": "READ"}, "risk must be a RiskClass"),
        ({"description": " "}, "needs a description"),
        ({"parameters": {"type": "array"}}, "must describe an object"),
        ({"parameters": {"type": "object", "properties": []}}, "properties must be an object"),
        (
            {"parameters": {"type": "object", "properties": {"a": {}}, "required": ["b"]}},
            "names no property: b",
        ),
        ({"parameters": {"type": "object", "x": float("nan")}}, "NOT_JSON"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
    ],
)
def test_a_bad_declaration_is_caught(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(ConformanceError, match=says):
        check_tool_shape(Shape(**changes))


@pytest.mark.parametrize(
    ("case", "says"),
    [
        (ToolCase({"q": "crash"}), r"raised KeyError: 'boom' \(refuse with ToolError"),
        (ToolCase({"q": "bad code"}), "must be UPPER_SNAKE_CASE"),
        (ToolCase({}), "refused {}: MISSING_Q"),
        (ToolCase({"q": "x"}, error="MISSING_Q"), "expected the refusal MISSING_Q, got the result"),
        (ToolCase({}, error="OTHER"), "expected the refusal OTHER, got MISSING_Q"),
    ],
)
async def test_a_call_that_breaks_the_rules_is_caught(case: ToolCase, says: str) -> None:
    await check_tool(
        Shape(), cases=[ToolCase({"q": "ok"}), ToolCase({}, error="MISSING_Q")], settings=SETTINGS
    )
    with pytest.raises(ConformanceError, match=says):
        await check_tool(Shape(), cases=[case], settings=SETTINGS)


# -- providers ----------------------------------------------------------------------------


async def test_the_scripted_provider_conforms(enverif_settings: Settings) -> None:
    valid = [
        {"provider": "scripted", "steps": []},
        {"provider": "scripted", "steps": [{"call": "http.get", "args": {"url": "{{ input.url }}"}}]},
        {"provider": "scripted", "steps": [{"final": {"n": "{{ input.n + 1 }}"}}]},
    ]
    invalid = [
        {"provider": "scripted"},
        {"provider": "scripted", "steps": [{}]},
        {"provider": "scripted", "x": 1},
    ]
    turns = await check_provider(
        ScriptedProvider,
        valid=valid,
        invalid=invalid,
        settings=enverif_settings,
        contexts=[turn_context(input={"url": "http://127.0.0.1:9/", "n": 1})],
    )
    assert turns[0] == FinalAnswer(None)
    assert turns[1].calls[0].args == {"url": "http://127.0.0.1:9/"}
    assert turns[2] == FinalAnswer({"n": 2})


async def test_the_test_provider_plugin_conforms(enverif_settings: Settings) -> None:
    [turn] = await check_provider(
        EchoProvider,
        valid=[{"provider": "echo", "answer": [1, "two"]}],
        invalid=[{"provider": "echo"}, {"provider": "echo", "answer": 1, "more": 2}],
        settings=enverif_settings,
    )
    assert turn == FinalAnswer({"echo": [1, "two"], "turn": 0})


class Misbehaving(EchoProvider):
    name = "bad"
    mode = ""

    @classmethod
    def validate(cls, config: Mapping[str, Any], settings: Any) -> dict[str, Any]:
        if cls.mode == "wrong field" and "answer" not in config:
            raise ValidationFailed("answer is required", field="answer")
        if cls.mode == "crash in validate":
            raise KeyError("answer")
        stored = EchoProvider.validate(config, settings)
        if cls.mode == "changes on revalidation":
            stored["answer"] = [stored["answer"]]
        return stored

    async def next_turn(self, ctx: Any) -> Any:
        if self.mode == "not json":
            return FinalAnswer({"at": object()})
        if self.mode == "crash":
            raise RuntimeError("boom")
        return FinalAnswer(self.answer)


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("wrong field", "must name the field model or model.<key>, not 'answer'"),
        ("crash in validate", "validate raised KeyError"),
        ("changes on revalidation", "validating the stored config again changed it"),
        ("not json", "the final answer is not JSON"),
        ("crash", "next_turn raised RuntimeError: boom"),
    ],
)
async def test_a_provider_that_breaks_the_rules_is_caught(
    enverif_settings: Settings, monkeypatch: pytest.MonkeyPatch, mode: str, says: str
) -> None:
    monkeypatch.setattr(Misbehaving, "mode", mode)
    with pytest.raises(ConformanceError, match=says):
        await check_provider(
            Misbehaving,
            valid=[{"provider": "bad", "answer": 1}],
            invalid=[{"provider": "bad"}],
            settings=enverif_settings,
        )


async def test_a_provider_accepting_what_it_should_refuse_is_caught(enverif_settings: Settings) -> None:
    with pytest.raises(ConformanceError, match="accepted a config it should refuse"):
        await check_provider(
            EchoProvider, valid=[{"provider": "echo", "answer": 1}], invalid=[{"provider": "echo", "answer": 2}],
            settings=enverif_settings,
        )  # fmt: skip


def test_the_fixtures_build_what_the_engine_passes(tool_context: Any, turn_context: Any) -> None:
    ctx = tool_context(step_id=None)
    assert ctx.step_id is None and ctx.writer is None and ctx.settings.http_allow_private_networks
    assert turn_context(turn=2).turn == 2
