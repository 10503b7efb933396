"""Built-in HTTP tools and the tool registry, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from app.domain.policy import RiskClass
from app.engine.base import ToolContext, ToolError
from app.engine.tools import registry as registry_module
from app.engine.tools.http import HttpGetTool, URLRefused, WebhookPostTool, resolve_public
from app.engine.tools.registry import ToolRegistry, default_registry
from app.settings import Settings
from enverif.testing import ToolCase, check_tool
from tests.support.servers import serve_in_thread

CAP = 2_048
BIG_TOTAL = 100 * 1024 * 1024  # what /big would send if nobody stopped reading


@dataclass
class Recorder:
    requests: list[dict[str, Any]] = field(default_factory=list)
    big_bytes_sent: int = 0


def make_app(rec: Recorder) -> Starlette:
    async def hello(request: Request) -> Response:
        rec.requests.append({"path": "/hello"})
        return PlainTextResponse("hello")

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return PlainTextResponse(f"status {code}", status_code=code)

    async def big(request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            chunk = b"x" * 65_536
            while rec.big_bytes_sent < BIG_TOTAL:
                if await request.is_disconnected():
                    return
                rec.big_bytes_sent += len(chunk)
                yield chunk

        return StreamingResponse(chunks(), media_type="text/plain")

    async def exact(request: Request) -> Response:
        return PlainTextResponse("y" * CAP)

    async def utf8(request: Request) -> Response:
        # 2047 ASCII bytes, then a 2-byte character straddling the cap.
        return PlainTextResponse("a" * (CAP - 1) + "é" + "tail", media_type="text/plain; charset=utf-8")

    async def redirect(request: Request) -> Response:
        return RedirectResponse("/hello", status_code=302)

    async def slow(request: Request) -> Response:
        await asyncio.sleep(1)
        return PlainTextResponse("late")

    async def hook(request: Request) -> Response:
        rec.requests.append(
            {
                "path": "/hook",
                "idempotency_key": request.headers.get("idempotency-key"),
                "content_type": request.headers.get("content-type"),
                "json": await request.json(),
            }
        )
        return JSONResponse({"received": True}, status_code=201)

    async def hook_redirect(request: Request) -> Response:
        return RedirectResponse("/hook", status_code=307)

    async def set_cookie(request: Request) -> Response:
        response = RedirectResponse("/cookie", status_code=302)
        response.set_cookie("session", "workspace-1-secret")
        return response

    async def cookie(request: Request) -> Response:
        return PlainTextResponse(request.headers.get("cookie", "no cookie"))

    return Starlette(
        routes=[
            Route("/hello", hello),
            Route("/status/{code:int}", status),
            Route("/big", big),
            Route("/exact", exact),
            Route("/utf8", utf8),
            Route("/redirect", redirect),
            Route("/slow", slow),
            Route("/hook", hook, methods=["POST"]),
            Route("/hook-redirect", hook_redirect, methods=["POST"]),
            Route("/set-cookie", set_cookie),
            Route("/cookie", cookie),
        ]
    )


@dataclass
class Server:
    url: str
    port: int
    rec: Recorder


@pytest.fixture(scope="module")
def _server_thread() -> Iterator[Server]:
    """One uvicorn server in its own thread and event loop for the whole module."""
    rec = Recorder()
    with serve_in_thread(make_app(rec)) as port:
        yield Server(url=f"http://127.0.0.1:{port}", port=port, rec=rec)


@pytest.fixture
def server(_server_thread: Server) -> Server:
    _server_thread.rec.requests.clear()
    _server_thread.rec.big_bytes_sent = 0
    return _server_thread


def settings(*, allow_private: bool, timeout_s: float = 2.0) -> Settings:
    return Settings(
        http_allow_private_networks=allow_private, http_max_body_bytes=CAP, http_timeout_s=timeout_s
    )


CTX = ToolContext(workspace_id=1, agent_id=2, run_id=3, step_id=4242, settings=None)


@pytest.fixture
async def get_tool(server: Server) -> AsyncIterator[HttpGetTool]:
    tool = HttpGetTool(settings(allow_private=True))
    yield tool
    await tool.aclose()


@pytest.fixture
async def post_tool(server: Server) -> AsyncIterator[WebhookPostTool]:
    tool = WebhookPostTool(settings(allow_private=True))
    yield tool
    await tool.aclose()


# -- the conformance kit, on loopback ----------------------------------------------------


async def test_the_http_tools_conform_against_a_real_server(
    server: Server, get_tool: HttpGetTool, post_tool: WebhookPostTool
) -> None:
    """``enverif.testing.check_tool`` with calls that go out: results are strict JSON under
    the cap, a refused address is a ToolError, an unreachable one too (never a crash)."""
    allowed = settings(allow_private=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/"
    await check_tool(get_tool, settings=allowed, cases=[
        ToolCase({"url": f"{server.url}/hello"}),
        ToolCase({"url": f"{server.url}/big"}),  # capped, not an error
        ToolCase({"url": f"{server.url}/status/500"}),  # a result with its status
        ToolCase({"url": closed}, error="HTTP_ERROR"),
    ])  # fmt: skip
    await check_tool(post_tool, settings=allowed, cases=[
        ToolCase({"url": f"{server.url}/hook", "payload": {"n": 1}}, step_id=77),
        ToolCase({"url": f"{server.url}/hook", "payload": None}, step_id=None, error="NO_IDEMPOTENCY_KEY"),
    ])  # fmt: skip
    guarded = HttpGetTool(settings(allow_private=False))
    try:
        await check_tool(
            guarded, settings=allowed, cases=[ToolCase({"url": f"{server.url}/hello"}, error="URL_REFUSED")]
        )
    finally:
        await guarded.aclose()


# -- http.get -----------------------------------------------------------------------------


async def test_get_returns_status_and_body(server: Server, get_tool: HttpGetTool) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/hello"})
    assert result == {"status": 200, "body": "hello", "truncated": False}


@pytest.mark.parametrize("code", [201, 404, 500])
async def test_non_2xx_is_a_result_not_an_error(server: Server, get_tool: HttpGetTool, code: int) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/status/{code}"})
    assert result == {"status": code, "body": f"status {code}", "truncated": False}


async def test_body_is_capped_and_the_rest_never_read(server: Server, get_tool: HttpGetTool) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/big"})
    assert result["status"] == 200
    assert result["truncated"] is True
    assert result["body"] == "x" * CAP
    # Stopped reading: the server was not allowed to push the whole 100 MB through.
    await asyncio.sleep(0.05)
    assert server.rec.big_bytes_sent < BIG_TOTAL // 10


async def test_body_of_exactly_the_cap_is_not_truncated(server: Server, get_tool: HttpGetTool) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/exact"})
    assert result == {"status": 200, "body": "y" * CAP, "truncated": False}


async def test_cap_does_not_split_a_character(server: Server, get_tool: HttpGetTool) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/utf8"})
    assert result["truncated"] is True
    assert result["body"] == "a" * (CAP - 1)  # the cut "é" is dropped, not turned into U+FFFD


async def test_get_follows_redirects(server: Server, get_tool: HttpGetTool) -> None:
    result = await get_tool.run(CTX, {"url": f"{server.url}/redirect"})
    assert result == {"status": 200, "body": "hello", "truncated": False}


async def test_cookies_are_never_kept_or_sent(server: Server, get_tool: HttpGetTool) -> None:
    """One client serves every run of every workspace in a worker: a cookie one run's site
    sets must not ride along on anyone's next request (nor on its own redirect)."""
    first = await get_tool.run(CTX, {"url": f"{server.url}/set-cookie"})
    assert first == {"status": 200, "body": "no cookie", "truncated": False}
    other_workspace = ToolContext(workspace_id=2, agent_id=5, run_id=6, step_id=None, settings=None)
    again = await get_tool.run(other_workspace, {"url": f"{server.url}/cookie"})
    assert again["body"] == "no cookie"


