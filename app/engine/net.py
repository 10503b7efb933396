"""The one guarded HTTP client for everything a worker sends out: tools and model providers.

Outbound requests are an SSRF risk: a model picks tool URLs and an admin picks provider
``base_url``\\ s. Unless ``settings.http_allow_private_networks`` is set, every address a
host resolves to must be public, and the check happens *where the socket is opened* (a
guarded httpcore network backend), not only before the request. A check done only up front
would be bypassed by a redirect to ``http://127.0.0.1/`` or by DNS that answers differently
the second time (rebinding). The connection then goes to the very address that was checked,
while TLS still verifies the original host name.

The client keeps no cookies. One client serves every run of every workspace in a worker, so
a cookie a site set for one run would otherwise be sent on another workspace's request to
that site; a tool that needs a session passes its credentials explicitly, per request.

The vendors' SDKs (``openai``, ``anthropic``) and the MCP SDK are built on ``httpx2``, the successor of
``httpx`` with its own connection pool (``httpcore2``): ``guarded_sdk_client`` is the same
client for them (``guarded_mcp_client`` for MCP sessions), the same backend under ``httpcore2``,
so the guard stays exactly as strong.

Errors::

    URLRefused          the target is not reachable under the policy (never retried)
    httpx.HTTPError     everything else, as httpx (httpx2.HTTPError: httpx2) raises it
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpcore2
import httpx
import httpx2

from app.engine.asyncio_backend import AsyncioBackend, AsyncioBackend2
from app.settings import Settings

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class URLRefused(Exception):
    """Raised by the guarded backend when a target address is not allowed."""


# IPv6 ranges refused whatever Python's tables say (they differ between versions): deprecated
# or local-only prefixes that are not public destinations.
_NON_PUBLIC_IPV6 = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # IPv4-compatible (deprecated): ::10.0.0.1
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): translates inside one network
        "100::/64",  # discard-only
        "2001::/32",  # Teredo: tunnels to an IPv4 address hidden (XORed) in the address
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # SRv6 segment identifiers
        "fc00::/7",  # unique local
        "fec0::/10",  # site-local (deprecated, still routed like a private range)
    )
)
# The NAT64 well-known prefix: 64:ff9b::a.b.c.d is translated to a.b.c.d by the network.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public_address(ip: _IPAddress) -> bool:
    """True when ``ip`` is a routable public unicast address.

    An IPv6 address that carries an IPv4 address the network will deliver to (IPv4-mapped,
    6to4, NAT64) is judged by that IPv4 address: ``2002:a00:1::`` reaches 10.0.0.1.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return is_public_address(embedded)
        if any(ip in net for net in _NON_PUBLIC_IPV6):
            return False
    return ip.is_global and not (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return None


async def resolve_public(host: str, port: int, *, timeout_s: float, core: Any = httpcore) -> list[str]:
    """Resolve ``host`` and return its addresses, refusing if ANY of them is not public.

    All addresses are checked, not just the first: a name with one public and one private
    record would otherwise reach the private one whenever the resolver orders it first.
    ``core``: whose connect errors to raise (``httpcore``, or ``httpcore2`` under httpx2).
    """
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError as exc:
        raise core.ConnectTimeout(f"resolving {host!r} timed out") from exc
    except OSError as exc:
        raise core.ConnectError(f"could not resolve {host!r}: {exc}") from exc
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 scope id
        if not is_public_address(ipaddress.ip_address(address)):
            raise URLRefused(f"host {host!r} resolves to non-public address {address}")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise core.ConnectError(f"could not resolve {host!r}")
    return addresses


class _PublicOnly:
    """Opens TCP connections only to checked public addresses (for either httpcore)."""

    _core: Any = httpcore

    def __init__(self, inner: Any, *, resolve_timeout_s: float) -> None:
        self._inner = inner
        self._resolve_timeout_s = resolve_timeout_s

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        addresses = await resolve_public(
            host, port, timeout_s=timeout or self._resolve_timeout_s, core=self._core
        )
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (self._core.ConnectError, self._core.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # addresses is never empty
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        raise URLRefused("unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PublicOnlyBackend(_PublicOnly, httpcore.AsyncNetworkBackend):
    _core = httpcore


class _PublicOnlyBackend2(_PublicOnly, httpcore2.AsyncNetworkBackend):
    _core = httpcore2


class _NoCookies(httpx.Cookies):
    """A cookie store that stays empty: responses' ``Set-Cookie`` headers are ignored."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class _NoCookies2(httpx2.Cookies):
    def extract_cookies(self, response: httpx2.Response) -> None:
        return None


class _Cookieless:
    """Mixed into an ``AsyncClient`` (of either httpx) that never stores or sends cookies (see
    the module docstring). httpx's client always keeps a jar; this one's stays empty, which
    also saves parsing every response's headers into a cookie jar."""

    _no_cookies: Any

    @property
    def cookies(self) -> Any:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        if cookies:
            raise ValueError("this client keeps no cookies")


class _CookielessClient(_Cookieless, httpx.AsyncClient):
    _no_cookies = _NoCookies()


class _CookielessClient2(_Cookieless, httpx2.AsyncClient):
    _no_cookies = _NoCookies2()


@functools.cache
def _ssl_context(http: Any) -> ssl.SSLContext:
    """One verifying TLS context per process for each httpx, shared by every client: loading
    the CA bundle costs about 50 ms of CPU, which each new client paid twice."""
    context: ssl.SSLContext = http.create_ssl_context(trust_env=False)
    return context


def _guarded_transport(
    settings: Settings,
    *,
    http: Any,
    core: Any,
    backend: type[_PublicOnly],
    timeout_s: float,
    max_connections: int,
) -> Any:
    """An ``AsyncHTTPTransport`` of ``http`` (httpx or httpx2) whose connections open through
    ``backend`` unless private networks are allowed, on asyncio's own transports either way
    (app.engine.asyncio_backend: anyio's stock backend costs a request about 0.4 ms of CPU).

    trust_env=False: a proxy from the environment would make the address check meaningless (we
    would vet the proxy, not the target) and would leak traffic through it. httpx has no public
    hook for the network backend, so the pool it built is swapped for one that uses ours (both
    httpx versions are pinned; tests cover the refusal end to end)."""
    ssl_context = _ssl_context(http)
    transport = http.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    network_backend: Any = AsyncioBackend() if core is httpcore else AsyncioBackend2()
    if not settings.http_allow_private_networks:
        network_backend = backend(network_backend, resolve_timeout_s=timeout_s)
    transport._pool = core.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=max_connections,
        max_keepalive_connections=max(1, max_connections // 2),
        keepalive_expiry=5.0,
        network_backend=network_backend,
    )
    return transport


def guarded_client(
    settings: Settings,
    *,
    timeout_s: float,
    user_agent: str,
    max_redirects: int = 5,
    max_connections: int = 20,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose every connection passes the address policy, and that
    keeps no cookies.

    Redirects are not followed unless a request asks for it (httpx's default), and when
    one is, the redirect target is checked again as its connection opens.
    """
    transport = _guarded_transport(
        settings,
        http=httpx,
        core=httpcore,
        backend=_PublicOnlyBackend,
        timeout_s=timeout_s,
        max_connections=max_connections,
    )
    return _CookielessClient(
        transport=transport,
        timeout=httpx.Timeout(timeout_s),
        trust_env=False,
        max_redirects=max_redirects,
        # Ask for an uncompressed body so a byte cap bounds memory (no decompression bombs).
        headers={"Accept-Encoding": "identity", "User-Agent": user_agent},
    )


async def read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """Read a streamed body up to ``cap`` bytes; returns (data, truncated)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def guarded_sdk_client(
    settings: Settings, *, timeout_s: float, user_agent: str, max_connections: int = 20
) -> httpx2.AsyncClient:
    """``guarded_client`` for the vendors' SDKs, on httpx2 (see the module docstring): every
    connection passes the address policy, no cookies, no proxy from the environment, no
    redirects followed, an uncompressed body."""
    return _CookielessClient2(
        transport=_guarded_transport2(settings, timeout_s=timeout_s, max_connections=max_connections),
        timeout=httpx2.Timeout(timeout_s),
        trust_env=False,
        follow_redirects=False,
        headers={"Accept-Encoding": "identity", "User-Agent": user_agent},
    )


def guarded_mcp_client(
    settings: Settings, *, timeout_s: float, headers: dict[str, str], user_agent: str
) -> httpx2.AsyncClient:
    """The guarded client for one MCP server's streamable HTTP session (the MCP SDK speaks
    ``httpx2`` too): the same address policy, no proxy from the environment, no compression.
    One client per server connection, so the cookies a server sets reach that server of
    that workspace only."""
    return httpx2.AsyncClient(
        transport=_guarded_transport2(settings, timeout_s=timeout_s, max_connections=4),
        # Reads wait as long as a tool may run (the call's own deadline cuts it first).
        timeout=httpx2.Timeout(timeout_s, read=max(timeout_s, settings.tool_timeout_s)),
        trust_env=False,
        headers={"Accept-Encoding": "identity", "User-Agent": user_agent, **headers},
    )


def _guarded_transport2(
    settings: Settings, *, timeout_s: float, max_connections: int
) -> httpx2.AsyncHTTPTransport:
    """``_guarded_transport`` on httpx2, for the vendors' SDKs and MCP."""
    transport: httpx2.AsyncHTTPTransport = _guarded_transport(
        settings,
        http=httpx2,
        core=httpcore2,
        backend=_PublicOnlyBackend2,
        timeout_s=timeout_s,
        max_connections=max_connections,
    )
    return transport
