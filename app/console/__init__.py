"""The operator console: a static single-page app served at ``/console``.

Everything it needs ships in ``static/`` inside the package (plain ES modules, no build step,
no CDN), so the console works offline and ``make run`` serves it as it is. It is a client of
the public GraphQL API like any other: it holds no server-side state and the API does all
authorisation, so the pages are served to anyone and show nothing until a token signs in.

The Content-Security-Policy keeps the page to its own origin: scripts, styles and
connections (``/graphql`` over HTTP and websocket) come from here, or not at all.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).parent / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The assets change with the package; a browser revalidates instead of running stale code.
    "Cache-Control": "no-cache",
}


class _Assets(StaticFiles):
    """StaticFiles with the console's security headers on every answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


async def index(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)


async def slash(request: Request) -> Response:
    return RedirectResponse("/console", status_code=308)


routes: list[BaseRoute] = [
    Route("/console", index, methods=["GET", "HEAD"]),
    Route("/console/", slash, methods=["GET", "HEAD"]),
    Mount("/console/assets", app=_Assets(directory=STATIC_DIR), name="console-assets"),
]
