"""The openai provider against a real HTTP server on 127.0.0.1 speaking chat-completions."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

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
)
from app.engine.providers import Providers, validate_model_config
from app.engine.providers.openai import FunctionNames, OpenAIProvider, validate_openai_config
from app.settings import Settings
from enverif.testing import check_provider
from tests.support.servers import serve_in_thread


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class FakeAPI:
    """What the server will answer (in order) and what it was asked."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def make_app(api: FakeAPI) -> Starlette:
    async def completions(request: Request) -> Response:
        api.times.append(time.monotonic())
        api.requests.append(
            {"headers": dict(request.headers), "json": await request.json(), "peer": request.client}
        )
        reply = api.replies.pop(0) if api.replies else Reply(500, {"error": {"message": "no reply scripted"}})
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@dataclass
class Server:
    base_url: str
    api: FakeAPI


@pytest.fixture(scope="module")
def _server_thread() -> Iterator[Server]:
    api = FakeAPI()
    with serve_in_thread(make_app(api)) as port:
        yield Server(base_url=f"http://127.0.0.1:{port}/v1", api=api)


@pytest.fixture
def server(_server_thread: Server) -> Server:
    api = _server_thread.api
    api.replies.clear()
    api.requests.clear()
    api.times.clear()
    return _server_thread


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"TEST_OPENAI_KEY_{uuid.uuid4().hex[:8].upper()}"
    monkeypatch.setenv(name, "sk-test-123")
    return name


# Where the deployment of these tests lets a key go when a test names no URL: a loopback
# address nothing listens on.
NOWHERE = "http://127.0.0.1:9/v1"


def settings(
    *,
    retries: int = 3,
    timeout_s: float = 2.0,
    key_env: str = "OPENAI_API_KEY",
    bound: str = NOWHERE,
    **overrides: Any,
) -> Settings:
    """``key_env`` bound to ``bound`` (ENVERIF_PROVIDER_KEYS). The server is on 127.0.0.1:
    private networks are allowed unless a test says otherwise."""
    values: dict[str, Any] = {"http_allow_private_networks": True, **overrides}
    return Settings(
        provider_max_retries=retries, provider_timeout_s=timeout_s, provider_keys={key_env: [bound]}, **values
    )


def provider(
    server: Server,
    key_env: str,
    *,
    retries: int = 3,
    timeout_s: float = 2.0,
    overrides: dict[str, Any] | None = None,
    **cfg: Any,
) -> OpenAIProvider:
    config = {
        "provider": "openai",
        "model": "test-model",
        "base_url": server.base_url,
        "api_key_env": key_env,
        **cfg,
    }
    bound = {"bound": server.base_url, **(overrides or {})}
    return OpenAIProvider(
        config, settings(retries=retries, timeout_s=timeout_s, key_env=key_env, **bound), backoff_base_s=0.01
    )


TOOLS = [
    ToolSpec(
        "http.get",
        "Fetch a URL",
        {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
        RiskClass.READ,
    ),
    ToolSpec("webhook.post", "POST JSON", {"type": "object"}, RiskClass.EXTERNAL_WRITE),
]


def ctx(history: list[HistoryItem] | None = None, tools: list[ToolSpec] | None = None) -> TurnContext:
    return TurnContext(
        run_id=9,
        depth=0,
        instructions="You check websites.",
        input={"site": "http://127.0.0.1:8080/site"},
        memories=[{"key": "owner", "value": "Ada", "tags": ["people"]}],
        tools=TOOLS if tools is None else tools,
        history=history or [],
        turn=len(history or []),
    )


def chat(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}


def tool_call_reply(*calls: tuple[str, str]) -> Reply:
    return Reply(
        body=chat(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"x{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
                    for i, (name, arguments) in enumerate(calls)
                ],
            }
        )
    )


def final_reply(content: str | None) -> Reply:
    return Reply(body=chat({"role": "assistant", "content": content}))


# -- turns --------------------------------------------------------------------------------


