"""GraphiQL, served whole by this server: no CDN, so it works offline (issue 11).

Its scripts and styles are vendored in ``app/graphql/graphiql/`` at the versions pinned in
``tools/graphiql/package.json`` (see ``tools/graphiql/update.py``). ``manifest.json`` there
records each file's sha384; the page carries it as the ``integrity`` attribute, so a browser
runs only the exact bytes that were vendored. The page adds a token bar: one bearer token for
HTTP requests and the websocket's ``connection_init`` payload.

The page carries the console's headers (docs/operating/security.md): a Content-Security-Policy
that runs only this server's scripts and the page's own inline script (by its hash), talks
only to this origin and may not be framed, so a page elsewhere cannot overlay it to make an
operator click. Styles may be inline: GraphiQL's editor sets them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import re
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

ASSETS_PATH = "/graphiql"
_PACKAGE = "app.graphql"
_DIR = "graphiql"


def _read(name: str) -> bytes:
    return resources.files(_PACKAGE).joinpath(_DIR, name).read_bytes()


def sha384(data: bytes) -> str:
    """Subresource Integrity form: ``sha384-`` + base64 of the digest."""
    return "sha384-" + base64.b64encode(hashlib.sha384(data).digest()).decode()


@functools.cache
def manifest() -> dict[str, dict[str, Any]]:
    """The vendored files by name: ``{file, package, version, source, sha384}``."""
    entries = json.loads(_read("manifest.json"))
    return {entry["file"]: entry for entry in entries}


@functools.cache
def page_html() -> str:
    """The GraphiQL page. Asset URLs are relative, so it works under any path prefix."""
    head, scripts = [], []
    for name, entry in manifest().items():
        src = html.escape(f"{ASSETS_PATH.lstrip('/')}/{name}")
        sri = html.escape(entry["sha384"])
        if name.endswith(".css"):
            head.append(f'<link rel="stylesheet" href="{src}" integrity="{sri}" />')
        else:
            scripts.append(f'<script src="{src}" integrity="{sri}"></script>')
    page = _read("page.html").decode()
    page = page.replace("<!-- STYLES -->", "\n    ".join(head))
    return page.replace("<!-- SCRIPTS -->", "\n    ".join(scripts))


_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _script_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


@functools.cache
def page_headers() -> dict[str, str]:
    """The page's security headers (the console's, with GraphiQL's inline code allowed)."""
    scripts = " ".join(_script_hash(s) for s in _INLINE_SCRIPT.findall(page_html()))
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in manifest():  # only the vendored files: no paths, no manifest, no page
        return Response("not found", status_code=404, media_type="text/plain")
    media_type = _MEDIA_TYPES[name[name.rindex(".") :]]
    # no-cache: revalidated each load, so an update of the vendored files is never mixed
    # with a stale cached one (whose integrity would no longer match the page).
    return Response(_read(name), media_type=media_type, headers={"Cache-Control": "no-cache"})


def routes() -> list[Route]:
    return [Route(ASSETS_PATH + "/{name}", asset, methods=["GET", "HEAD"])]
