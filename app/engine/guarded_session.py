"""The HTTP tools' client: an aiohttp session under the address policy of ``app.engine.net``.

aiohttp costs about a quarter of httpx's CPU per request, and the tools' requests are on the
worker's hot path. The policy is the same as the providers' httpx client: every address a
name resolves to must be public (``resolve_public``), and the very address each socket
connects to is checked again, so IP literals, redirects and DNS rebinding are covered.
Imported only where tools run (the API process never loads aiohttp).

Errors::

    URLRefused          the target is not reachable under the policy (never retried)
    aiohttp.ClientError everything else, as aiohttp raises it
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import aiohttp
import httpcore
from aiohttp.abc import AbstractResolver, ResolveResult

from app.engine.net import URLRefused, is_public_address, resolve_public
from app.settings import Settings


class _PublicOnlyResolver(AbstractResolver):
    """aiohttp's resolver for the guarded session: every answer must be public
    (``resolve_public``), and the connection goes to the addresses returned here."""

    def __init__(self, *, timeout_s: float) -> None:
        self._timeout_s = timeout_s

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[ResolveResult]:
        try:
            addresses = await resolve_public(host, port, timeout_s=self._timeout_s)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise OSError(str(exc)) from exc  # aiohttp reports it as a DNS error
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


def _public_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """aiohttp's socket factory for the guarded session: the last check, on the very address
    a socket is about to connect to. It is what catches IP literals in URLs (aiohttp does not
    ask the resolver about those) and anything a future resolver path might let through."""
    family, type_, proto, _, sockaddr = addr_info
    address = str(sockaddr[0]).split("%", 1)[0]  # drop an IPv6 scope id
    if not is_public_address(ipaddress.ip_address(address)):
        raise URLRefused(f"address {address} is not public")
    return socket.socket(family=family, type=type_, proto=proto)


def guarded_session(
    settings: Settings, *, timeout_s: float, user_agent: str, max_connections: int = 20
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` whose every connection passes the address policy: names
    resolve through ``_PublicOnlyResolver`` (no DNS cache, so each new connection is checked
    on a fresh answer) and every socket is made by ``_public_socket``. Redirects open their
    connections the same way. Addresses are tried one after the other (no happy-eyeballs
    race), so a refusal is raised as such and never mixed into a race's connect errors."""
    guarded = not settings.http_allow_private_networks
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        keepalive_timeout=5.0,
        use_dns_cache=not guarded,
        resolver=_PublicOnlyResolver(timeout_s=timeout_s) if guarded else None,
        socket_factory=_public_socket if guarded else None,
        happy_eyeballs_delay=None,
    )
    # trust_env=False (aiohttp's default, stated): a proxy from the environment would make the
    # address check meaningless. No decompression, so a byte cap bounds memory.
    return aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        headers={"Accept-Encoding": "identity", "User-Agent": user_agent},
    )


async def read_capped_stream(content: aiohttp.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Read an aiohttp body up to ``cap`` bytes; returns (data, truncated)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in content.iter_any():
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False
