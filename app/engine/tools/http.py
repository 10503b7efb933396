"""Built-in HTTP tools: ``http.get`` (READ) and ``webhook.post`` (EXTERNAL_WRITE).

Outbound requests are an SSRF risk: the model picks the URL. Unless
``settings.http_allow_private_networks`` is set, every address a host resolves to must be
public, and the check happens *where the socket is opened* (a guarded httpcore network
backend), not only before the request. A check done only up front would be bypassed by a
redirect to ``http://127.0.0.1/`` or by DNS that answers differently the second time
(rebinding). The connection then goes to the very address that was checked, while TLS still
verifies the original host name.

Non-2xx responses are results, not errors: the model sees the status and decides. Bodies are
streamed and reading stops at ``settings.http_max_body_bytes``.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import json
import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from app.domain.policy import RiskClass
from app.engine.base import ToolContext, ToolError, ToolKind
from app.settings import Settings

MAX_URL_CHARS = 2_048
MAX_REDIRECTS = 5
_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class URLRefused(Exception):
    """Raised by the guarded backend; surfaces to the model as ``URL_REFUSED``."""


def is_public_address(ip: _IPAddress) -> bool:
    """True when ``ip`` is a routable public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # ::ffff:127.0.0.1 reaches 127.0.0.1; judge the embedded IPv4 address.
        return is_public_address(ip.ipv4_mapped)
    return ip.is_global and not (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


async def resolve_public(host: str, port: int, *, timeout_s: float) -> list[str]:
    """Resolve ``host`` and return its addresses, refusing if ANY of them is not public.

    All addresses are checked, not just the first: a name with one public and one private
    record would otherwise reach the private one whenever the resolver orders it first.
    """
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"resolving {host!r} timed out") from exc
    except OSError as exc:
        raise httpcore.ConnectError(f"could not resolve {host!r}: {exc}") from exc
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 scope id
        if not is_public_address(ipaddress.ip_address(address)):
            raise URLRefused(f"host {host!r} resolves to non-public address {address}")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise httpcore.ConnectError(f"could not resolve {host!r}")
    return addresses


class _PublicOnlyBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to checked public addresses."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend, *, resolve_timeout_s: float) -> None:
        self._inner = inner
        self._resolve_timeout_s = resolve_timeout_s

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve_public(host, port, timeout_s=timeout or self._resolve_timeout_s)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # addresses is never empty
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise URLRefused("unix sockets are not reachable from tools")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _build_client(settings: Settings) -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment would make the address check meaningless
    # (we would vet the proxy, not the target) and would leak tool traffic through it.
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    if not settings.http_allow_private_networks:
        # httpx has no public hook for the network backend; swap the pool it built for one
        # that uses ours (httpx is pinned to 0.28.x; tests cover the refusal end to end).
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=20,
            max_keepalive_connections=10,
            keepalive_expiry=5.0,
            network_backend=_PublicOnlyBackend(
                httpcore.AnyIOBackend(), resolve_timeout_s=settings.http_timeout_s
            ),
        )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(settings.http_timeout_s),
        trust_env=False,
        max_redirects=MAX_REDIRECTS,
        # Ask for an uncompressed body so the byte cap bounds memory (no decompression bombs).
        headers={"Accept-Encoding": "identity", "User-Agent": "enverif-tools/0.1"},
    )


def _check_args(args: object, required: set[str]) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise ToolError("INVALID_ARGUMENTS", "arguments must be an object")
    missing = sorted(required - set(args))
    if missing:
        raise ToolError("INVALID_ARGUMENTS", f"missing argument(s): {', '.join(missing)}")
    unknown = sorted(set(args) - required)
    if unknown:
        raise ToolError("INVALID_ARGUMENTS", f"unknown argument(s): {', '.join(unknown)}")
    return args


def _check_url(raw: object) -> httpx.URL:
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("INVALID_ARGUMENTS", "url must be a non-empty string")
    if len(raw) > MAX_URL_CHARS:
        raise ToolError("INVALID_ARGUMENTS", f"url is longer than {MAX_URL_CHARS} characters")
    try:
        url = httpx.URL(raw.strip())
    except httpx.InvalidURL as exc:
        raise ToolError("INVALID_ARGUMENTS", f"url is not valid: {exc}") from exc
    if url.scheme and url.scheme not in ("http", "https"):
        raise ToolError("URL_REFUSED", f"only http and https URLs are allowed, not {url.scheme!r}")
    if not url.is_absolute_url or not url.host:
        raise ToolError("INVALID_ARGUMENTS", "url must be absolute, like https://example.com/path")
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
                    data, truncated = await _read_capped(response, cap)
                finally:
                    await response.aclose()
        except URLRefused as exc:
            raise ToolError("URL_REFUSED", f"{exc} (private networks are not allowed)") from exc
        except TimeoutError as exc:
            limit = self._settings.http_timeout_s
            raise ToolError("HTTP_ERROR", f"{method} {url} timed out after {limit}s") from exc
        except httpx.TooManyRedirects as exc:
            raise ToolError("HTTP_ERROR", f"{method} {url}: more than {MAX_REDIRECTS} redirects") from exc
        except httpx.HTTPError as exc:
            raise ToolError("HTTP_ERROR", f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc
        return response.status_code, _decode(data, response.charset_encoding, final=not truncated), truncated


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


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
                "NO_IDEMPOTENCY_KEY", "webhook.post needs a recorded step to use as its idempotency key"
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
