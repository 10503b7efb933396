"""The credential guard: memories must never hold secrets (CREDENTIAL_REJECTED).

Memories are injected into later runs' prompts and shown to operators, so a token an agent
saw once would otherwise live on in every future context. ``check_credentials`` is the one
check every memory write calls (the memory tools, ``createMemory``, ``updateMemory``), and
the planner screens a ``memory.remember`` call with it before its arguments are stored
(``screen_memory_write``): a refused call is kept with its arguments redacted. Pure: no
I/O beyond reading the packaged BIP39 word list once.

The fields (the key, the value, each tag) are scanned side by side, so a secret split
across them is found too (``password`` in the key and ``is hunter2`` in the value; a token
cut into pieces: ``formats.find_split_token``). A scan, first rule wins:

1. ``normalise``: what is scanned is the text as it reads — format characters (zero-width,
   soft hyphens) dropped, NFKC, lookalike letters folded to Latin; token formats also read
   tokens wrapped over two lines as one.
2. ``formats``: provider token formats (GitHub, GitLab, Slack, Stripe, AWS, Google, npm,
   PyPI, Shopify, DigitalOcean, Hugging Face, Databricks, Doppler, Grafana, Atlassian,
   Linear, Postman, Pulumi, …) and structures (private keys, ``Authorization``/``Cookie``
   headers, connection strings, service-account JSON).
3. ``seeds``: TOTP seeds, BIP39 seed phrases, recovery codes.
4. ``phrases``: credentials in words — keyword assignments and sentences in many
   languages, netrc lines, command lines, URLs and ``user:pw@host`` with a password,
   ``login: … / …``, bare ``session=``/``sid=``, PINs, and a password given by reference
   (``the password is the same as the username``; also run on each field alone).
5. ``decode``: URL-encoded, base64 and hex runs are decoded and scanned again (bounded).
6. ``entropy``: random-looking tokens, after the filters for ordinary facts (digests,
   UUIDs, CIDs, public addresses, identifiers).

Then a key (or a tag) that names a credential (``db_password``, ``Passwort``) with a value
that reads like one (a word, or a few words that are no sentence) is refused as well, and
so is a value that is a well-known password (``password123``, ``P@ssw0rd``) whatever its key.

A ``Rejection`` names the rule and the fields, never the text, so it can be logged and shown
to a client or a model as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.domain.credentials.decode import MAX_DEPTH, decoded
from app.domain.credentials.entropy import find_random, shannon_entropy
from app.domain.credentials.formats import find_broken_token, find_split_token, find_text, find_token
from app.domain.credentials.normalise import fold, lowered
from app.domain.credentials.phrases import find_phrase, find_reference, is_common_password
from app.domain.credentials.seeds import find_seed
from app.domain.credentials.vocabulary import (
    CREDENTIAL_KEY_PAIRS,
    CREDENTIAL_KEY_WORDS,
    KEY_QUALIFIERS,
    PLACEHOLDER,
    is_prose_word,
)

__all__ = [
    "REDACTED",
    "Rejection",
    "Screened",
    "check_credentials",
    "find_credential",
    "redacted",
    "screen_memory_write",
    "shannon_entropy",
]

# Decoded text scanned per scan, at most: encodings nest (base64 of URL-encoded text), and
# a 16 KB value of base64 runs must not cost more than a few scans of itself.
MAX_DECODED_CHARS = 65_536
# A credential-named key's value of more words than this is a note about it, not it.
MAX_PASSPHRASE_WORDS = 8

REDACTED: Final = "[redacted: {rule}]"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a memory write was refused: which rule, found in which fields. Carries no part of
    the rejected text, so it can be logged and shown to a client or a model as it is."""

    rule: str
    fields: tuple[str, ...]  # one, or several when the credential spans them

    @property
    def field(self) -> str:
        return self.fields[0]

    @property
    def message(self) -> str:
        if len(self.fields) == 1:
            where = f"{self.field} looks like it holds"
        else:
            where = f"{', '.join(self.fields[:-1])} and {self.fields[-1]} together look like they hold"
        return f"{where} a credential (rule: {self.rule}); memories must not store secrets"


@dataclass
class _Budget:
    decoded_chars: int = MAX_DECODED_CHARS


def check_credentials(key: str, value: str | None, tags: Iterable[str] = ()) -> Rejection | None:
    """The first rule that finds a credential in a memory's key, value or tags, else None.
    ``value`` None: the value is not being written."""
    fields: list[tuple[str, str]] = [("key", key)]
    if value is not None:
        fields.append(("value", value))
    fields.extend(("tags", tag) for tag in tags)
    return find_credential(fields, key=key, value=value)


def find_credential(
    fields: Sequence[tuple[str, str]], *, key: str | None, value: str | None
) -> Rejection | None:
    """``fields``: (name, text) pairs; ``key`` and ``value`` are also judged as a pair (a
    credential-named key with a credential-like value).

    The fields are scanned once, side by side: that finds what each holds alone and what
    only shows across them (key ``wifi password``, value ``is tulip``), at the cost of one
    scan, on every write. Only when something is found are the fields scanned one by one,
    to name the field that holds it (a refusal is rare; its cost does not matter)."""
    present = [(name, text) for name, text in fields if text]
    split = find_split_token([fold(text.strip()) for _, text in present])
    if split is not None:
        split_rule, pieces = split
        return Rejection(split_rule, _value_first(tuple(dict.fromkeys(present[i][0] for i in pieces))))
    rule = _scan(" ".join(text for _, text in present), _Budget())
    if rule is None:
        if value is not None and is_common_password(fold(value)):
            return Rejection("Common Password", ("value",))
        for name, text in present:
            by_reference = find_reference(lowered(fold(text)))
            if by_reference is not None:
                return Rejection(by_reference, (name,))
        if key is not None and value is not None and _reads_like_credential(value):
            # The key names a credential, or a tag does (key ``router``, tag ``password``).
            if names_credential(key):
                return Rejection("Credential-Named Key", ("value",))
            if any(name == "tags" and names_credential(text) for name, text in present):
                return Rejection("Credential-Named Key", ("value", "tags"))
        return None
    for name, text in present:
        found = _scan(text, _Budget())
        if found is not None:
            return Rejection(found, (name,))
    if key is not None and value is not None and names_credential(key) and _reads_like_credential(value):
        return Rejection("Credential-Named Key", ("value",))
    return Rejection(rule, _value_first(tuple(dict.fromkeys(name for name, _ in present))))


