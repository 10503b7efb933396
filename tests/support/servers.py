"""Real HTTP servers for tests: uvicorn on 127.0.0.1 with an ephemeral port, in the test's
own event loop, and a webhook sink that behaves like an idempotent receiver."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


@asynccontextmanager
async def serve(
    app: Any, *, lifespan: str = "off", start_timeout_s: float = 15, sock: socket.socket | None = None
) -> AsyncIterator[str]:
    """Run ``app`` with a real uvicorn on a free port, in this event loop; yields its base
    URL (``http://127.0.0.1:PORT``). ``sock``: a bound loopback socket to listen on instead
    (its options, say a small send buffer, pass to the connections it accepts)."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan=lifespan)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=None if sock is None else [sock]))
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if task.done():
            task.result()
            raise AssertionError("uvicorn exited during start-up")
        assert time.monotonic() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@dataclass
class Delivery:
    key: str | None
    payload: Any
    arrived_at: float
    completed_at: float | None = None


@dataclass
class Sink:
    """An idempotent webhook receiver: a key is completed at most once; a repeated key after
    completion gets the stored answer and does not count again. ``delay_s`` holds each new
    delivery open (to kill a worker while it is in flight)."""

    delay_s: float = 0.0
    deliveries: list[Delivery] = field(default_factory=list)
    completed: dict[str, int] = field(default_factory=dict)
    pages: int = 0

    def completions(self, key: str) -> int:
        return self.completed.get(key, 0)

    def in_flight(self) -> int:
        return sum(1 for d in self.deliveries if d.completed_at is None)

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            key = request.headers.get("idempotency-key")
            delivery = Delivery(key=key, payload=await request.json(), arrived_at=time.time())
            self.deliveries.append(delivery)
            if key is not None and key in self.completed:
                return JSONResponse({"received": True, "duplicate": True})
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if key is not None:
                if key in self.completed:  # a concurrent retry finished first
                    return JSONResponse({"received": True, "duplicate": True})
                self.completed[key] = self.completed.get(key, 0) + 1
            delivery.completed_at = time.time()
            return JSONResponse({"received": True, "duplicate": False})

        async def page(request: Request) -> Response:
            self.pages += 1
            return PlainTextResponse(f"page {request.query_params.get('n', '0')}")

        async def slow(request: Request) -> Response:
            await asyncio.sleep(float(request.query_params.get("s", "5")))
            return PlainTextResponse("slow")

        async def fail(request: Request) -> Response:
            return PlainTextResponse("boom", status_code=int(request.query_params.get("code", "500")))

        return Starlette(
            routes=[
                Route("/hook", hook, methods=["POST"]),
                Route("/page", page),
                Route("/slow", slow),
                Route("/fail", fail),
                Route("/down/{rest:path}", fail, methods=["GET", "POST"]),
            ]
        )


@asynccontextmanager
async def sink_server(delay_s: float = 0.0) -> AsyncIterator[tuple[Sink, str]]:
    sink = Sink(delay_s=delay_s)
    async with serve(sink.app()) as url:
        yield sink, url


@contextmanager
def serve_in_thread(app: Any) -> Iterator[int]:
    """Run ``app`` with uvicorn in its own thread and event loop (for module-scoped servers
    shared by many tests, each with its own loop); yields the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", ws="none", http="h11", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "test server failed to start"
            time.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
