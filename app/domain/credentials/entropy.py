"""High-entropy strings, and the ordinary facts that look random but are not secrets.

A run of 20+ token characters that mixes letter cases and digits at nearly every
character, with a character distribution close to uniform, is taken for a key — unless it
is one of the things operators write down every day that look just as random:

* identifiers: UUIDs, ULIDs and SKUs (capitals and digits only), prefixed ids
  (``cus_…``), long camelCase names, slugs of words and hex ids;
* digests: commit ids and SHA-1/256/512 hex digests; MD5, SHA-224 and SHA-384 in hex and any
  digest in base64 when a word such as *md5*, *sha*, *digest*, *checksum*, *etag* or
  *integrity* stands just before it; SRI strings (``sha384-…``);
* content ids and public addresses: IPFS CIDs (v0 ``Qm…``, v1 base32), Bitcoin addresses
  (base58check verified, or bech32), Ethereum addresses and hashes (``0x`` + hex);
* encodings of text: base64 or hex that decodes to printable text is judged by what it
  decodes to (``decode``), not by how random its encoding looks — base64 of plain JSON
  is a fact;
* public keys (SSH public key lines, PEM public keys and certificates), Stripe publishable
  keys, tokens right after *id*, *doc*, *file*, *ref* (``doc id …``);
* domains, e-mail addresses, paths, URLs without a password, dates and numbers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import math
import re
from collections import Counter
from typing import Final

MIN_ENTROPY_TOKEN_CHARS = 20
BASE64_ENTROPY_LIMIT = 3.6
HEX_ENTROPY_LIMIT = 3.0
# Random keys switch between upper case, lower case and digits at nearly every character;
# identifiers and words rarely do.
CLASS_SWITCH_LIMIT = 0.3

# Hex digests that stand alone: commit ids (short and full), SHA-1, SHA-256, SHA-512.
HEX_DIGEST_LENGTHS: Final = frozenset({7, 8, 9, 10, 11, 12, 40, 64, 128})
# Lengths that are digests only when the text says so (MD5, SHA-224, SHA-384 in hex; 32 hex
# characters is also the shape of many API keys).
HEX_DIGEST_LENGTHS_IN_CONTEXT: Final = frozenset({32, 56, 96})
BASE64_DIGEST_BYTES: Final = frozenset({16, 20, 28, 32, 48, 64})
_DIGEST_CONTEXT: Final = re.compile(
    r"(?i)(?:md5|sha-?(?:1|224|256|384|512)?|hash|digest|checksum|etag|fingerprint|integrity|crc32?|sum)\W{0,12}$"
)

# Inside a whitespace-separated chunk, what separates tokens (``a,b``, ``(x)``, ``"y"``).
_TOKEN_SPLIT: Final = re.compile(r"[,;()\[\]{}<>\"'`|]+")
# Public keys and certificates are published on purpose (their bodies look random); an SSH
# public key line, or a PEM block that is not a private key.
_PUBLIC_KEY: Final = re.compile(
    r"(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh\.com)\s+AAAA[A-Za-z0-9+/]+={0,3}"
    r"|-----BEGIN (?P<kind>(?:RSA |EC |PGP )?PUBLIC KEY(?: BLOCK)?|CERTIFICATE(?: REQUEST)?|X509 CRL)-----"
    r"[A-Za-z0-9+/=\s:\-]*?-----END (?P=kind)-----"
)
_TOKEN_TRIM = ".:!?*"
_SEPARATOR: Final = re.compile(r"[-_./]+")
_HEX: Final = re.compile(r"^[0-9a-fA-F]+$")
_UUID: Final = re.compile(
    r"^[{(]?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}[)}]?$"
)
_EMAIL: Final = re.compile(r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}$")
_DOMAIN: Final = re.compile(r"^(?:[A-Za-z0-9\-]+\.)+[A-Za-z]{2,}$")
_PREFIXED_ID: Final = re.compile(
    r"^(?:[a-z]{2,12}_[A-Za-z0-9]{6,}|pk_(?:live|test)_[A-Za-z0-9]{16,})$"
)  # pk_: publishable
# Words that say the next token is an identifier (``doc id …``, ``client id: …``).
_ID_CONTEXT: Final = re.compile(
    r"(?i)\b(?:id|ids|identifier|uid|guid|doc|document|file|folder|page|object|record|ref)\W{0,3}$"
)
_ISO_TIME: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+\-]\d{2}:?\d{2})?)?$"
)
_SRI: Final = re.compile(r"^(?:sha(?:256|384|512)-[A-Za-z0-9+/]{43,86}={0,2})+$")
_PREFIXED_DIGEST: Final = re.compile(
    r"^(?:sha(?:1|224|256|384|512)|md5|blake2b?|crc32):[0-9a-fA-F]+$", re.IGNORECASE
)
_CAMEL: Final = re.compile(r"^(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}(?=[A-Z][a-z]|\d|$))+\d{0,4}$")
_CID_V0: Final = re.compile(r"^Qm[1-9A-HJ-NP-Za-km-z]{44}$")
_CID_V1: Final = re.compile(r"^b[a-z2-7]{58,}$")
_BASE58: Final = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_BTC_LEGACY: Final = re.compile(rf"^[13][{_BASE58}]{{25,34}}$")
_BECH32: Final = re.compile(r"^(?:bc|tb|ltc)1[02-9ac-hj-np-z]{11,87}$")
_ETH: Final = re.compile(r"^0x(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
_BASE64_TEXT: Final = re.compile(r"^[A-Za-z0-9+/_\-]+={0,2}$")


def shannon_entropy(data: str) -> float:
    """Bits per character of ``data``'s own character distribution."""
    if not data:
        return 0.0
    counts = Counter(data)
    total = len(data)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _class_switches(token: str) -> float:
    def kind(c: str) -> int:
        return 0 if c.isdigit() else 1 if c.isupper() else 2 if c.islower() else 3

    # Punctuation does not count: slugs (``acme-2026-q3``) switch at every dash.
    kinds = [kind(c) for c in token if c.isalnum()]
    return sum(a != b for a, b in itertools.pairwise(kinds)) / max(len(kinds) - 1, 1)


