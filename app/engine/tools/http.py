"""Built-in HTTP tools: ``http.get`` (READ) and ``webhook.post`` (EXTERNAL_WRITE).

Outbound requests are an SSRF risk: the model picks the URL. Every connection goes through
the guarded client of ``app.engine.net``: unless ``settings.http_allow_private_networks`` is
set, loopback, private and link-local targets are refused where the socket is opened, so
redirects and DNS rebinding are checked too.

Non-2xx responses are results, not errors: the model sees the status and decides. Bodies are
streamed and reading stops at ``settings.http_max_body_bytes``.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from typing import Any

import httpx

from app.domain.model_errors import ModelErrorCode
from app.domain.policy import RiskClass
from app.engine.base import ToolContext, ToolError, ToolKind

# The address policy and the guarded client live in app.engine.net (shared with the model
# providers); re-exported here for the callers and tests that know them by this module.
from app.engine.net import URLRefused, guarded_client, is_public_address, read_capped, resolve_public
from app.settings import Settings

MAX_URL_CHARS = 2_048
MAX_REDIRECTS = 5
__all__ = ["HttpGetTool", "URLRefused", "WebhookPostTool", "is_public_address", "resolve_public"]


def _build_client(settings: Settings) -> httpx.AsyncClient:
    return guarded_client(
        settings,
        timeout_s=settings.http_timeout_s,
        user_agent="enverif-tools/0.1",
        max_redirects=MAX_REDIRECTS,
    )


def _check_args(args: object, required: set[str]) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, "arguments must be an object")
    missing = sorted(required - set(args))
    if missing:
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, f"missing argument(s): {', '.join(missing)}")
    unknown = sorted(set(args) - required)
    if unknown:
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, f"unknown argument(s): {', '.join(unknown)}")
    return args


def _check_url(raw: object) -> httpx.URL:
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, "url must be a non-empty string")
    if len(raw) > MAX_URL_CHARS:
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, f"url is longer than {MAX_URL_CHARS} characters")
    try:
        url = httpx.URL(raw.strip())
    except httpx.InvalidURL as exc:
        raise ToolError(ModelErrorCode.INVALID_ARGUMENTS, f"url is not valid: {exc}") from exc
    if url.scheme and url.scheme not in ("http", "https"):
        raise ToolError(
            ModelErrorCode.URL_REFUSED, f"only http and https URLs are allowed, not {url.scheme!r}"
        )
    if not url.is_absolute_url or not url.host:
        raise ToolError(
            ModelErrorCode.INVALID_ARGUMENTS, "url must be absolute, like https://example.com/path"
        )
    return url


class _HttpTool:
    """Shared plumbing: one client per tool instance, closed by ``aclose``."""

    kind = ToolKind.IO
    timeout_s: float | None = None  # ENVERIF_TOOL_TIMEOUT_S; requests have their own timeout too

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client = _build_client(settings)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(
        self, method: str, url: httpx.URL, *, follow_redirects: bool, **kwargs: Any
    ) -> tuple[int, str, bool]:
        """Send a request; return (status, body text capped at the byte limit, truncated)."""
        cap = self._settings.http_max_body_bytes
        try:
            # One deadline for the whole exchange: per-read timeouts alone would let a server
            # dripping a byte every few seconds hold a worker for a very long time.
            async with asyncio.timeout(self._settings.http_timeout_s):
                request = self._client.build_request(method, url, **kwargs)
                response = await self._client.send(request, stream=True, follow_redirects=follow_redirects)
                try:
                    data, truncated = await read_capped(response, cap)
                finally:
                    await response.aclose()
        except URLRefused as exc:
            raise ToolError(ModelErrorCode.URL_REFUSED, f"{exc} (private networks are not allowed)") from exc
        except TimeoutError as exc:
            limit = self._settings.http_timeout_s
            raise ToolError(ModelErrorCode.HTTP_ERROR, f"{method} {url} timed out after {limit}s") from exc
        except httpx.TooManyRedirects as exc:
            raise ToolError(
                ModelErrorCode.HTTP_ERROR, f"{method} {url}: more than {MAX_REDIRECTS} redirects"
            ) from exc
        except httpx.HTTPError as exc:
            raise ToolError(
                ModelErrorCode.HTTP_ERROR, f"{method} {url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return response.status_code, _decode(data, response.charset_encoding, final=not truncated), truncated


def _decode(data: bytes, charset: str | None, *, final: bool) -> str:
    try:
        decoder = codecs.getincrementaldecoder(charset or "utf-8")(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # Not final when truncated: a multi-byte character cut by the cap is dropped, not mangled.
    return decoder.decode(data, final=final)


class HttpGetTool(_HttpTool):
    name = "http.get"
    description = (
        "Fetch a URL with HTTP GET. Returns the status code and the response body as text "
        "(truncated to a size limit; 'truncated' says whether it was). Redirects are followed."
    )
    risk = RiskClass.READ
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "http or https URL"}},
        "required": ["url"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        url = _check_url(_check_args(args, {"url"})["url"])
        status, body, truncated = await self._request("GET", url, follow_redirects=True)
        return {"status": status, "body": body, "truncated": truncated}


class WebhookPostTool(_HttpTool):
    name = "webhook.post"
    description = (
        "POST a JSON payload to a URL. Returns the status code and the response body. "
        "Retries of the same step carry the same Idempotency-Key header."
    )
    risk = RiskClass.EXTERNAL_WRITE
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "http or https URL"},
            "payload": {"description": "any JSON value, sent as the request body"},
        },
        "required": ["url", "payload"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        if ctx.step_id is None:  # the loop only omits it for READ tools; never send without one
            raise ToolError(
                ModelErrorCode.NO_IDEMPOTENCY_KEY,
                "webhook.post needs a recorded step to use as its idempotency key",
            )
        checked = _check_args(args, {"url", "payload"})
        url = _check_url(checked["url"])
        # Redirects are not followed: re-sending a POST elsewhere is the receiver's call to
        # make explicit, and the model sees the 3xx status.
        status, body, _ = await self._request(
            "POST",
            url,
            follow_redirects=False,
            # Serialised here: httpx treats json=None as "no body", but null is a payload too.
            content=json.dumps(checked["payload"], separators=(",", ":"), ensure_ascii=False).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": str(ctx.step_id)},
        )
        return {"status": status, "body": body}
