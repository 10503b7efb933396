"""The stack in one process: the API (uvicorn) and/or a worker (arq) as two tasks of one event
loop. ``enverif dev`` runs both (against the embedded SQLite and Redis under
``ENVERIF_HOME`` unless ``ENVERIF_*`` say otherwise, with the demo workspace of
``app.dev.demo``); ``enverif serve`` only the API; ``enverif worker`` only the worker.

Signals: we own SIGINT/SIGTERM for the whole process. uvicorn's own capture would stop only
the API and then re-raise the signal after its shutdown (killing the process before the
worker closed); arq's would stop only the worker. Whichever task ends first — by a signal or
by failing — stops the other, so the process never keeps half a stack running.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import uvicorn

from app import http_limits
from app.settings import Settings

log = logging.getLogger(__name__)

# How long open connections (websocket subscriptions, slow requests) may hold up shutdown.
GRACEFUL_SHUTDOWN_S = 5
# How long each half may take to stop before it is cancelled; the worker gets its jobs' grace
# (ENVERIF_WORKER_STOP_GRACE_S) on top, for it lets them finish their step first.
STOP_TIMEOUT_S = 15.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StackError(Exception):
    """The stack could not start, or one of its halves died: a message for the operator."""


# -- listening ----------------------------------------------------------------------------


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the API's socket up front: a taken port is a clear error before anything starts,
    and ``--port 0`` yields the real port for the URLs we print and seed."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise StackError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise StackError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def base_url(sock: socket.socket) -> str:
    """The URL a client on this machine uses to reach the bound socket."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


# -- running ------------------------------------------------------------------------------


class _ApiServer(uvicorn.Server):
    """uvicorn without its signal capture: ``run_stack`` owns SIGINT/SIGTERM (module docstring)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve_api(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit:
        # uvicorn exits the process when the app's lifespan fails to start; it has logged why.
        raise StackError("the API failed to start (see the log above)") from None


# Allocations (net of frees) between young-generation collections: CPython's 700 makes a
# thousand subscribers' fan-out collect every few deliveries.
GC_THRESHOLD_0 = 10_000


def _exempt_startup_objects_from_gc() -> None:
    """What is alive once the stack has started (modules, the GraphQL schema, the mappers,
    the engines) lives as long as the process: ``gc.freeze`` puts it out of the cyclic
    collector's reach. A full collection then scans only what requests, runs and
    subscriptions allocated since; with a thousand live subscribers such a collection took
    190-340 ms of frozen event loop (bench/events.py), a latency spike for every client.
    Reference counting still frees these objects; only cycles among them stay."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])


async def run_stack(
    settings: Settings,
    sock: socket.socket | None,
    *,
    worker: Callable[[], Coroutine[Any, Any, None]] | None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve the API on ``sock`` and/or run ``worker()`` until a signal, or until one ends.

    A worker that ends by itself (``--burst`` drained the queue) is a normal stop; the API
    ending by itself, or either half raising, is a ``StackError``.
    """
    loop = asyncio.get_running_loop()
    server: _ApiServer | None = None
    if sock is not None:
        from app.main import create_app

        server = _ApiServer(
            uvicorn.Config(
                app=create_app(settings),
                log_level=settings.log_level,
                lifespan="on",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                ws_per_message_deflate=settings.ws_per_message_deflate,
                **http_limits.uvicorn_options(settings),
            )
        )
    stop = asyncio.Event()
    signals_seen = 0

    def _on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if server is not None and signals_seen > 1:
            server.force_exit = True  # a second Ctrl-C: stop waiting for open connections
        stop.set()

    def _own_signals() -> None:
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, _on_signal)

    _own_signals()
    api_task = asyncio.create_task(_serve_api(server, sock), name="enverif-api") if server and sock else None
    worker_task = asyncio.create_task(worker(), name="enverif-worker") if worker else None
    # arq's Worker installs its own loop signal handlers when it is built, in the worker task's
    # first step. They would stop only the worker's jobs, not this process: once that first
    # step has run (one trip round the loop), take the signals back.
    await asyncio.sleep(0)
    _own_signals()
    tasks = {t for t in (api_task, worker_task) if t is not None}
    stop_task = asyncio.create_task(stop.wait(), name="enverif-stop")
    done: set[asyncio.Task[Any]] = set()
    try:
        if server is not None and api_task is not None:
            # uvicorn offers `started` only as a flag, no event to await.
            while not server.started and not api_task.done() and not stop.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        if (server is None or server.started) and not stop.is_set():
            _exempt_startup_objects_from_gc()
            if on_ready is not None:
                on_ready()
        done, _ = await asyncio.wait({*tasks, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if server is not None:
            server.should_exit = True
        if worker_task is not None and not worker_task.done():
            worker_task.cancel()
        stop_task.cancel()
        stop_timeout_s = STOP_TIMEOUT_S + (settings.worker_stop_grace_s if worker_task is not None else 0)
        _, pending = await asyncio.wait(tasks, timeout=stop_timeout_s)
        for late in pending:
            log.warning("%s did not stop within %.0f s; cancelling it", late.get_name(), stop_timeout_s)
            late.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)
    if stop_task in done:
        return
    halves: list[tuple[asyncio.Task[None] | None, str]] = [(api_task, "API"), (worker_task, "worker")]
    for task, what in halves:
        if task is None or task not in done or task.cancelled():
            continue
        exc = task.exception()
        if isinstance(exc, StackError):
            raise exc
        if exc is not None:
            log.error("the %s stopped with an error", what, exc_info=exc)
            raise StackError(f"the {what} stopped unexpectedly: {exc}") from None
        if task is api_task:
            raise StackError("the API stopped unexpectedly (see the log above)")
