"""The anthropic provider (the official SDK over the guarded client) against a loopback
server speaking the Messages API: requests field by field, whole and streamed answers,
usage with prompt caching, truncation, refusals, and the errors the API documents."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic._constants import ANTHROPIC_API_VERSION

from app.domain.errors import ValidationFailed
from app.domain.policy import RiskClass
from app.engine.base import (
    FinalAnswer,
    HistoryItem,
    ProviderError,
    ToolCall,
    ToolCalls,
    ToolSpec,
    TurnContext,
    Usage,
)
from app.engine.providers import validate_model_config
from app.engine.providers.anthropic import DEFAULT_BASE_URL, AnthropicProvider
from app.settings import Settings
from enverif.testing import check_provider
from tests.support.vendors import (
    Collect,
    Reply,
    anthropic_app,
    anthropic_calls,
    anthropic_error,
    anthropic_message,
    anthropic_text,
    serve_vendor,
)
from tests.support.vendors import VendorServer as Server

SECRET = "internal-secret-4f2a"


@pytest.fixture(scope="module")
def _thread() -> Iterator[Server]:
    with serve_vendor(anthropic_app, "") as server:
        yield server


@pytest.fixture
def server(_thread: Server) -> Server:
    _thread.api.clear()
    return _thread


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"TEST_ANTHROPIC_KEY_{uuid.uuid4().hex[:8].upper()}"
    monkeypatch.setenv(name, "sk-ant-test-123")
    return name


def settings(
    key_env: str, bound: str, *, retries: int = 3, timeout_s: float = 2.0, **overrides: Any
) -> Settings:
    overrides.setdefault("http_allow_private_networks", True)
    return Settings(
        provider_max_retries=retries,
        provider_timeout_s=timeout_s,
        provider_keys={key_env: [bound]},
        **overrides,
    )


def provider(server: Server, key_env: str, *, retries: int = 3, **cfg: Any) -> AnthropicProvider:
    config = {"provider": "anthropic", "model": "claude-test", "base_url": server.base_url,
              "api_key_env": key_env, **cfg}  # fmt: skip
    return AnthropicProvider(config, settings(key_env, server.base_url, retries=retries), backoff_base_s=0.01)


TOOLS = [
    ToolSpec(
        "http.get",
        "Fetch a URL",
        {"type": "object", "properties": {"url": {"type": "string"}}},
        RiskClass.READ,
    ),
    ToolSpec("webhook.post", "POST JSON", {"type": "object"}, RiskClass.EXTERNAL_WRITE),
]


def ctx(
    history: list[HistoryItem] | None = None, *, on_text: Any = None, tools: list[ToolSpec] | None = None
) -> TurnContext:
    return TurnContext(
        run_id=9, depth=0, instructions="You check websites.", input={"site": "s"},
        memories=[{"key": "owner", "value": "Ada", "tags": ["people"]}],
        tools=TOOLS if tools is None else tools, history=history or [], turn=len(history or []), on_text=on_text,
    )  # fmt: skip


# -- the request --------------------------------------------------------------------------


async def test_a_tool_use_turn_and_the_request_it_sends(server: Server, key_env: str) -> None:
    usage = {
        "input_tokens": 20,
        "output_tokens": 7,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 40,
    }
    server.api.replies.append(
        anthropic_calls(
            ("http__get", {"url": "u1"}),
            ("webhook__post", {"payload": [1]}),
            text="Let me look.",
            usage=usage,
        )
    )
    history = [HistoryItem("http.get", {"url": "u0"}, "SUCCEEDED", {"status": 200}),
               HistoryItem("webhook.post", {"x": 1}, "FAILED", {"error": {"code": "TIMEOUT", "message": "m"}})]  # fmt: skip
    turn = await provider(server, key_env, max_tokens=500).next_turn(ctx(history))

    assert turn == ToolCalls(
        [ToolCall("http.get", {"url": "u1"}), ToolCall("webhook.post", {"payload": [1]})],
        usage=Usage(input_tokens=20, output_tokens=7, cache_read_tokens=300, cache_write_tokens=40),
    )
    (request,) = server.api.requests
    headers, body = request["headers"], request["json"]
    assert headers["x-api-key"] == "sk-ant-test-123"
    assert headers["anthropic-version"] == ANTHROPIC_API_VERSION  # the pinned SDK's
    assert "authorization" not in headers
    assert body["model"] == "claude-test" and body["max_tokens"] == 500
    assert "stream" not in body  # nobody listens: a whole answer
    instructions, memories = body["system"]
    assert instructions == {"type": "text", "text": "You check websites."}
    assert (
        memories["text"].startswith("Memories from earlier runs")
        and "- owner: Ada [tags: people]" in memories["text"]
    )
    assert memories["cache_control"] == {"type": "ephemeral"}  # the cache point ends the system prompt
    assert body["tools"] == [
        {"name": "http__get", "description": "Fetch a URL", "input_schema": TOOLS[0].parameters},
        {"name": "webhook__post", "description": "POST JSON", "input_schema": {"type": "object"}},
    ]
    user, call0, result0, call1, result1 = body["messages"]
    assert user == {"role": "user", "content": '{"site": "s"}'}
    assert call0 == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_0", "name": "http__get", "input": {"url": "u0"}}],
    }
    assert result0 == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": '{"status": 200}'}],
    }
    assert call1["content"][0]["name"] == "webhook__post"
    assert result1["content"][0]["is_error"] is True and result1["content"][0]["tool_use_id"] == "toolu_1"


async def test_tool_choice_and_parallel_tool_use(server: Server, key_env: str) -> None:
    server.api.replies.append(anthropic_text("ok"))
    await provider(
        server, key_env, tool_choice="any", parallel_tool_calls=False, cache_system=False
    ).next_turn(ctx())
    body = server.api.requests[0]["json"]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert all("cache_control" not in block for block in body["system"])
    assert body["max_tokens"] == 4096  # the default: the API requires one


@pytest.mark.parametrize(
    ("text", "value"), [('{"up": true}', {"up": True}), ("The site is up.", "The site is up.")]
)
async def test_a_final_answer(server: Server, key_env: str, text: str, value: Any) -> None:
    server.api.replies.append(anthropic_text(text))
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer(value, usage=Usage(10, 5))


# -- streaming ----------------------------------------------------------------------------


async def test_a_streamed_answer_reaches_on_text_piece_by_piece(server: Server, key_env: str) -> None:
    usage = {
        "input_tokens": 12,
        "output_tokens": 9,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 0,
    }
    server.api.replies.append(anthropic_text("The site is up and fast.", usage=usage))
    seen = Collect()
    turn = await provider(server, key_env).next_turn(ctx(on_text=seen))
    assert turn == FinalAnswer("The site is up and fast.", usage=Usage(12, 9, 100, 0))
    assert server.api.requests[0]["json"]["stream"] is True
    assert len(seen.pieces) > 3 and "".join(seen.pieces) == "The site is up and fast."


async def test_a_streamed_parallel_tool_use(server: Server, key_env: str) -> None:
    server.api.replies.append(anthropic_calls(("http__get", {"url": "a" * 30}), ("http__get", {"url": "b"})))
    seen = Collect()
    turn = await provider(server, key_env).next_turn(ctx(on_text=seen))
    assert turn == ToolCalls(
        [ToolCall("http.get", {"url": "a" * 30}), ToolCall("http.get", {"url": "b"})], usage=Usage(10, 5)
    )
    assert seen.pieces == []  # no text in a tool turn


async def test_an_overloaded_error_inside_a_stream_is_retried(server: Server, key_env: str) -> None:
    start = {"type": "message_start", "message": {**anthropic_message([]), "stop_reason": None}}
    server.api.replies += [
        Reply(
            events=[
                ("message_start", start),
                ("error", {"type": "error", "error": {"type": "overloaded_error", "message": SECRET}}),
            ]
        ),
        anthropic_text("fine"),
    ]
    assert await provider(server, key_env).next_turn(ctx(on_text=Collect())) == FinalAnswer(
        "fine", usage=Usage(10, 5)
    )
    assert len(server.api.requests) == 2


# -- how a turn can end badly ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("stop_reason", "code"), [("max_tokens", "OUTPUT_TRUNCATED"), ("refusal", "PROVIDER_REFUSED")]
)
async def test_truncation_and_refusal_fail_the_turn_with_a_code(
    server: Server, key_env: str, stop_reason: str, code: str, stream: bool
) -> None:
    server.api.replies.append(anthropic_text('{"half": ', stop_reason=stop_reason))
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env).next_turn(ctx(on_text=Collect() if stream else None))
    assert info.value.code == code and stop_reason in str(info.value)


@pytest.mark.parametrize(
    ("reply", "code", "shown", "tries"),
    [
        (anthropic_error(400, "invalid_request_error", SECRET), "PROVIDER_REQUEST_INVALID", "HTTP 400 Bad Request (invalid_request_error)", 1),
        (anthropic_error(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"), "CONTEXT_TOO_LONG", "HTTP 400", 1),
        (anthropic_error(401, "authentication_error", SECRET), "PROVIDER_AUTH_FAILED", "HTTP 401 Unauthorized (authentication_error)", 1),
        (anthropic_error(404, "not_found_error", SECRET), "PROVIDER_REQUEST_INVALID", "HTTP 404 Not Found (not_found_error)", 1),
        (anthropic_error(429, "rate_limit_error", SECRET), "PROVIDER_RATE_LIMITED", "HTTP 429 Too Many Requests (rate_limit_error)", 3),
        (anthropic_error(529, "overloaded_error", SECRET), "PROVIDER_UNAVAILABLE", "HTTP 529 Overloaded (overloaded_error)", 3),
        (anthropic_error(500, "api_error", SECRET), "PROVIDER_UNAVAILABLE", "HTTP 500 Internal Server Error (api_error)", 3),
    ],
)  # fmt: skip
async def test_errors_carry_a_code_and_the_status_never_the_body(
    server: Server, key_env: str, reply: Reply, code: str, shown: str, tries: int
) -> None:
    server.api.replies += [dataclasses.replace(reply) for _ in range(3)]
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env, retries=2).next_turn(ctx())
    assert info.value.code == code
    assert shown in str(info.value)
    assert (
        SECRET not in str(info.value) and "300000" not in str(info.value) and "sk-ant" not in str(info.value)
    )
    assert len(server.api.requests) == tries


async def test_retry_after_is_honoured(server: Server, key_env: str) -> None:
    server.api.replies += [
        anthropic_error(429, "rate_limit_error", **{"retry-after": "0.4"}),
        anthropic_text("ok"),
    ]
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer("ok", usage=Usage(10, 5))
    first, second = server.api.times
    assert second - first >= 0.35  # the backoff base is 0.01 s: only Retry-After explains the wait


async def test_the_workers_environment_is_not_sent(
    server: Server, key_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK reads credentials and headers from the environment; none of them may ride
    along to an agent's base_url."""
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-" + SECRET)
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", f"X-Leak: {SECRET}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-" + SECRET)
    server.api.replies.append(anthropic_text("ok"))
    await provider(server, key_env).next_turn(ctx())
    headers = server.api.requests[0]["headers"]
    assert SECRET not in json.dumps(headers)
    assert headers["x-api-key"] == "sk-ant-test-123"