async def test_timeout_is_an_http_error(server: Server) -> None:
    tool = HttpGetTool(settings(allow_private=True, timeout_s=0.2))
    try:
        with pytest.raises(ToolError) as info:
            await tool.run(CTX, {"url": f"{server.url}/slow"})
    finally:
        await tool.aclose()
    assert info.value.code == "HTTP_ERROR"
    assert "timed out" in info.value.message


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_connection_refused_is_an_http_error(get_tool: HttpGetTool) -> None:
    with pytest.raises(ToolError) as info:
        await get_tool.run(CTX, {"url": f"http://127.0.0.1:{_closed_port()}/"})
    assert info.value.code == "HTTP_ERROR"
    assert info.value.as_result()["error"]["code"] == "HTTP_ERROR"


async def test_unresolvable_host_is_an_http_error(stub_resolver: dict[str, list[str] | OSError]) -> None:
    stub_resolver["no-such-host.localhost"] = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    tool = HttpGetTool(settings(allow_private=False))
    try:
        with pytest.raises(ToolError) as info:
            await tool.run(CTX, {"url": "http://no-such-host.localhost/"})
    finally:
        await tool.aclose()
    assert info.value.code == "HTTP_ERROR"


# -- webhook.post -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [{"event": "done", "items": [1, 2, {"n": None}], "ok": True}, [1, "two"], "text", 42, None],
)
async def test_webhook_sends_json_and_idempotency_key(
    server: Server, post_tool: WebhookPostTool, payload: Any
) -> None:
    result = await post_tool.run(CTX, {"url": f"{server.url}/hook", "payload": payload})
    assert result == {"status": 201, "body": '{"received":true}'}
    (seen,) = server.rec.requests
    assert seen["idempotency_key"] == "4242"  # the step id
    assert seen["content_type"] == "application/json"
    assert seen["json"] == payload


