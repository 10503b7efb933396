"""Talking to MCP servers with the official ``mcp`` SDK: opening sessions, listing tools,
calling them (docs/extending/mcp.md).

A worker keeps one session per server (``McpConnections``, created at start-up and closed at
shutdown) and every run of that worker shares it: the SDK multiplexes concurrent requests
over one session. Each session lives in a task of its own, because the SDK's transports are
anyio context managers that must be left by the task that entered them, while calls come
from the run jobs' tasks. A session that breaks (the server restarted and forgot it, the
connection dropped, the stdio process exited) is dropped and opened again once, for the
call that found it broken; the call is then re-sent with the same ``_meta.idempotencyKey``.

What leaves the worker is checked as the rest of its traffic is: streamable HTTP goes through
the guarded client of ``app.engine.net`` (private addresses refused where the socket opens,
unless ``ENVERIF_HTTP_ALLOW_PRIVATE_NETWORKS``); header values are read from environment
variables on ``ENVERIF_MCP_SECRET_ENVS`` when a session opens, and are never stored, logged
or put in a message; a STDIO command runs only if its program is on
``ENVERIF_MCP_STDIO_COMMANDS``, with the SDK's minimal environment (none of the worker's
secrets).

Errors::

    McpRefused       the configuration is not allowed here (a variable, a command); never sent
    McpUnavailable   no session could be had, or it broke under the call (after one reopen)
    McpTooLarge      the answer was larger than a stored result may be
    mcp.shared.exceptions.MCPError   the server answered the request with a JSON-RPC error
                                     (``mcp_error()``)

The SDK is imported when a session first opens, not with this module: importing it costs
about a second of CPU, which every API, worker and CLI process would otherwise pay at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.domain.mcp import Transport
from app.engine.net import URLRefused, guarded_mcp_client

if TYPE_CHECKING:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError
    from mcp.types import CallToolResult, Tool

    from app.db.orm import McpServer
    from app.settings import Settings

log = logging.getLogger(__name__)

CLIENT_NAME, CLIENT_VERSION = "enverif", "0.1"
# A server listing more tools than this is cut off: each becomes a prompt entry.
MAX_TOOLS = 500
# How long closing a session may take before it is abandoned (a stdio server that hangs).
CLOSE_WAIT_S = 5.0
# JSON-RPC codes that mean "this session is gone", not "this request was refused".
_CONNECTION_CLOSED = -32000
_INVALID_REQUEST = -32600


@functools.cache
def mcp_error() -> type[MCPError]:
    """The SDK's ``MCPError`` (a JSON-RPC error answer), imported on first use."""
    from mcp.shared.exceptions import MCPError

    return MCPError


class McpRefused(Exception):
    """The server's configuration is not allowed by this deployment's settings."""


class McpUnavailable(Exception):
    """No session to the server, or the session broke under the call."""