async def test_tool_call_turn_and_the_request_it_sends(server: Server, key_env: str) -> None:
    server.api.replies.append(
        tool_call_reply(
            ("http__get", '{"url": "http://127.0.0.1:8080/site"}'),
            ("webhook__post", '{"url": "u", "payload": [1]}'),
        )
    )
    history = [
        HistoryItem(
            "http.get", {"url": "http://127.0.0.1:8080/a"}, "SUCCEEDED", {"status": 200, "body": "ok"}
        )
    ]
    turn = await provider(server, key_env, temperature=0.1, max_tokens=50).next_turn(ctx(history))

    assert turn == ToolCalls(
        [
            ToolCall("http.get", {"url": "http://127.0.0.1:8080/site"}),
            ToolCall("webhook.post", {"url": "u", "payload": [1]}),
        ]
    )
    (request,) = server.api.requests
    assert request["headers"]["authorization"] == "Bearer sk-test-123"
    body = request["json"]
    assert body["model"] == "test-model"
    assert body["temperature"] == 0.1 and body["max_tokens"] == 50
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "http__get",
                "description": "Fetch a URL",
                "parameters": TOOLS[0].parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "webhook__post",
                "description": "POST JSON",
                "parameters": {"type": "object"},
            },
        },
    ]
    system, user, assistant, tool = body["messages"]
    assert system["role"] == "system"
    assert "You check websites." in system["content"]
    assert "- owner: Ada [tags: people]" in system["content"]
    assert user == {"role": "user", "content": '{"site": "http://127.0.0.1:8080/site"}'}
    assert assistant["role"] == "assistant"
    (call,) = assistant["tool_calls"]
    assert call["function"]["name"] == "http__get"
    assert json.loads(call["function"]["arguments"]) == {"url": "http://127.0.0.1:8080/a"}
    assert tool == {"role": "tool", "tool_call_id": call["id"], "content": '{"status": 200, "body": "ok"}'}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"answer": 42, "ok": true}', {"answer": 42, "ok": True}),
        ("[1, 2]", [1, 2]),
        ("The site is up.", "The site is up."),
        ("42", 42),
        ("", ""),
        (None, None),
    ],
)
async def test_final_turn(server: Server, key_env: str, content: str | None, expected: Any) -> None:
    server.api.replies.append(final_reply(content))
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer(expected)


async def test_no_tools_means_no_tools_field(server: Server, key_env: str) -> None:
    server.api.replies.append(final_reply("done"))
    await provider(server, key_env).next_turn(ctx(tools=[]))
    body = server.api.requests[0]["json"]
    assert "tools" not in body and "temperature" not in body and "max_tokens" not in body


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ('{"secret": "' + "internal-secret-4f2a", "not valid JSON"),
        ('"internal-secret-4f2a"', "not a JSON object"),
        ('["internal-secret-4f2a"]', "not a JSON object"),
    ],
)
async def test_bad_tool_arguments_are_provider_errors(
    server: Server, key_env: str, arguments: str, says: str
) -> None:
    server.api.replies.append(tool_call_reply(("http__get", "{}"), ("http__get", arguments)))
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env).next_turn(ctx())
    assert f"the arguments of tool call 2 are {says}" in str(info.value)
    assert "internal-secret-4f2a" not in str(info.value)  # nothing of the answer is quoted


async def test_response_without_choices_is_a_provider_error(server: Server, key_env: str) -> None:
    server.api.replies.append(Reply(body={"object": "chat.completion", "choices": []}))
    with pytest.raises(ProviderError, match="no choices"):
        await provider(server, key_env).next_turn(ctx())


# -- retries ------------------------------------------------------------------------------


async def test_429_then_success_is_retried(server: Server, key_env: str) -> None:
    server.api.replies += [Reply(429, {"error": {"message": "slow down"}}), final_reply("ok")]
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer("ok")
    assert len(server.api.requests) == 2


async def test_retry_after_is_honoured(server: Server, key_env: str) -> None:
    server.api.replies += [
        Reply(429, {"error": {"message": "later"}}, headers={"Retry-After": "0.4"}),
        final_reply("ok"),
    ]
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer("ok")
    first, second = server.api.times
    assert second - first >= 0.35  # backoff_base_s is 0.01: only Retry-After explains the wait