async def test_a_key_that_may_not_go_there_is_never_sent(server: Server, key_env: str) -> None:
    config = {"provider": "anthropic", "model": "m", "base_url": server.base_url, "api_key_env": key_env}
    model = AnthropicProvider(config, settings(key_env, server.base_url))
    model._destination = dataclasses.replace(model._destination, bindings={key_env: []})  # narrowed since
    with pytest.raises(ProviderError) as info:
        await model.next_turn(ctx())
    assert info.value.code == "PROVIDER_NOT_ALLOWED" and server.api.requests == []


# -- config and conformance -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"provider": "anthropic"}, "model.model"),
        ({"provider": "anthropic", "model": " padded "}, "model.model"),
        ({"provider": "anthropic", "model": "m", "temperature": 0.5}, "model.temperature"),
        ({"provider": "anthropic", "model": "m", "max_tokens": 0}, "model.max_tokens"),
        ({"provider": "anthropic", "model": "m", "max_tokens": 2.5}, "model.max_tokens"),
        ({"provider": "anthropic", "model": "m", "tool_choice": "required"}, "model.tool_choice"),
        ({"provider": "anthropic", "model": "m", "cache_system": "yes"}, "model.cache_system"),
        ({"provider": "anthropic", "model": "m", "top_k": 3}, "model.top_k"),
        ({"provider": "anthropic", "model": "m", "api_key_env": "ENVERIF_SECRET"}, "model.api_key_env"),
        ({"provider": "anthropic", "model": "m", "api_key_env": "HOME"}, "model.api_key_env"),
        ({"provider": "anthropic", "model": "m", "base_url": "http://127.0.0.1:9/other"}, "model.base_url"),
    ],
)
def test_invalid_configs_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_model_config(config, settings("ANTHROPIC_API_KEY", DEFAULT_BASE_URL))
    assert info.value.field == field


