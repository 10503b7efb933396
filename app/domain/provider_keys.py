"""Where a model provider's API key may be sent (``ENVERIF_PROVIDER_KEYS``). Pure.

The deployment binds each key variable to the base URLs it may go to::

    {"OPENAI_API_KEY": ["https://api.openai.com/v1"], "ANTHROPIC_API_KEY": ["https://api.anthropic.com"]}

An agent's model config names a key variable and a ``base_url``; the worker sends the key
to that URL. A workspace admin writes the config, the deployment owns the key: so the URL
must lie under one the key is bound to, checked when the agent is written and again on the
very request, before a byte is sent.

"Under" is decided on a normalised form (``Endpoint``): scheme, host, port and path, equal
up to a path prefix that ends at a segment boundary (``/v1`` covers ``/v1/chat`` but not
``/v1x``). Normalising is strict rather than clever: anything a client, a resolver or a
server could read two ways is refused outright, never guessed at::

    userinfo (https://api.vendor@evil/)      refused: a base URL carries no credentials
    query, fragment                          refused: a base URL has neither
    non-ASCII (IDNA, fullwidth dots)         refused: write a host as its xn-- form
    spaces, controls, backslashes            refused
    %-encoding of anything but a-z0-9-._~    refused (%2F, %25, %00 ...); of those, decoded
    '.', '..' or empty path segments         refused (after decoding: %2e%2e too)
    numeric hosts that are not a dotted quad refused (127.1, 0x7f.1, 2130706433)
    case of scheme and host                  folded (paths keep theirs)
    one trailing dot of a host               dropped (api.vendor.com. is api.vendor.com)
    the default port                         filled in (https -> 443, http -> 80)
    one trailing slash                       dropped
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SCHEMES = {"http": 80, "https": 443}
MAX_URL_CHARS = 2_048
_PRINTABLE_ASCII = re.compile(r"^[\x21-\x7e]+$")
_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?$")
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
# Characters a path may hold as they are (RFC 3986 pchar without '%', plus '/').
_PATH_CHARS = re.compile(r"^[A-Za-z0-9\-._~!$&'()*+,;=:@/]*$")
_UNRESERVED = re.compile(r"^[A-Za-z0-9\-._~]$")
_PERCENT = re.compile(r"%(..)")


class BadURL(ValueError):
    """Not a base URL a key could be bound to or sent to; the message says why."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str  # "http" or "https"
    host: str  # lower-case ASCII without a trailing dot; an IPv6 address compressed, no brackets
    port: int  # explicit, or the scheme's default
    path: str  # "" or "/a/b": no trailing slash, no dot or empty segments, %-decoded

    def covers(self, other: Endpoint) -> bool:
        """Whether ``other`` is this endpoint or lies under it (a path prefix that ends at
        a segment boundary)."""
        if (self.scheme, self.host, self.port) != (other.scheme, other.host, other.port):
            return False
        return other.path == self.path or other.path.startswith(self.path + "/")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if SCHEMES[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.path}"


def parse_endpoint(url: object) -> Endpoint:
    """The normalised form of a base URL written by an operator or an admin; ``BadURL``
    saying what is wrong with it otherwise."""
    if not isinstance(url, str) or not url:
        raise BadURL("must be an http(s) URL")
    if len(url) > MAX_URL_CHARS:
        raise BadURL(f"is longer than {MAX_URL_CHARS} characters")
    if not _PRINTABLE_ASCII.match(url):
        raise BadURL("must be ASCII without spaces or control characters (write a host as its xn-- form)")
    if "\\" in url:
        raise BadURL("may not contain a backslash")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise BadURL("must be an absolute http(s) URL, like https://api.example.com/v1")
    if "?" in rest or "#" in rest:
        raise BadURL("may not have a query or a fragment")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        raise BadURL("may not carry credentials (user:password@)")
    host, port = _split_authority(authority)
    return endpoint(scheme, host, port, slash + path)


def endpoint(scheme: str, host: str, port: int | None, path: str) -> Endpoint:
    """The normalised form of a URL's parts (as an HTTP client holds them: ``host`` in ASCII,
    ``path`` still %-encoded, without its query); ``BadURL`` if any part is refused."""
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise BadURL("must be an http or https URL")
    if port is not None and not 1 <= port <= 65_535:
        raise BadURL("has a port outside 1-65535")
    return Endpoint(scheme, _normal_host(host), port or SCHEMES[scheme], _normal_path(path))


def key_may_go(bindings: Mapping[str, Iterable[Endpoint]], key_env: str, url: Endpoint) -> bool:
    """Whether the key in ``key_env`` may be sent to ``url``."""
    return any(bound.covers(url) for bound in bindings.get(key_env, ()))


def _split_authority(authority: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        if not bracket:
            raise BadURL("has an unclosed '[' in its host")
        if after and not after.startswith(":"):
            raise BadURL("has something after its IPv6 host that is not a port")
        port_text = after[1:] if after else None
        host = "[" + host + "]"
    else:
        host, colon, port_text_raw = authority.rpartition(":")
        if not colon:
            host, port_text = authority, None
        else:
            port_text = port_text_raw
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not port_text.isascii() or len(port_text) > 5:
        raise BadURL("has a port that is not a number")
    return host, int(port_text)


def _normal_host(host: str) -> str:
    if not host:
        raise BadURL("has no host")
    if not _PRINTABLE_ASCII.match(host):
        raise BadURL("must have an ASCII host (write it as its xn-- form)")
    if host.startswith("[") and host.endswith("]"):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise BadURL("has an IPv6 host that does not parse") from None
        if address.scope_id is not None:  # [fe80::1%eth0]: an interface, not a destination
            raise BadURL("may not give an IPv6 host a zone ('%')")
        return address.compressed
    if "%" in host:
        raise BadURL("may not %-encode its host")
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]  # the same name, fully qualified
    labels = host.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels) or len(host) > 253:
        raise BadURL("has a host that is not a valid name")
    if _NUMERIC_LABEL.match(labels[-1]):
        # Resolvers and URL parsers read such a host as an IPv4 address, in any of several
        # notations: only the one that reads one way is accepted.
        try:
            if str(ipaddress.IPv4Address(host)) == host:
                return host
        except ValueError:
            pass
        raise BadURL("must write an IPv4 host as four decimal numbers, like 192.0.2.1")
    return host


def _normal_path(path: str) -> str:
    if path and not path.startswith("/"):
        raise BadURL("has a path that does not start with '/'")
    decoded = _PERCENT.sub(_decode_unreserved, path)
    if not _PATH_CHARS.match(decoded):
        raise BadURL("has a character in its path that must not appear there (or %-encoded)")
    if decoded.endswith("/"):
        decoded = decoded[:-1]
    segments = decoded.split("/")[1:]
    for segment in segments:
        if segment in ("", ".", ".."):
            raise BadURL("may not have empty, '.' or '..' segments in its path")
    return decoded


def _decode_unreserved(match: re.Match[str]) -> str:
    try:
        char = chr(int(match.group(1), 16))
    except ValueError:
        raise BadURL("has a '%' in its path that is not %-encoding") from None
    if not _UNRESERVED.match(char):
        raise BadURL("may only %-encode letters, digits and -._~ in its path")
    return char