async def test_5xx_then_success_is_retried(server: Server, key_env: str) -> None:
    server.api.replies += [
        Reply(502, {"error": {"message": "bad gateway"}}),
        Reply(503, {}),
        final_reply("ok"),
    ]
    assert await provider(server, key_env).next_turn(ctx()) == FinalAnswer("ok")
    assert len(server.api.requests) == 3


async def test_5xx_exhausted_is_a_provider_error(server: Server, key_env: str) -> None:
    server.api.replies += [Reply(500, {"error": {"message": "boom"}}) for _ in range(5)]
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env, retries=2).next_turn(ctx())
    assert len(server.api.requests) == 3  # 1 try + 2 retries
    assert "after 3 attempt(s)" in str(info.value) and "HTTP 500 Internal Server Error" in str(info.value)
    assert "boom" not in str(info.value)  # never the remote body


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_fail_without_retry(server: Server, key_env: str, status: int) -> None:
    server.api.replies += [Reply(status, {"error": {"message": "unknown parameter"}}), final_reply("never")]
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env).next_turn(ctx())
    assert len(server.api.requests) == 1
    assert f"HTTP {status}" in str(info.value)
    assert "unknown parameter" not in str(info.value)  # never the remote body
    assert "sk-test-123" not in str(info.value)


async def test_timeouts_are_retried_then_fail(server: Server, key_env: str) -> None:
    server.api.replies += [Reply(body=chat({"content": "late"}), delay_s=0.5) for _ in range(2)]
    with pytest.raises(ProviderError, match="timed out"):
        await provider(server, key_env, retries=1, timeout_s=0.15).next_turn(ctx())
    assert len(server.api.requests) == 2


async def test_connection_errors_are_retried_then_fail(key_env: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "provider": "openai",
        "model": "m",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "api_key_env": key_env,
    }
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"after 3 attempt\(s\).*ConnectError"):
        await OpenAIProvider(
            config, settings(retries=2, key_env=key_env, bound=config["base_url"]), backoff_base_s=0.01
        ).next_turn(ctx())
    assert time.monotonic() - started < 1.5


SECRET = "internal-secret-4f2a"


@pytest.mark.parametrize(
    ("status", "body", "shown"),
    [
        (
            500,
            {"error": {"message": SECRET, "type": "server_error"}},
            "HTTP 500 Internal Server Error (server_error)",
        ),
        (500, {"detail": SECRET}, "HTTP 500 Internal Server Error"),
        (400, {"error": {"message": SECRET, "type": SECRET}}, "HTTP 400 Bad Request"),
        (
            404,
            {"error": {"message": "no such model", "code": "model_not_found"}},
            "HTTP 404 Not Found (model_not_found)",
        ),
    ],
)
async def test_errors_carry_the_status_never_the_remote_body(
    server: Server, key_env: str, status: int, body: Any, shown: str
) -> None:
    server.api.replies.append(Reply(status, body))
    with pytest.raises(ProviderError) as info:
        await provider(server, key_env, retries=0).next_turn(ctx())
    assert shown in str(info.value)
    assert SECRET not in str(info.value) and "no such model" not in str(info.value)


async def test_loopback_base_url_is_refused_without_private_networks(server: Server, key_env: str) -> None:
    p = provider(server, key_env, overrides={"http_allow_private_networks": False})
    with pytest.raises(ProviderError, match=r"refused: .*non-public address 127\.0\.0\.1"):
        await p.next_turn(ctx())
    assert server.api.requests == []  # nothing sent, not even once, and no retries


async def test_answers_larger_than_the_cap_fail_the_turn(server: Server, key_env: str) -> None:
    server.api.replies.append(final_reply("x" * 100_000))
    p = provider(server, key_env, overrides={"provider_max_response_bytes": 65_536})
    with pytest.raises(ProviderError, match="larger than 65536 bytes"):
        await p.next_turn(ctx())
    assert len(server.api.requests) == 1  # not retried