async def test_webhook_key_follows_the_step(server: Server, post_tool: WebhookPostTool) -> None:
    for step_id in (7, 8, 7):
        ctx = ToolContext(workspace_id=1, agent_id=2, run_id=3, step_id=step_id, settings=None)
        await post_tool.run(ctx, {"url": f"{server.url}/hook", "payload": {}})
    assert [r["idempotency_key"] for r in server.rec.requests] == ["7", "8", "7"]


async def test_webhook_does_not_follow_redirects(server: Server, post_tool: WebhookPostTool) -> None:
    result = await post_tool.run(CTX, {"url": f"{server.url}/hook-redirect", "payload": {"a": 1}})
    assert result["status"] == 307
    assert server.rec.requests == []


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({}, "INVALID_ARGUMENTS"),
        ({"url": 3}, "INVALID_ARGUMENTS"),
        ({"url": ""}, "INVALID_ARGUMENTS"),
        ({"url": "not a url"}, "INVALID_ARGUMENTS"),
        ({"url": "http://"}, "INVALID_ARGUMENTS"),
        ({"url": "//127.0.0.1/x"}, "INVALID_ARGUMENTS"),
        ({"url": "http://127.0.0.1/" + "a" * 3000}, "INVALID_ARGUMENTS"),
        ({"url": "http://127.0.0.1/", "method": "DELETE"}, "INVALID_ARGUMENTS"),
        ({"url": "ftp://127.0.0.1/file"}, "URL_REFUSED"),
        ({"url": "file:///etc/passwd"}, "URL_REFUSED"),
        ({"url": "gopher://127.0.0.1/"}, "URL_REFUSED"),
    ],
)
async def test_get_rejects_bad_arguments(get_tool: HttpGetTool, args: dict[str, Any], code: str) -> None:
    with pytest.raises(ToolError) as info:
        await get_tool.run(CTX, args)
    assert info.value.code == code