def base58check(token: str) -> bool:
    """Whether ``token`` is base58 with a valid 4-byte double-SHA-256 checksum (Bitcoin's
    legacy addresses): a random string passes with probability 2^-32."""
    number = 0
    for c in token:
        index = _BASE58.find(c)
        if index < 0:
            return False
        number = number * 58 + index
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    raw = b"\0" * (len(token) - len(token.lstrip("1"))) + raw
    if len(raw) < 5:
        return False
    payload, checksum = raw[:-4], raw[-4:]
    return hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4] == checksum


def decodes_to_text(token: str) -> str | None:
    """What base64 (standard or URL-safe, padding optional) or hex ``token`` decodes to, when
    that is printable UTF-8 text; else None."""
    data: bytes | None = None
    if _HEX.match(token) and len(token) % 2 == 0:
        data = bytes.fromhex(token)
    elif _BASE64_TEXT.match(token):
        body = token.rstrip("=")
        try:
            data = base64.b64decode(
                body + "=" * (-len(body) % 4),
                altchars=b"-_" if ("-" in body or "_" in body) else None,
                validate=True,
            )
        except (binascii.Error, ValueError):
            return None
    if not data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    return text if printable >= 0.95 * len(text) and len(text) >= 4 else None


def _is_digest(token: str, before: str) -> bool:
    in_context = _DIGEST_CONTEXT.search(before) is not None
    if _HEX.match(token):
        return len(token) in HEX_DIGEST_LENGTHS or (
            in_context and len(token) in HEX_DIGEST_LENGTHS_IN_CONTEXT
        )
    if in_context and _BASE64_TEXT.match(token):
        body = token.rstrip("=")
        return len(body) * 3 // 4 in BASE64_DIGEST_BYTES
    return False


def _is_public_id(token: str) -> bool:
    return bool(
        _CID_V0.match(token)
        or _CID_V1.match(token)
        or _BECH32.match(token)
        or _ETH.match(token)
        or (_BTC_LEGACY.match(token) and base58check(token))
    )