@pytest.mark.parametrize(("suffix", "prefix"), [("", "http://admin:hunter2@"), ("?token=hunter2", "http://")])
def test_credentials_in_base_url_are_refused_and_not_shown(
    server: Server, key_env: str, suffix: str, prefix: str
) -> None:
    base = server.base_url.replace("http://", prefix) + suffix
    with pytest.raises(ValidationFailed) as info:
        provider(server, key_env, base_url=base)
    assert info.value.field == "model.base_url"
    assert "hunter2" not in info.value.message
    assert server.api.requests == []


@pytest.mark.parametrize("name", ["HOME", "PATH", "AWS_SECRET_ACCESS_KEY"])
def test_key_variables_outside_the_allowlist_are_refused(server: Server, name: str) -> None:
    config = {"provider": "openai", "model": "m", "base_url": server.base_url, "api_key_env": name}
    with pytest.raises(ValidationFailed) as info:
        OpenAIProvider(config, settings(bound=server.base_url))
    assert info.value.field == "model.api_key_env"
    assert f"model.api_key_env {name!r} is not allowed" in info.value.message
    assert "OPENAI_API_KEY" in info.value.message  # says what is allowed
    assert server.api.requests == []


async def test_missing_key_is_a_provider_error_naming_the_variable(server: Server) -> None:
    name = f"TEST_OPENAI_KEY_UNSET_{uuid.uuid4().hex[:8].upper()}"
    with pytest.raises(ProviderError, match=name):
        await provider(server, name).next_turn(ctx())
    assert server.api.requests == []