def _scan(raw: str, budget: _Budget, depth: int = 0) -> str | None:
    text = fold(raw)
    low = lowered(text)
    rule = (
        find_token(text)
        or (find_broken_token(text) if "\n" in text else None)
        or find_text(text, low)
        or find_seed(text, low)
        or find_phrase(text, low)
    )
    if rule is not None:
        return rule
    if depth < MAX_DEPTH:
        for encoding, plain in decoded(text):
            budget.decoded_chars -= len(plain)
            if budget.decoded_chars < 0:
                break
            inner = _scan(plain, budget, depth + 1)
            if inner is not None:
                return f"{inner} ({encoding})"
    return "High-Entropy String" if find_random(text) else None


def _value_first(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(names, key=lambda n: n != "value"))


# -- a key that names a credential -------------------------------------------------------------

_KEY_SPLIT: Final = re.compile(r"[^\w]+|_")
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Compound keys without separators (``dbpassword``, ``githubtoken``): words long enough not
# to end ordinary words by accident (``bypass``, ``compass`` end in ``pass``).
_CREDENTIAL_SUFFIXES: Final = ("password", "passwd", "passphrase", "passcode", "secret", "token", "apikey",
                               "credentials", "passwort", "kennwort")  # fmt: skip
_CJK_WORDS: Final = tuple(
    w for w in CREDENTIAL_KEY_WORDS if (not w.isascii() and not w.isalpha()) or ord(w[0]) > 0x2E80
)


def _key_words(key: str) -> list[str]:
    spaced = _CAMEL.sub(" ", fold(key))
    words = [w for w in _KEY_SPLIT.split(lowered(spaced)) if w]
    while len(words) > 1 and (words[-1] in KEY_QUALIFIERS or words[-1].isdigit()):
        words.pop()
    return words


def names_credential(key: str) -> bool:
    """Whether the key's last word (qualifiers such as ``_prod`` aside) names a credential:
    ``db_password``, ``githubToken``, ``mot de passe``; not ``password_policy``."""
    words = _key_words(key)
    if not words:
        return False
    head = words[-1].rstrip("0123456789") or words[-1]
    if head in CREDENTIAL_KEY_WORDS or (len(words) > 1 and (words[-2], head) in CREDENTIAL_KEY_PAIRS):
        return True
    if head.endswith(_CREDENTIAL_SUFFIXES):
        return True
    folded = lowered(fold(key))
    return any(w in folded for w in _CJK_WORDS)


def _reads_like_credential(value: str) -> bool:
    """One word, or a few words that make no sentence (a passphrase): not a placeholder and
    not prose about the credential (``rotated every 90 days``, ``ask the platform team``)."""
    stripped = value.strip().strip("'\"`")
    if not stripped or PLACEHOLDER.match(stripped):
        return False
    words = stripped.split()
    if len(words) > MAX_PASSPHRASE_WORDS:
        return False
    if len(words) == 1:
        return not is_prose_word(words[0])
    return not any(
        is_prose_word(w, passphrase=True) or w[-1] in ".,;!?" for w in words[:-1]
    ) and not is_prose_word(words[-1], passphrase=True)


# -- tool calls --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Screened:
    """A refused call: the rejection, and the call's arguments with every field the rule
    read replaced by ``[redacted: <rule>]`` (what is stored and shown instead)."""

    rejection: Rejection
    arguments: dict[str, Any] = field(default_factory=dict)


def redacted(arguments: Mapping[str, Any], rejection: Rejection) -> dict[str, Any]:
    marker = REDACTED.format(rule=rejection.rule)
    return {name: marker if name in rejection.fields else value for name, value in arguments.items()}


def screen_memory_write(arguments: Mapping[str, Any]) -> Screened | None:
    """The guard over a ``memory.remember`` call's arguments, whatever their shape: ``key``,
    ``value`` and ``tags`` as the tool reads them, and any other argument (or one of the
    wrong type) as its JSON text, so nothing of the call reaches the database unscreened."""
    fields: list[tuple[str, str]] = []
    key = arguments.get("key")
    value = arguments.get("value")
    for name, arg in arguments.items():
        if isinstance(arg, str):
            fields.append((name, arg))
        elif name == "tags" and isinstance(arg, list) and all(isinstance(t, str) for t in arg):
            fields.extend((name, t) for t in arg)
        elif arg is not None and not isinstance(arg, bool | int | float):
            fields.append((name, json.dumps(arg, ensure_ascii=False)))
    rejection = find_credential(
        fields, key=key if isinstance(key, str) else None, value=value if isinstance(value, str) else None
    )
    if rejection is None:
        return None
    return Screened(rejection, redacted(arguments, rejection))
