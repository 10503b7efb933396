"""One loopback server standing in for model vendors, for the whole test session.

The session's settings bind the test key variables (``ENVERIF_PROVIDER_KEYS``) to this
server's ``/bound`` prefix, so a provider key may go there and nowhere else. A test mounts
its own chat-completions app under a fresh prefix inside it (``mount``) and gives agents
that base URL; for the refused cases it uses ``unbound_url`` (the same server, a path
outside the binding) or another loopback port. Every request that reaches the server, at
any path, is recorded with its headers (``requests``), so a test can check that a key never
arrived where it was not bound.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from tests.support.servers import serve_in_thread

BOUND_PREFIX = "/bound"


@dataclass(frozen=True)
class Received:
    path: str
    authorization: str | None


@dataclass
class ModelServer:
    port: int = 0
    requests: list[Received] = field(default_factory=list)
    _apps: dict[str, ASGIApp] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bound_url(self) -> str:
        """What the session binds its key variables to."""
        return self.origin + BOUND_PREFIX

    def mount(self, app: ASGIApp) -> str:
        """Serve ``app`` under a fresh prefix inside the binding; returns that prefix's URL
        (``app`` at ``URL/v1/chat/completions`` sees ``/v1/chat/completions``)."""
        return self._mount(app, BOUND_PREFIX)

    def mount_unbound(self, app: ASGIApp, parent: str = "/elsewhere") -> str:
        """Serve ``app`` on this server but outside the binding (a refused destination)."""
        return self._mount(app, parent)

    def _mount(self, app: ASGIApp, parent: str) -> str:
        prefix = f"{parent}/{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._apps[prefix] = app
        return self.origin + prefix

    def seen(self, base_url: str) -> list[Received]:
        """The requests that reached ``base_url`` (or under it)."""
        path = base_url.removeprefix(self.origin)
        return [r for r in self.requests if r.path == path or r.path.startswith(path + "/")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests.append(Received(path, headers.get("authorization")))
        with self._lock:
            mounted = [(p, a) for p, a in self._apps.items() if path.startswith(p + "/")]
        if not mounted:
            await _not_found(send)
            return
        prefix, app = mounted[0]
        inner = path[len(prefix) :]
        await app({**scope, "path": inner, "raw_path": inner.encode(), "root_path": ""}, receive, send)


async def _not_found(send: Send) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"nothing mounted here"})


@contextmanager
def model_server() -> Iterator[ModelServer]:
    server = ModelServer()
    with serve_in_thread(server) as port:
        server.port = port
        yield server


def bindings(server: ModelServer, *names: str) -> dict[str, Any]:
    """ENVERIF_PROVIDER_KEYS binding ``names`` to the server's bound prefix."""
    return {name: [server.bound_url] for name in names}