class McpTooLarge(Exception):
    """The server's answer was larger than a result may be (never read whole)."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """What it takes to open a session to one server, as stored: hashable, so a session is
    kept per configuration (an edited server gets a new one)."""

    id: int
    workspace_id: int
    name: str
    transport: Transport
    url: str | None
    command: tuple[str, ...] | None
    headers: tuple[tuple[str, str], ...]  # (header, environment variable name)

    @classmethod
    def of_row(cls, row: McpServer) -> ServerSpec:
        return cls(
            id=row.id,
            workspace_id=row.workspace_id,
            name=row.name,
            transport=Transport(row.transport),
            url=row.url,
            command=None if row.command is None else tuple(row.command),
            headers=tuple(sorted((row.headers or {}).items())),
        )


def header_values(spec: ServerSpec, settings: Settings) -> dict[str, str]:
    """The headers to send, read from the environment now. Checked against the allowlist
    again (it may have narrowed since the server was registered)."""
    values: dict[str, str] = {}
    for header, env in spec.headers:
        if env not in settings.mcp_secret_envs:
            raise McpRefused(f"header {header}: the variable {env} is not in ENVERIF_MCP_SECRET_ENVS")
        value = os.environ.get(env)
        if value is None:
            raise McpRefused(f"header {header}: the variable {env} is not set")
        values[header] = value
    return values


def _stdio_parameters(spec: ServerSpec, settings: Settings) -> StdioServerParameters:
    from mcp.client.stdio import StdioServerParameters

    if not spec.command or spec.command[0] not in settings.mcp_stdio_commands:
        program = spec.command[0] if spec.command else ""
        raise McpRefused(f"{program!r} is not in ENVERIF_MCP_STDIO_COMMANDS")
    # env=None: the SDK's default environment (HOME, PATH, ...), none of the worker's own.
    return StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]), env=None)


async def _open(
    spec: ServerSpec, settings: Settings, stack: AsyncExitStack, *, timeout_s: float
) -> ClientSession:
    """Open and initialise a session inside ``stack`` (which closes it)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    if spec.transport is Transport.STDIO:
        params = _stdio_parameters(spec, settings)
        # A server's stderr is its own business, not the worker's log (opening /dev/null
        # does not block).
        devnull = stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230
        read, write = await stack.enter_async_context(stdio_client(params, errlog=devnull))
    else:
        assert spec.url is not None  # a STREAMABLE_HTTP server always has one (app.domain.mcp)
        http = guarded_mcp_client(
            settings, timeout_s=timeout_s, headers=header_values(spec, settings), user_agent="enverif-mcp/0.1"
        )
        await stack.enter_async_context(http)
        # An answer is read up to what a stored result may hold (its text and its structured
        # content may both carry it), so a 10 MB result is refused without being buffered.
        max_event = 2 * settings.max_result_bytes + 65_536
        read, write = await stack.enter_async_context(
            streamable_http_client(spec.url, http_client=http, max_sse_event_size=max_event)
        )
    session = await stack.enter_async_context(
        ClientSession(read, write, client_info=Implementation(name=CLIENT_NAME, version=CLIENT_VERSION))
    )
    await session.initialize()
    return session


def first_cause(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap what a transport raised)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """A message about a failed connection that names no secret: the exception's type, and
    its text only for errors whose text is ours or the network's."""
    exc = first_cause(exc)
    if isinstance(exc, McpRefused | McpUnavailable | URLRefused):
        return str(exc)
    if isinstance(exc, mcp_error()):
        return f"the server answered with error {exc.code}: {exc.message}"
    if isinstance(exc, OSError | TimeoutError):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return type(exc).__name__


async def list_tools(spec: ServerSpec, settings: Settings, *, timeout_s: float) -> list[Tool]:
    """One session, just long enough to list the server's tools (what a sync does)."""
    from mcp.types import PaginatedRequestParams

    try:
        async with asyncio.timeout(timeout_s), AsyncExitStack() as stack:
            session = await _open(spec, settings, stack, timeout_s=timeout_s)
            tools: list[Tool] = []
            cursor: str | None = None
            while len(tools) < MAX_TOOLS:
                page = await session.list_tools(
                    params=PaginatedRequestParams(cursor=cursor) if cursor else None
                )
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools[:MAX_TOOLS]
    except TimeoutError:
        raise McpUnavailable(f"no answer within {timeout_s:g} s") from None
    except (McpRefused, mcp_error()):
        raise
    except Exception as exc:
        cause = first_cause(exc)
        if isinstance(cause, McpRefused | mcp_error()):
            raise cause from None
        raise McpUnavailable(f"the server could not be reached: {describe(cause)}") from None


