"""Secrets that are words or short codes: one-time-password seeds, wallet seed phrases,
recovery codes. None has a token prefix; each is recognised by its own structure.

* **TOTP seed**: an ``otpauth://`` URI with a ``secret=`` (or a migration export), or a
  base32 run of 16+ characters (grouped by fours or not) near words such as *TOTP*, *2FA*,
  *authenticator*, *setup key*, *seed*.
* **BIP39 seed phrase**: 12 or more words in a row, all from the BIP-0039 English list
  (``bip39_english.txt``: 2048 words, SHA-256 2f5eed53…dbda as published with the BIP).
  Ordinary prose does not do that: the list has none of the words sentences are held
  together by (*the*, *of*, *and*, *is*, *to*, *a*).
* **Recovery codes**: *recovery / backup / emergency codes* followed by codes shaped like
  ``a1b2c-3d4e5``, ``1234 5678`` or ``k3j4h5g6f7``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Final

from app.domain.credentials.text import occurrences

BIP39_WORDS_FILE = "bip39_english.txt"
MIN_SEED_WORDS = 12


@cache
def bip39_words() -> frozenset[str]:
    text = files("app.domain.credentials").joinpath(BIP39_WORDS_FILE).read_text("utf-8")
    return frozenset(text.split())


_OTPAUTH: Final = re.compile(r"otpauth(?:-migration)?://\S*?(?:[?&](?:secret|data)=)[A-Za-z0-9%+/=]{8,}")
_TOTP_CONTEXT: Final = re.compile(
    r"\b(?:totp|hotp|2fa|mfa|otp|authenticator|two[- ]factor|setup[- ]key|seed|secret[- ]key)\b"
)
# One unbroken run, or groups of four (``JBSW Y3DP EHPK 3PXP``) as authenticator apps show them.
_BASE32_RUN: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z2-7]{16,}=*|[A-Za-z2-7]{4}(?:[ \-][A-Za-z2-7]{4}){3,})(?![A-Za-z0-9])"
)
_RECOVERY_CONTEXT: Final = re.compile(
    r"\b(?:recovery|backup|emergency|scratch|one[- ]time|2fa|mfa|two[- ]factor)[\s_\-]+(?:codes?|keys?)\b"
)
_RECOVERY_CODE: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]{4,6}-[A-Za-z0-9]{4,6}|\d{4}[ \-]\d{4}|\d{8}|[a-z0-9]{10})(?![A-Za-z0-9])"
)
# Numbers and list punctuation between seed words (``1. abandon 2. ability``) are spaces.
_SEPARATORS: Final = str.maketrans(dict.fromkeys("0123456789.,;:()-\n\t\r", " "))
_TOTP_WORDS: Final = ("totp", "hotp", "2fa", "mfa", "otp", "authenticator", "two-factor", "two factor", "setup key",
                      "setup-key", "seed", "secret key", "secret-key")  # fmt: skip
_RECOVERY_WORDS: Final = ("recovery", "backup", "emergency", "scratch", "one time", "one-time", "2fa", "mfa",
                          "two-factor", "two factor")  # fmt: skip


def _seed_like(run: str) -> bool:
    body = run.replace(" ", "").replace("-", "").rstrip("=")
    if len(body) < 16:
        return False
    # Random base32 has digits 2-7 in one character of five; 16 letters without one and
    # with the vowels of words is a phrase (``word list here also``), not a seed.
    if any(c.isdigit() for c in body):
        return True
    vowels = sum(c in "aeiouAEIOU" for c in body)
    return vowels / len(body) < 0.3 and (body.isupper() or body.islower())


def _totp(text: str, low: str) -> bool:
    if "otpauth" in low and _OTPAUTH.search(text):
        return True
    source = text if len(text) == len(low) else low
    starts = occurrences(low, _TOTP_WORDS)
    contexts = (
        _TOTP_CONTEXT.finditer(low) if starts is None else (_TOTP_CONTEXT.match(low, at) for at in starts)
    )
    for context in contexts:
        if context is not None:
            window = source[context.end() : context.end() + 64]
            if any(_seed_like(m.group()) for m in _BASE32_RUN.finditer(window)):
                return True
    return False


def _seed_phrase(text: str, low: str) -> bool:
    # One byte per word, 1 when it is on the list (map keeps the loop in C): a phrase is
    # MIN_SEED_WORDS ones in a row.
    on_list = bytes(map(bip39_words().__contains__, low.translate(_SEPARATORS).split()))
    return b"\x01" * MIN_SEED_WORDS in on_list


def _recovery_codes(text: str, low: str) -> bool:
    starts = occurrences(low, _RECOVERY_WORDS)
    contexts = (
        _RECOVERY_CONTEXT.finditer(low)
        if starts is None
        else (_RECOVERY_CONTEXT.match(low, at) for at in starts)
    )
    for context in contexts:
        if context is not None:
            window = low[context.end() : context.end() + 200]
            if any(any(c.isdigit() for c in m.group()) for m in _RECOVERY_CODE.finditer(window)):
                return True
    return False


def find_seed(text: str, low: str) -> str | None:
    if _totp(text, low):
        return "TOTP Seed"
    if _recovery_codes(text, low):
        return "Recovery Codes"
    if _seed_phrase(text, low):
        return "BIP39 Seed Phrase"
    return None