async def test_key_is_read_at_call_time(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"TEST_OPENAI_KEY_LATE_{uuid.uuid4().hex[:8].upper()}"
    p = provider(server, name)
    monkeypatch.setenv(name, "sk-rotated")
    server.api.replies.append(final_reply("ok"))
    await p.next_turn(ctx())
    assert server.api.requests[0]["headers"]["authorization"] == "Bearer sk-rotated"


async def test_providers_share_one_client_across_turns(server: Server, key_env: str) -> None:
    server.api.replies += [
        tool_call_reply(("http__get", '{"url": "http://127.0.0.1:8080/x"}')),
        final_reply("ok"),
    ]
    config = {"provider": "openai", "model": "m", "base_url": server.base_url, "api_key_env": key_env}
    async with Providers(settings(key_env=key_env, bound=server.base_url)) as providers:
        turn = await providers.for_model(config).next_turn(ctx())
        assert turn == ToolCalls([ToolCall("http.get", {"url": "http://127.0.0.1:8080/x"})])
        assert await providers.for_model(config).next_turn(ctx()) == FinalAnswer("ok")
        assert providers.sdk_http is not None and not providers.sdk_http.is_closed
    assert providers.sdk_http.is_closed
    # One keep-alive connection served both turns: the client is shared, not rebuilt.
    peers = {r["peer"] for r in server.api.requests}
    assert len(peers) == 1, peers


# -- the conformance kit ----------------------------------------------------------------


async def test_the_openai_provider_conforms(server: Server, key_env: str) -> None:
    """``enverif.testing.check_provider`` against the local chat-completions server: a tool
    call turn, a final turn, and a failure that is a ProviderError (never a crash)."""
    server.api.replies += [
        tool_call_reply(("http__get", '{"url": "http://127.0.0.1:8080/x"}')),
        final_reply('{"ok": true}'),
        Reply(400, {"error": {"message": "bad"}}),
    ]
    config = {"provider": "openai", "model": "m", "base_url": server.base_url, "api_key_env": key_env}
    bound = settings(key_env=key_env, bound=server.base_url)
    turns = await check_provider(
        OpenAIProvider,
        valid=[config],
        invalid=[
            {**config, "base_url": server.base_url + "-elsewhere"},  # not where the key may go
            {**config, "api_key_env": "HOME"},
            {"provider": "openai"},
        ],
        settings=bound,
        contexts=[ctx(), ctx(), ctx()],
    )
    assert turns[0] == ToolCalls([ToolCall("http.get", {"url": "http://127.0.0.1:8080/x"})])
    assert turns[1] == FinalAnswer({"ok": True})
    assert isinstance(turns[2], ProviderError) and "HTTP 400" in str(turns[2])
    assert len(server.api.requests) == 3


# -- names and config ---------------------------------------------------------------------


def test_function_names_round_trip() -> None:
    names = FunctionNames(["http.get", "http__get", "a.b-c", "x" * 70 + ".y"])
    fns = [names.function(t) for t in ["http.get", "http__get", "a.b-c", "x" * 70 + ".y"]]
    assert fns[0] == "http__get" and fns[1] != fns[0]  # collision resolved
    assert fns[2] == "a__b-c"
    assert all(len(fn) <= 64 for fn in fns) and len(set(fns)) == 4
    assert [names.tool(fn) for fn in fns] == ["http.get", "http__get", "a.b-c", "x" * 70 + ".y"]
    assert names.tool("http.get") == "http.get"  # a model echoing the dotted name
    assert names.tool("unknown__tool") == "unknown.tool"


@pytest.mark.parametrize(
    "config",
    [
        {"provider": "openai", "model": "gpt-4o-mini"},
        {
            "provider": "openai",
            "model": "m",
            "base_url": "http://localhost:11434/v1",
            "api_key_env": "OLLAMA_KEY",
        },
        {"provider": "openai", "model": "m", "temperature": 0, "max_tokens": 1},
        {"provider": "openai", "model": "m", "temperature": 1.5},
    ],
)
def test_valid_openai_configs(config: dict[str, Any]) -> None:
    assert validate_openai_config(config) == config  # the shape alone
    if "base_url" in config:  # where the key may go too (the default URL is no test's to bind)
        allowed = settings(key_env=config["api_key_env"], bound=config["base_url"])
        assert validate_model_config(config, allowed) == config


@pytest.mark.parametrize(
    ("config", "fragment", "field"),
    [
        ({"provider": "openai"}, "model.model", "model.model"),
        ({"provider": "openai", "model": ""}, "model.model", "model.model"),
        ({"provider": "openai", "model": 4}, "model.model", "model.model"),
        ({"provider": "openai", "model": "m", "base_url": "ftp://x"}, "base_url", "model.base_url"),
        ({"provider": "openai", "model": "m", "base_url": "not a url"}, "base_url", "model.base_url"),
        ({"provider": "openai", "model": "m", "base_url": 3}, "base_url", "model.base_url"),
        (
            {"provider": "openai", "model": "m", "api_key_env": "has space"},
            "api_key_env",
            "model.api_key_env",
        ),
        ({"provider": "openai", "model": "m", "api_key_env": ""}, "api_key_env", "model.api_key_env"),
        (
            {"provider": "openai", "model": "m", "api_key_env": "ENVERIF_DATABASE_URL"},
            "ENVERIF_",
            "model.api_key_env",
        ),
        (
            {"provider": "openai", "model": "m", "api_key_env": "enverif_redis_url"},
            "ENVERIF_",
            "model.api_key_env",
        ),
        ({"provider": "openai", "model": "m", "temperature": 3}, "temperature", "model.temperature"),
        ({"provider": "openai", "model": "m", "temperature": "hot"}, "temperature", "model.temperature"),
        ({"provider": "openai", "model": "m", "temperature": True}, "temperature", "model.temperature"),
        ({"provider": "openai", "model": "m", "max_tokens": 0}, "max_tokens", "model.max_tokens"),
        ({"provider": "openai", "model": "m", "max_tokens": 1.5}, "max_tokens", "model.max_tokens"),
        (
            {"provider": "openai", "model": "m", "api_key": "sk-inline"},
            "unknown keys: api_key",
            "model.api_key",
        ),
    ],
)
def test_invalid_openai_configs(config: dict[str, Any], fragment: str, field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_model_config(config, settings())
    assert info.value.field == field
    assert fragment in info.value.message
