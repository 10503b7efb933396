"""Encoded runs, decoded so the guard can read what they say.

A credential URL-encoded (``password%3Dhunter2``), in base64 (``cGFzc3dvcmQ9aHVudGVyMg==``)
or in hex (``70617373776f72643d…``, ``\\x70\\x61…``) hides from every pattern; its decoded
text does not. ``decoded`` yields the texts to scan again, each with the name of its
encoding. Bounded: at most ``MAX_RUNS`` runs per text, each at most ``MAX_RUN_CHARS``, and
the caller stops at ``MAX_DEPTH`` (base64 of URL-encoded text is two levels).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final
from urllib.parse import unquote

from app.domain.credentials.entropy import decodes_to_text
from app.domain.credentials.text import long_chunks

MAX_DEPTH = 2
MAX_RUNS = 32
MAX_RUN_CHARS = 16_384
MIN_RUN_CHARS = 12

_PERCENT: Final = re.compile(r"%[0-9A-Fa-f]{2}")
# Each pattern starts where a run starts (the look-behind): without it, ``re`` tries every
# position inside every word again, quadratic in the word's length.
_BASE64_RUN: Final = re.compile(rf"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{{{MIN_RUN_CHARS},}}={{0,2}}")
_HEX_RUN: Final = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Fa-f])")
_HEX: Final = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")
_HEX_ESCAPES: Final = re.compile(r"(?:\\x[0-9A-Fa-f]{2}){4,}")


def decoded(text: str) -> Iterator[tuple[str, str]]:
    """(encoding, decoded text) for the encoded runs of ``text`` that decode to text."""
    if _PERCENT.search(text):
        unquoted = unquote(text)
        if unquoted != text:
            yield "URL-encoded", unquoted
    runs = 0
    chunks = long_chunks(text, MIN_RUN_CHARS)
    for pattern, encoding in ((_BASE64_RUN, "base64"), (_HEX_RUN, "hex")):
        for match in (m for chunk in chunks for m in pattern.finditer(chunk)):
            run = match.group()
            if len(run) > MAX_RUN_CHARS or run.isalpha() or run.isdigit():
                continue  # a word or a number, not an encoding
            plain = decodes_to_text(run)
            if plain is not None:
                yield ("hex" if _HEX.match(run) else encoding) + "-encoded", plain
            runs += 1
            if runs >= MAX_RUNS:
                return
    if "\\x" in text:
        for match in _HEX_ESCAPES.finditer(text):
            plain = decodes_to_text(match.group().replace("\\x", ""))
            if plain is not None:
                yield "hex-encoded", plain