class _Session:
    """One open session and the task that owns it (see the module docstring)."""

    def __init__(self, spec: ServerSpec, settings: Settings, *, timeout_s: float) -> None:
        self.spec = spec
        self.session: ClientSession | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._own(settings, timeout_s), name=f"mcp-session-{spec.id}")

    async def _own(self, settings: Settings, timeout_s: float) -> None:
        try:
            async with AsyncExitStack() as stack:
                async with asyncio.timeout(timeout_s):
                    self.session = await _open(self.spec, settings, stack, timeout_s=timeout_s)
                self.ready.set()
                await self._stop.wait()
        except Exception as exc:  # a cancellation (the worker stopping) is not caught
            self.error = first_cause(exc)
            if not self.ready.is_set():
                log.info("mcp server %s (workspace %s): session failed: %s",
                         self.spec.name, self.spec.workspace_id, describe(exc))  # fmt: skip
        finally:
            self.ready.set()
            self.closed.set()

    async def aclose(self) -> None:
        self._stop.set()
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await asyncio.shield(self.closed.wait())
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


def _session_gone(exc: BaseException) -> bool:
    """True when the error says the session (not the request) is gone: worth a reopen."""
    if isinstance(exc, mcp_error()):
        return exc.code == _CONNECTION_CLOSED or (
            exc.code == _INVALID_REQUEST and "session" in exc.message.lower()
        )
    return not isinstance(exc, McpRefused | asyncio.CancelledError)


class McpConnections:
    """A worker's MCP sessions, one per server configuration, shared by all its runs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sessions: dict[ServerSpec, _Session] = {}
        self._lock = asyncio.Lock()
        self.opened = 0  # sessions opened so far (a reopen after a restart counts)

    async def _get(self, spec: ServerSpec, *, timeout_s: float) -> _Session:
        async with self._lock:
            current = self._sessions.get(spec)
            if current is None or current.closed.is_set():
                # An edited server has a new spec: its old session is closed, not kept.
                stale = [s for key, s in self._sessions.items() if key.id == spec.id and key != spec]
                for old in stale:
                    del self._sessions[old.spec]
                    asyncio.create_task(old.aclose())  # noqa: RUF006 - it ends on its own
                current = _Session(spec, self.settings, timeout_s=timeout_s)
                self._sessions[spec] = current
                self.opened += 1
        await current.ready.wait()
        if current.session is None:
            self._forget(current)
            error = current.error
            if isinstance(error, McpRefused):
                raise error
            raise McpUnavailable(f"the server could not be reached: {describe(error or McpUnavailable())}")
        return current

    def _forget(self, session: _Session) -> None:
        if self._sessions.get(session.spec) is session:
            del self._sessions[session.spec]

    async def call_tool(
        self, spec: ServerSpec, tool: str, arguments: dict[str, Any], *, key: str | None, timeout_s: float
    ) -> CallToolResult:
        """Call ``tool``; a broken session is reopened once and the call re-sent (same key)."""
        meta = {"idempotencyKey": key} if key is not None else None
        for attempt in range(2):
            current = await self._get(spec, timeout_s=timeout_s)
            session = current.session
            assert session is not None
            call = asyncio.ensure_future(
                session.call_tool(tool, arguments, read_timeout_seconds=timeout_s, meta=meta)  # type: ignore[arg-type]
            )
            closed = asyncio.ensure_future(current.closed.wait())
            try:
                await asyncio.wait({call, closed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                if not call.done():
                    call.cancel()
            error: BaseException
            if call.done() and not call.cancelled():
                exc = call.exception()
                if exc is None:
                    return call.result()
                error = first_cause(exc)
                if isinstance(error, mcp_error()) and "byte limit" in error.message:
                    raise McpTooLarge(error.message) from None
                if not _session_gone(error):
                    raise error
            else:
                with contextlib.suppress(BaseException):
                    await call
                error = current.error or McpUnavailable("the session closed")
            # The session is gone: forget it, and try once more on a new one.
            async with self._lock:
                self._forget(current)
            await current.aclose()
            if attempt:
                raise McpUnavailable(f"the session broke during the call: {describe(error)}")
            log.info("mcp server %s (workspace %s): session broke (%s); opening a new one",
                     spec.name, spec.workspace_id, describe(error))  # fmt: skip
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        sessions: Iterable[_Session] = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True)