@pytest.mark.parametrize(
    "args",
    [
        {"url": "http://127.0.0.1/"},
        {"payload": {}},
        {"url": 1, "payload": {}},
        {"url": "x", "payload": 1, "y": 2},
    ],
)
async def test_webhook_rejects_bad_arguments(post_tool: WebhookPostTool, args: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as info:
        await post_tool.run(CTX, args)
    assert info.value.code == "INVALID_ARGUMENTS"


async def test_arguments_must_be_an_object(get_tool: HttpGetTool) -> None:
    with pytest.raises(ToolError) as info:
        await get_tool.run(CTX, ["http://127.0.0.1/"])  # type: ignore[arg-type]
    assert info.value.code == "INVALID_ARGUMENTS"


# -- private networks ---------------------------------------------------------------------


@pytest.fixture
async def guarded_tools() -> AsyncIterator[tuple[HttpGetTool, WebhookPostTool]]:
    s = settings(allow_private=False)
    tools = (HttpGetTool(s), WebhookPostTool(s))
    yield tools
    for tool in tools:
        await tool.aclose()


# Only loopback literals here: nothing in a test may name another host (no packet may leave).
LOOPBACK_URLS = [
    "http://127.0.0.1:{port}/hello",
    "http://localhost:{port}/hello",
    "http://[::1]:{port}/hello",
    "http://[::ffff:127.0.0.1]:{port}/hello",
    "https://127.0.0.1:{port}/",
]


@pytest.mark.parametrize("template", LOOPBACK_URLS)
async def test_loopback_addresses_are_refused(
    server: Server, guarded_tools: tuple[HttpGetTool, WebhookPostTool], template: str
) -> None:
    url = template.format(port=server.port)
    get_tool, post_tool = guarded_tools
    for tool, args in ((get_tool, {"url": url}), (post_tool, {"url": url, "payload": {"x": 1}})):
        with pytest.raises(ToolError) as info:
            await tool.run(CTX, args)
        assert info.value.code == "URL_REFUSED", info.value.message
    assert server.rec.requests == []  # nothing reached the server


# Non-public addresses a name may resolve to. The resolver is stubbed, so these are answers
# handed to the guard, never destinations: the tool must refuse before opening a socket.
STUB_ANSWERS = [
    ["0.0.0.0"],
    ["10.1.2.3"],
    ["172.16.0.1"],
    ["192.168.1.1"],
    ["169.254.169.254"],  # cloud metadata
    ["100.64.0.1"],
    ["224.0.0.1"],
    ["fe80::1"],
    ["fc00::1"],
    ["::ffff:10.1.2.3"],
    ["2002:a9fe:a9fe::1"],  # 6to4 wrapping 169.254.169.254
    ["fec0::1"],  # site-local
]


@pytest.mark.parametrize("answer", STUB_ANSWERS, ids=lambda a: ",".join(a))
async def test_names_resolving_to_non_public_addresses_are_refused(
    stub_resolver: dict[str, list[str] | OSError],
    guarded_tools: tuple[HttpGetTool, WebhookPostTool],
    answer: list[str],
) -> None:
    stub_resolver["target.localhost"] = answer
    get_tool, post_tool = guarded_tools
    url = "http://target.localhost/latest/meta-data/"
    for tool, args in ((get_tool, {"url": url}), (post_tool, {"url": url, "payload": {"x": 1}})):
        with pytest.raises(ToolError) as info:
            await tool.run(CTX, args)
        assert info.value.code == "URL_REFUSED", info.value.message
        assert answer[0] in info.value.message


async def test_resolve_public_refuses_if_any_answer_is_not_public(
    stub_resolver: dict[str, list[str] | OSError],
) -> None:
    stub_resolver["mixed.localhost"] = ["8.8.8.8", "10.1.2.3"]
    with pytest.raises(URLRefused, match=re.escape("10.1.2.3")):
        await resolve_public("mixed.localhost", 443, timeout_s=1)


async def test_resolve_public_returns_public_answers(stub_resolver: dict[str, list[str] | OSError]) -> None:
    stub_resolver["public.localhost"] = ["8.8.8.8", "2606:4700:4700::1111", "8.8.8.8"]
    assert await resolve_public("public.localhost", 443, timeout_s=1) == ["8.8.8.8", "2606:4700:4700::1111"]


# -- registry -----------------------------------------------------------------------------


class EchoTool:
    name = "echo.say"
    description = "Echo the arguments."
    risk = RiskClass.READ
    parameters: dict[str, Any] = {"type": "object"}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        return args


class ForgetTool(EchoTool):
    name = "memory.forget"
    risk = RiskClass.DESTRUCTIVE


class ExtraTool(EchoTool):
    name = "extra.forget"
    risk = RiskClass.DESTRUCTIVE


class Closable(EchoTool):
    name = "closable.tool"
    closed = False

    async def aclose(self) -> None:
        self.closed = True


# Entry-point targets for the plugin tests (loaded for real through EntryPoint.load()).
PLUGIN_INSTANCE = EchoTool()


def plugin_factory(settings: Settings) -> Any:
    tool = EchoTool()
    tool.name = "factory.tool"
    tool.description = f"made with timeout {settings.http_timeout_s}"
    return tool


def plugin_shadowing_builtin(settings: Settings) -> Any:
    tool = EchoTool()
    tool.name = "http.get"
    return tool


def plugin_that_raises(settings: Settings) -> Any:
    raise RuntimeError("plugin exploded")


NOT_A_TOOL = {"name": "nope"}


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    yield ToolRegistry([EchoTool(), ForgetTool()])


@pytest.mark.parametrize(
    ("patterns", "names"),
    [
        ([], []),
        (["echo.say"], ["echo.say"]),
        (["*"], ["echo.say", "memory.forget"]),
        (["memory.*", "echo.*"], ["echo.say", "memory.forget"]),
        (["memory.*", "memory.forget"], ["memory.forget"]),  # offered once
        (["plugin.not.installed", "http.*"], []),
        (["ECHO.*"], ["echo.say"]),  # compared case-folded, as policy rules are
    ],
)
def test_specs_match_patterns(registry: ToolRegistry, patterns: list[str], names: list[str]) -> None:
    specs = registry.specs(patterns)
    assert [s.name for s in specs] == names
    for spec in specs:
        tool = registry.get(spec.name)
        assert tool is not None
        assert (spec.risk, spec.description, spec.parameters) == (
            tool.risk,
            tool.description,
            tool.parameters,
        )


def test_registry_lookups(registry: ToolRegistry) -> None:
    assert registry.get("nope") is None
    assert registry.risk_of("memory.forget") is RiskClass.DESTRUCTIVE
    with pytest.raises(KeyError):
        registry.risk_of("nope")
    assert registry.offered(["memory.*"], "memory.forget")
    assert not registry.offered(["memory.*"], "echo.say")
    assert not registry.offered(["*"], "not.registered")
    assert registry.names() == ["echo.say", "memory.forget"]


def test_register_rejects_duplicates_and_non_tools(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError):
        registry.register(EchoTool())
    bad = EchoTool()
    bad.name = "bad name*"
    with pytest.raises(TypeError):
        registry.register(bad)
    with pytest.raises(TypeError):
        registry.register(NOT_A_TOOL)  # type: ignore[arg-type]


async def test_aclose_closes_tools() -> None:
    tool = Closable()
    reg = ToolRegistry([tool])
    await reg.aclose()
    assert tool.closed


def _entry_point(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"{__name__}:{target}", group="enverif.tools")


async def test_default_registry_loads_plugins_and_skips_broken_ones(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    eps = [
        _entry_point("instance", "PLUGIN_INSTANCE"),
        _entry_point("factory", "plugin_factory"),
        _entry_point("shadow", "plugin_shadowing_builtin"),
        _entry_point("raises", "plugin_that_raises"),
        _entry_point("not-a-tool", "NOT_A_TOOL"),
        EntryPoint(name="missing", value="no_such_module_xyz:tool", group="enverif.tools"),
    ]

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "enverif.tools"
        return eps

    monkeypatch.setattr(registry_module, "entry_points", fake_entry_points)
    s = settings(allow_private=False, timeout_s=7.0)
    with caplog.at_level(logging.ERROR, logger=registry_module.__name__):
        reg = default_registry(s, extra=[ExtraTool()])
    try:
        assert reg.names() == [
            "agents.delegate", "agents.list", "echo.say", "extra.forget", "factory.tool", "http.get",
            "memory.forget", "memory.remember", "memory.search", "webhook.post",
        ]  # fmt: skip
        assert isinstance(reg.get("http.get"), HttpGetTool)  # the built-in was not replaced
        factory_tool = reg.get("factory.tool")
        assert factory_tool is not None and factory_tool.description == "made with timeout 7.0"
        assert reg.risk_of("webhook.post") is RiskClass.EXTERNAL_WRITE
        assert reg.risk_of("http.get") is RiskClass.READ
        skipped = " ".join(r.getMessage() for r in caplog.records)
        for name in ("shadow", "raises", "not-a-tool", "missing"):
            assert f"'{name}'" in skipped
    finally:
        await reg.aclose()


async def test_default_registry_without_plugins_has_the_http_builtins() -> None:
    reg = default_registry(settings(allow_private=False))
    try:
        assert {"http.get", "webhook.post"} <= set(reg.names())
        assert [s.name for s in reg.specs(["http.*", "webhook.post"])][:2] == ["http.get", "webhook.post"]
    finally:
        await reg.aclose()