def test_the_default_destination_is_the_vendors() -> None:
    config = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    assert validate_model_config(config, settings("ANTHROPIC_API_KEY", DEFAULT_BASE_URL)) == config


async def test_the_anthropic_provider_conforms(server: Server, key_env: str) -> None:
    server.api.replies += [
        anthropic_calls(("http__get", {"url": "x"})),
        anthropic_text('{"ok": true}'),
        anthropic_error(400, "invalid_request_error"),
    ]
    config = {"provider": "anthropic", "model": "m", "base_url": server.base_url, "api_key_env": key_env}
    turns = await check_provider(
        AnthropicProvider,
        valid=[config],
        invalid=[{**config, "base_url": "http://127.0.0.1:9"}, {**config, "api_key_env": "HOME"}],
        settings=settings(key_env, server.base_url),
        contexts=[ctx(), ctx(), ctx()],
    )
    assert turns[0] == ToolCalls([ToolCall("http.get", {"url": "x"})], usage=Usage(10, 5))
    assert turns[1] == FinalAnswer({"ok": True}, usage=Usage(10, 5))
    assert isinstance(turns[2], ProviderError) and turns[2].code == "PROVIDER_REQUEST_INVALID"


async def test_a_loopback_base_url_is_refused_without_private_networks(server: Server, key_env: str) -> None:
    """The SDK runs over the guarded httpx2 client: the address check happens where the
    socket opens, and nothing is sent, not even once."""
    config = {"provider": "anthropic", "model": "m", "base_url": server.base_url, "api_key_env": key_env}
    model = AnthropicProvider(config, settings(key_env, server.base_url, http_allow_private_networks=False))
    with pytest.raises(ProviderError) as info:
        await model.next_turn(ctx())
    assert info.value.code == "PROVIDER_NOT_ALLOWED"
    assert "non-public address 127.0.0.1" in str(info.value)
    assert server.api.requests == []
