"""The openai provider's SDK paths the older tests (test_openai_provider.py) do not reach:
SSE streaming, usage, ``finish_reason`` handling, error codes, the request's options, and
that nothing of the worker's environment rides along."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.domain.policy import RiskClass
from app.engine.base import FinalAnswer, ProviderError, ToolCall, ToolCalls, ToolSpec, TurnContext, Usage
from app.engine.providers.openai import OpenAIProvider
from app.settings import Settings
from tests.support.vendors import (
    Collect,
    Reply,
    openai_app,
    openai_calls,
    openai_chat,
    openai_text,
    openai_usage,
    serve_vendor,
)
from tests.support.vendors import VendorServer as Server

SECRET = "internal-secret-4f2a"


@pytest.fixture(scope="module")
def _thread() -> Iterator[Server]:
    with serve_vendor(openai_app, "/v1") as server:
        yield server


@pytest.fixture
def server(_thread: Server) -> Server:
    _thread.api.clear()
    return _thread


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"TEST_OPENAI_KEY_{uuid.uuid4().hex[:8].upper()}"
    monkeypatch.setenv(name, "sk-test-123")
    return name


def provider(server: Server, key_env: str, *, retries: int = 2, **cfg: Any) -> OpenAIProvider:
    config = {
        "provider": "openai",
        "model": "test-model",
        "base_url": server.base_url,
        "api_key_env": key_env,
        **cfg,
    }
    settings = Settings(
        http_allow_private_networks=True,
        provider_max_retries=retries,
        provider_timeout_s=2.0,
        provider_keys={key_env: [server.base_url]},
    )
    return OpenAIProvider(config, settings, backoff_base_s=0.01)


TOOLS = [ToolSpec("http.get", "Fetch", {"type": "object"}, RiskClass.READ)]


def ctx(on_text: Any = None) -> TurnContext:
    return TurnContext(
        run_id=1, depth=0, instructions="Be brief.", input="hi", memories=[], tools=TOOLS, on_text=on_text
    )


async def test_a_streamed_answer_reaches_on_text_with_its_usage(server: Server, key_env: str) -> None:
    server.api.replies.append(openai_text("The site is up and fast.", usage=openai_usage(120, 9, cached=100)))
    seen = Collect()
    turn = await provider(server, key_env).next_turn(ctx(seen))
    # prompt_tokens includes the cached ones: input is what was not read from the cache.
    assert turn == FinalAnswer(
        "The site is up and fast.", usage=Usage(input_tokens=20, output_tokens=9, cache_read_tokens=100)
    )
    body = server.api.requests[0]["json"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert len(seen.pieces) > 3 and "".join(seen.pieces) == "The site is up and fast."


async def test_streamed_parallel_tool_calls(server: Server, key_env: str) -> None:
    server.api.replies.append(
        openai_calls(
            ("http__get", json.dumps({"url": "a" * 20})),
            ("http__get", '{"url": "b"}'),
            usage=openai_usage(5, 3),
        )
    )
    seen = Collect()
    turn = await provider(server, key_env).next_turn(ctx(seen))
    assert turn == ToolCalls(
        [ToolCall("http.get", {"url": "a" * 20}), ToolCall("http.get", {"url": "b"})], usage=Usage(5, 3)
    )
    assert seen.pieces == []


async def test_a_whole_answer_reports_usage(server: Server, key_env: str) -> None:
    server.api.replies.append(openai_text('{"ok": 1}', usage=openai_usage(50, 4)))
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer({"ok": 1}, usage=Usage(50, 4))
    assert "stream" not in server.api.requests[0]["json"]


async def test_stream_false_asks_for_a_whole_answer_even_when_someone_listens(
    server: Server, key_env: str
) -> None:
    server.api.replies.append(openai_text("whole"))
    seen = Collect()
    assert await provider(server, key_env, stream=False).next_turn(ctx(seen)) == FinalAnswer("whole")
    assert "stream" not in server.api.requests[0]["json"] and seen.pieces == []


async def test_the_request_options(server: Server, key_env: str) -> None:
    server.api.replies.append(openai_text("ok"))
    await provider(
        server, key_env, max_completion_tokens=77, tool_choice="required", parallel_tool_calls=False
    ).next_turn(ctx())
    body = server.api.requests[0]["json"]
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(body=openai_chat({"content": '{"half": '}, finish_reason="length")), "OUTPUT_TRUNCATED"),
        (Reply(body=openai_chat({"content": None}, finish_reason="content_filter")), "PROVIDER_REFUSED"),
        (
            Reply(body=openai_chat({"content": None, "refusal": "I can't help with that."})),
            "PROVIDER_REFUSED",
        ),
    ],
)
async def test_truncation_and_refusal_fail_with_a_code(
    server: Server, key_env: str, reply: Reply, code: str, stream: bool
) -> None:
    server.api.replies.append(reply)
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env).next_turn(ctx(Collect() if stream else None))
    assert info.value.code == code
    assert "help with that" not in str(info.value)


@pytest.mark.parametrize(
    ("status", "body", "code", "tries"),
    [
        (400, {"error": {"message": "maximum context length is 8192 tokens", "code": "context_length_exceeded"}}, "CONTEXT_TOO_LONG", 1),
        (401, {"error": {"message": SECRET, "type": "invalid_request_error", "code": "invalid_api_key"}}, "PROVIDER_AUTH_FAILED", 1),
        (404, {"error": {"message": SECRET, "code": "model_not_found"}}, "PROVIDER_REQUEST_INVALID", 1),
        (429, {"error": {"message": SECRET, "type": "rate_limit_exceeded"}}, "PROVIDER_RATE_LIMITED", 3),
        (503, {"error": {"message": SECRET}}, "PROVIDER_UNAVAILABLE", 3),
    ],
)  # fmt: skip
async def test_errors_carry_a_code(
    server: Server, key_env: str, status: int, body: Any, code: str, tries: int
) -> None:
    server.api.replies += [Reply(status, body) for _ in range(3)]
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env).next_turn(ctx())
    assert info.value.code == code and f"HTTP {status}" in str(info.value)
    assert SECRET not in str(info.value) and "8192" not in str(info.value)
    assert len(server.api.requests) == tries


async def test_retry_after_ms_is_honoured(server: Server, key_env: str) -> None:
    server.api.replies += [Reply(429, {"error": {}}, headers={"retry-after-ms": "400"}), openai_text("ok")]
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer("ok")
    first, second = server.api.times
    assert second - first >= 0.35


async def test_the_workers_environment_is_not_sent(
    server: Server, key_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-" + SECRET)
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-" + SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + SECRET)
    server.api.replies.append(openai_text("ok"))
    await provider(server, key_env).next_turn(ctx())
    headers = server.api.requests[0]["headers"]
    assert SECRET not in json.dumps(headers) and headers["authorization"] == "Bearer sk-test-123"


async def test_a_rotated_key_is_used_from_the_next_turn(
    server: Server, key_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = provider(server, key_env)
    server.api.replies += [openai_text("one"), openai_text("two")]
    await model.next_turn(ctx())
    monkeypatch.setenv(key_env, "sk-rotated")
    await model.next_turn(ctx())
    assert [r["headers"]["authorization"] for r in server.api.requests] == [
        "Bearer sk-test-123",
        "Bearer sk-rotated",
    ]