def _is_ordinary(token: str, before: str) -> bool:
    return bool(
        _ID_CONTEXT.search(before)
        or _UUID.match(token)
        or _EMAIL.match(token)
        or _DOMAIN.match(token)
        or _PREFIXED_ID.match(token)
        or _ISO_TIME.match(token)
        or _SRI.match(token)
        or _PREFIXED_DIGEST.match(token)
        or _CAMEL.match(token)
        or not any(c.isalpha() for c in token)
        or _is_sequential(token)
        or _is_digest(token, before)
        or _is_public_id(token)
    )


_SEQUENCES: Final = ("abcdefghijklmnopqrstuvwxyz", "0123456789", "qwertyuiopasdfghjklzxcvbnm")


def _is_sequential(token: str) -> bool:
    low = token.lower()
    return any(low in (s * 3) for s in _SEQUENCES)


def _is_plain_segment(segment: str) -> bool:
    return segment.isalpha() or segment.isdigit() or bool(_HEX.match(segment))


def high_entropy(token: str, before: str = "") -> bool:
    """Whether ``token`` reads like a random key. ``before``: the text just before it (the
    words that say a hex or base64 string is a digest)."""
    if len(token) < MIN_ENTROPY_TOKEN_CHARS or _is_ordinary(token, before):
        return False
    if decodes_to_text(token) is not None:
        return False  # an encoding of text: ``decode`` scans what it says
    if _SEPARATOR.search(token):
        # Slugs and labels (``acme-run-3fa9c01b2e``): words, numbers and hex ids joined by
        # separators. Judge what is left once those ordinary segments are dropped.
        token = "".join(s for s in _SEPARATOR.split(token) if not _is_plain_segment(s))
        if len(token) < MIN_ENTROPY_TOKEN_CHARS:
            return False
    if _HEX.match(token):
        # Random hex is about 3/8 letters; mostly digits is a number-like id (an IBAN's
        # ``DE42…``), mostly letters a word (``deadbeefcafe``).
        letters = sum(c.isalpha() for c in token) / len(token)
        return 0.15 <= letters <= 0.7 and shannon_entropy(token) > HEX_ENTROPY_LIMIT
    has_lower = any(c.islower() for c in token)
    has_upper = any(c.isupper() for c in token)
    has_digit = any(c.isdigit() for c in token)
    if not has_lower or not (has_upper or has_digit):
        # Single-class runs are words or numbers; upper case and digits only are ids (ULIDs, SKUs).
        return False
    return shannon_entropy(token) > BASE64_ENTROPY_LIMIT and _class_switches(token) > CLASS_SWITCH_LIMIT


_CHUNK_TRIM = ",;()[]{}<>\"'`|"
_URL_START: Final = re.compile(r"(?i)^[a-z][a-z0-9+.\-]*://")


def find_random(text: str) -> bool:
    """Whether ``text`` holds a high-entropy token outside URLs, data URIs and public keys."""
    if len(text) < MIN_ENTROPY_TOKEN_CHARS:
        return False
    if "AAAA" in text or "-----BEGIN" in text:
        text = _PUBLIC_KEY.sub(" ", text)
    chunks = text.split()
    for index, chunk in enumerate(chunks):
        if len(chunk) < MIN_ENTROPY_TOKEN_CHARS:
            continue
        # URLs without a password are facts (their path segments are often long random-looking
        # ids); those with one, and tokens in their query, are the other rules' business.
        for part in _TOKEN_SPLIT.split(chunk.strip(_CHUNK_TRIM)):
            if (
                len(part) < MIN_ENTROPY_TOKEN_CHARS
                or _URL_START.match(part)
                or part.lower().startswith("data:")
            ):
                continue
            before = " ".join(chunks[max(0, index - 3) : index])[-40:] + " "
            # ``md5:<hex>``, ``host:port``, IPv6: each piece on its own, after the ones before it.
            for piece in part.split(":"):
                token = piece.strip(_TOKEN_TRIM)
                if "=" in token.rstrip("="):
                    token = token.split("=", 1)[-1]  # ``name=value``: the value on its own
                if len(token) >= MIN_ENTROPY_TOKEN_CHARS and high_entropy(token, before):
                    return True
                before = piece + ":"
    return False
