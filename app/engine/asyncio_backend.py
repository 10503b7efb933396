"""An httpcore network backend on asyncio's own transports, under every outbound HTTP client.

httpcore's stock backend on asyncio is anyio's: each read and each write opens a cancel scope
and passes through anyio's checkpoints, which yield to the event loop. On a worker with 16
runs in flight that cost about 0.4 ms of CPU per request, 40 % of a small request's total
(docs/performance.md, the eighth sitting: "an HTTP request's transport"). This backend reads what the transport
has already received without yielding, times a read or a write out with one timer, and keeps
both directions bounded:

- reading: the transport stops reading once more than ``READ_BUFFER_LIMIT`` bytes wait
  unread, so a server that sends faster than a tool reads cannot fill the worker's memory,
  and starts again when the reader has taken them down to half of it (not at every read
  below the limit, which would pause and resume the transport for each chunk);
- writing: a write waits while the transport's buffer is over its high-water mark, each
  wait bounded by the write's timeout.

Errors are httpcore's own (``core``: httpcore, or httpcore2 under httpx2): ConnectError and
ConnectTimeout, ReadError and ReadTimeout, WriteError and WriteTimeout. A read that the
caller cancels raises CancelledError, never a timeout. The address policy is not here: it
wraps this backend (``net._PublicOnly``) and hands it the checked address.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine, Iterable
from typing import Any

import httpcore
import httpcore2
from httpcore._utils import is_socket_readable

READ_BUFFER_LIMIT = 256 * 1024
READ_RESUME_AT = READ_BUFFER_LIMIT // 2
# httpcore's names for what a stream tells about itself, and asyncio's.
_TRANSPORT_INFO = {
    "ssl_object": "ssl_object",
    "client_addr": "sockname",
    "server_addr": "peername",
    "socket": "socket",
}


def _wake(waiter: asyncio.Future[bool] | None, value: bool = True) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)


class _Protocol(asyncio.Protocol):
    """What the transport received, until the stream reads it, and the state of the link."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.buffer = bytearray()
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.read_waiter: asyncio.Future[bool] | None = None
        self.drain_waiter: asyncio.Future[bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_BUFFER_LIMIT and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        _wake(self.read_waiter)

    def eof_received(self) -> bool:
        self.eof = True
        _wake(self.read_waiter)
        return False  # HTTP/1.1 sends nothing after the server's EOF: close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = self.lost = True
        self.error = exc
        _wake(self.read_waiter)
        _wake(self.drain_waiter)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        _wake(self.drain_waiter)


class _Stream:
    """One connection, as httpcore's ``AsyncNetworkStream`` (of ``_core``)."""

    _core: Any = httpcore

    def __init__(self, transport: Any, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()

    async def _woken(self, timeout_s: float | None, *, drain: bool = False) -> bool:
        """Wait until the protocol wakes this stream (data or EOF; with ``drain``, room to
        write); False when ``timeout_s`` passed first. The waiter is the protocol's read or
        drain waiter for just this wait. One timer handle, no task cancellation to undo
        (``asyncio.timeout`` would cancel the task and uncancel it); a cancellation from
        outside propagates."""
        loop = self._loop
        protocol = self._protocol
        waiter: asyncio.Future[bool] = loop.create_future()
        if drain:
            protocol.drain_waiter = waiter
        else:
            protocol.read_waiter = waiter
        timer = loop.call_later(timeout_s, _wake, waiter, False) if timeout_s is not None else None
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if drain:
                protocol.drain_waiter = None
            else:
                protocol.read_waiter = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's interface
        protocol = self._protocol
        if not protocol.buffer and not protocol.eof:
            if not await self._woken(timeout):
                raise self._core.ReadTimeout(f"no data within {timeout} s")
        buffer = protocol.buffer
        if buffer:
            if len(buffer) <= max_bytes:
                data = bytes(buffer)
                buffer.clear()
            else:
                data = bytes(buffer[:max_bytes])
                del buffer[:max_bytes]
            if protocol.reading_paused and len(buffer) <= READ_RESUME_AT and not protocol.lost:
                protocol.reading_paused = False
                self._transport.resume_reading()
            return data
        if protocol.error is not None:
            raise self._core.ReadError(str(protocol.error) or type(protocol.error).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 - httpcore's interface
        if not buffer:
            return
        protocol = self._protocol
        if protocol.lost or self._transport.is_closing():
            raise self._core.WriteError("the connection is closed")
        self._transport.write(buffer)
        while protocol.writing_paused and not protocol.lost:
            if not await self._woken(timeout, drain=True):
                raise self._core.WriteTimeout(f"the peer read nothing within {timeout} s")
        if protocol.lost:
            raise self._core.WriteError(str(protocol.error or "the connection was closed"))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> Any:
        core = self._core
        try:
            if self._protocol.buffer:
                raise core.ConnectError("the server sent data before the TLS handshake")
            async with asyncio.timeout(timeout):
                tls = await self._loop.start_tls(
                    self._transport, self._protocol, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            self._transport.close()
            raise core.ConnectTimeout(f"the TLS handshake took over {timeout} s") from exc
        except (OSError, ssl.SSLError) as exc:  # ssl.SSLError is an OSError; named for the reader
            self._transport.close()
            raise core.ConnectError(str(exc)) from exc
        except BaseException:
            self._transport.close()
            raise
        if tls is None:  # the connection closed during the handshake
            raise core.ConnectError("the connection closed during the TLS handshake")
        self._protocol.transport = tls  # pause and resume reading on the decrypted side
        return type(self)(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        transport = self._transport
        if info in _TRANSPORT_INFO:
            return transport.get_extra_info(_TRANSPORT_INFO[info])
        if info == "is_readable":
            # An idle connection with something to read has been closed or broken by the
            # server: httpcore then drops it instead of sending a request on it.
            protocol = self._protocol
            return (
                bool(protocol.buffer)
                or protocol.eof
                or is_socket_readable(transport.get_extra_info("socket"))
            )
        return None


class _Backend:
    """httpcore's ``AsyncNetworkBackend`` (of ``_core``) on asyncio's transports."""

    _core: Any = httpcore
    _stream: type[_Stream] = _Stream

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        loop = asyncio.get_running_loop()
        local_addr = (local_address, 0) if local_address else None
        # asyncio turns TCP_NODELAY on, as httpcore expects.
        connecting = loop.create_connection(_Protocol, host, port, local_addr=local_addr)
        return await self._connected(connecting, f"{host}:{port}", timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        connecting = asyncio.get_running_loop().create_unix_connection(_Protocol, path)
        return await self._connected(connecting, path, timeout, socket_options)

    async def _connected(
        self,
        connecting: Coroutine[Any, Any, tuple[Any, _Protocol]],
        where: str,
        timeout_s: float | None,
        socket_options: Iterable[Any] | None,
    ) -> Any:
        try:
            async with asyncio.timeout(timeout_s):
                transport, protocol = await connecting
        except TimeoutError as exc:
            raise self._core.ConnectTimeout(f"connecting to {where} took over {timeout_s} s") from exc
        except OSError as exc:
            raise self._core.ConnectError(str(exc)) from exc
        for option in socket_options or ():
            transport.get_extra_info("socket").setsockopt(*option)
        return self._stream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class AsyncioStream(_Stream, httpcore.AsyncNetworkStream):
    _core = httpcore


class AsyncioStream2(_Stream, httpcore2.AsyncNetworkStream):
    _core = httpcore2


class AsyncioBackend(_Backend, httpcore.AsyncNetworkBackend):
    """For httpx (the tools)."""

    _core = httpcore
    _stream = AsyncioStream


class AsyncioBackend2(_Backend, httpcore2.AsyncNetworkBackend):
    """For httpx2 (the vendors' SDKs, MCP)."""

    _core = httpcore2
    _stream = AsyncioStream2
