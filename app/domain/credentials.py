"""The credential guard: memories must never hold secrets (docs/concepts/memory.md, CREDENTIAL_REJECTED).

Memories are injected into later runs' prompts and shown to operators, so a token an agent
saw once would otherwise live on in every future context. ``check_credentials`` is the one
check every write path calls (the memory tools, ``createMemory``, ``updateMemory``) on the
key, the value and each tag. It returns a ``Rejection`` naming the rule that fired, never
the offending text, or ``None``.

Rules, in order (the first that fires wins):

1. Known token formats: the regex detectors of ``detect-secrets`` (pinned; a well-kept rule
   set, used here as pure regexes: no verification, no settings, no I/O), plus formats it
   misses (current OpenAI and Anthropic keys, Google API keys and OAuth tokens, GitHub
   fine-grained tokens, Azure connection strings and SAS signatures, Stripe test keys,
   ``Authorization:``/``Cookie:`` headers, URLs and connection strings with a password).
2. Keyword assignments: ``password=…``, ``api_key: …``, ``the token is …``, whatever the
   value's length or entropy. Placeholders (``<redacted>``, ``${TOKEN}``, ``***``) pass.
3. A key that names a credential (``password``, ``github_token``) with a one-word value.
4. High-entropy strings: long tokens mixing character classes like random keys do, after
   filters for ordinary facts (UUIDs, commit and content hashes, domains, URLs without
   credentials, e-mail addresses, prefixed ids such as ``cus_…``, dates, numbers, words).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from detect_secrets.filters.heuristic import is_potential_uuid, is_sequential_string
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a memory write was refused: which rule, found in which field. Carries no part of
    the rejected text, so it can be logged and shown to a client or a model as it is."""

    rule: str
    field: str  # "key" | "value" | "tags"

    @property
    def message(self) -> str:
        return (
            f"{self.field} looks like it holds a credential (rule: {self.rule}); "
            "memories must not store secrets"
        )


# -- 1. known formats ----------------------------------------------------------------------

# detect-secrets' regex detectors (the ones that need no surrounding code context).
_DETECTORS: Final[tuple[RegexBasedDetector, ...]] = (
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    BasicAuthDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    JwtTokenDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PrivateKeyDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)

# What detect-secrets 1.5 misses or only finds in quoted code, by rule name.
_FORMATS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("Anthropic API Key", r"\bsk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{20,}"),
        ("OpenAI API Key", r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{32,}"),
        ("Google API Key", r"\bAIza[0-9A-Za-z_\-]{35}"),
        ("Google OAuth Token", r"\bya29\.[0-9A-Za-z_\-]{20,}"),
        ("Google OAuth Client Secret", r"\bGOCSPX-[A-Za-z0-9_\-]{20,}"),
        ("GCP Service Account Key", r'"private_key(?:_id)?"\s*:\s*"[^"\s]{8,}'),
        ("GitHub Token", r"\bgithub_pat_[A-Za-z0-9_]{40,}|\bgh[pousr]_[A-Za-z0-9]{30,}"),
        ("GitLab Token", r"\bgl(?:pat|dt|ft|rt|cbt|ptt|oas)-[A-Za-z0-9_\-]{20,}"),
        ("Slack Token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}|\bxapp-\d-[A-Za-z0-9\-]{10,}"),
        ("Stripe Key", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9a-zA-Z]{16,}|\bwhsec_[A-Za-z0-9]{24,}"),
        (
            "AWS Secret Access Key",
            r"(?i)aws.{0,30}secret.{0,30}[:=]\s*['\"]?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        ),
        ("Azure Connection String", r"(?i)(?:AccountKey|SharedAccessKey|SharedSecretValue)\s*=\s*[^;\s]{8,}"),
        ("Azure SAS Signature", r"(?i)(?:^|[?&;\s])sig=[A-Za-z0-9%+/=]{16,}"),
        ("Azure AD Client Secret", r"(?<![A-Za-z0-9])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"),
        ("PEM Private Key", r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"),
        ("Authorization Header", r"(?i)\b(?:proxy-)?authorization\s*[:=]\s*['\"]?[A-Za-z]+\s+\S{4,}"),
        ("Bearer Token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{12,}=*"),
        ("Cookie Header", r"(?i)(?<![A-Za-z0-9_-])(?:set-)?cookie\s*:\s*[^=\s;]+=\S+"),
        ("URL With Password", r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/:@]*:[^\s/@]+@"),
        (
            "Connection String Password",
            r"(?i)(?:^|[;\s])(?:password|pwd|passwd)\s*=\s*(?!;)[^;\s]+",
        ),
    )
)

# -- 2. keyword assignments ----------------------------------------------------------------

_SECRET_WORD = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_\-\s]?key|apikey|access[_\-\s]?key"
    r"|secret[_\-\s]?key|private[_\-\s]?key|client[_\-\s]?secret|cookie|session[_\-\s]?(?:id|key)"
    r"|credentials?|auth[_\-]?token|refresh[_\-]?token|access[_\-]?token|bearer)"
)
# `name_token = value`, `"apiKey": "value"`, `DB_PASSWORD=value`.
_ASSIGNMENT: Final = re.compile(
    rf"(?i)(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_\-.])*{_SECRET_WORD}(?:[_\-][A-Za-z0-9]+)*['\"]?"
    r"\s*(?:=>|:=|::|=|:)\s*['\"]?(?P<value>[^\s'\",;)\]]+)"
)
# `the password is hunter2`, `api key is abc`: prose, so only a value that is no function word.
_PROSE: Final = re.compile(rf"(?i)\b{_SECRET_WORD}\s+(?:is|was|=)\s+['\"]?(?P<value>[^\s'\",;]+)")
_PROSE_FILLERS: Final = frozenset(
    "a an the in on at not no never now stored kept managed rotated required set missing expired "
    "available valid invalid revoked given shared unknown empty being still also only held saved "
    "located found per from for to by with via of".split()
)
_PLACEHOLDER: Final = re.compile(
    r"^(?:<[^>]*>|\$\{[^}]*\}|\{\{[^}]*\}\}|\{[^}]*\}|\[[A-Za-z _-]*\]|\*+|x{3,}|\.{3,}|redacted|null|none|"
    r"n/?a|tbd|changeme-placeholder)$",
    re.IGNORECASE,
)

# -- 3. a key that names a credential --------------------------------------------------------

_CREDENTIAL_KEY_WORDS: Final = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "token",
        "apikey",
        "cookie",
        "credential",
        "credentials",
        "privatekey",
        "accesskey",
        "secretkey",
        "clientsecret",
        "sessionid",
        "bearer",
    }
)
_KEY_PAIRS: Final = {
    ("api", "key"),
    ("access", "key"),
    ("secret", "key"),
    ("private", "key"),
    ("client", "secret"),
    ("session", "id"),
    ("auth", "token"),
}

# -- 4. high entropy ------------------------------------------------------------------------

MIN_ENTROPY_TOKEN_CHARS = 20
BASE64_ENTROPY_LIMIT = 3.6
HEX_ENTROPY_LIMIT = 3.0
# Random keys switch between upper case, lower case and digits at nearly every character;
# identifiers and words (camelCase, ULIDs aside) rarely do.
CLASS_SWITCH_LIMIT = 0.3
# Commit ids (short and full), SHA-1 and SHA-256 digests: ordinary operational facts.
_HASH_LENGTHS: Final = frozenset({7, 8, 9, 10, 11, 12, 40, 64})
_URL: Final = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://\S+")
_EMAIL: Final = re.compile(r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}$")
_DOMAIN: Final = re.compile(r"^(?:[A-Za-z0-9\-]+\.)+[A-Za-z]{2,}$")
_HEX: Final = re.compile(r"^[0-9a-fA-F]+$")
_PREFIXED_ID: Final = re.compile(r"^[a-z]{2,12}_[A-Za-z0-9]{6,}$")
_PATH: Final = re.compile(r"^(?:\.{0,2}/|~/|[A-Za-z]:\\)")
_TOKEN_SPLIT: Final = re.compile(r"[\s,;:()\[\]{}<>\"'`|]+")
_TOKEN_TRIM = ".:!?*"
_SEPARATOR: Final = re.compile(r"[-_.]+")


def check_credentials(key: str, value: str | None, tags: Iterable[str] = ()) -> Rejection | None:
    """The first rule that finds a credential in the key, the value or a tag, else None."""
    fields: list[tuple[str, str]] = [("key", key)]
    if value is not None:
        fields.append(("value", value))
    fields.extend(("tags", tag) for tag in tags)
    for field, text in fields:
        rule = _scan(text)
        if rule is not None:
            return Rejection(rule=rule, field=field)
    if value is not None and _names_credential(key) and _is_single_word(value):
        return Rejection(rule="credential-named key", field="value")
    return None


def _scan(text: str) -> str | None:
    for detector in _DETECTORS:
        if any(True for _ in detector.analyze_string(text)):
            return str(detector.secret_type)
    for name, pattern in _FORMATS:
        if pattern.search(text):
            return name
    if _keyword_assignment(text):
        return "keyword assignment"
    if any(_high_entropy(token) for token in _tokens(text)):
        return "high-entropy string"
    return None


def _keyword_assignment(text: str) -> bool:
    for match in _ASSIGNMENT.finditer(text):
        if not _PLACEHOLDER.match(match["value"]):
            return True
    for match in _PROSE.finditer(text):
        word = match["value"]
        if word.lower() not in _PROSE_FILLERS and not _PLACEHOLDER.match(word):
            return True
    return False


def _key_words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)  # camelCase -> camel Case
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _names_credential(key: str) -> bool:
    words = _key_words(key)
    if any(w in _CREDENTIAL_KEY_WORDS for w in words):
        return True
    return any(pair in _KEY_PAIRS for pair in itertools.pairwise(words))


def _is_single_word(value: str) -> bool:
    stripped = value.strip().strip("'\"")
    return bool(stripped) and not any(c.isspace() for c in stripped) and not _PLACEHOLDER.match(stripped)


def _tokens(text: str) -> Iterator[str]:
    # URLs without a password are facts (rule 1 already refused those with one); their
    # path segments are often long random-looking ids, so they are not scanned for entropy.
    for chunk in _TOKEN_SPLIT.split(_URL.sub(" ", text)):
        token = chunk.strip(_TOKEN_TRIM)
        if len(token) >= MIN_ENTROPY_TOKEN_CHARS:
            # `name=value` and `name:value` pairs: judge the value on its own.
            yield token.split("=", 1)[-1] if "=" in token.rstrip("=") else token


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

    # Punctuation does not count: slugs (`acme-2026-q3`) switch at every dash.
    kinds = [kind(c) for c in token if c.isalnum()]
    return sum(a != b for a, b in itertools.pairwise(kinds)) / max(len(kinds) - 1, 1)


def _high_entropy(token: str) -> bool:
    if len(token) < MIN_ENTROPY_TOKEN_CHARS or _is_ordinary(token):
        return False
    if _SEPARATOR.search(token):
        # Slugs and labels (`acme-run-3fa9c01b2e`): words, numbers and hex ids joined by
        # dashes. Judge what is left once those ordinary segments are dropped.
        token = "".join(s for s in _SEPARATOR.split(token) if not _is_plain_segment(s))
        if len(token) < MIN_ENTROPY_TOKEN_CHARS:
            return False
    if _HEX.match(token):
        return len(token) not in _HASH_LENGTHS and shannon_entropy(token) > HEX_ENTROPY_LIMIT
    has_lower = any(c.islower() for c in token)
    has_upper = any(c.isupper() for c in token)
    has_digit = any(c.isdigit() for c in token)
    if not has_lower or not (has_upper or has_digit):
        # Single-class runs are words or numbers; upper case and digits only are ids (ULIDs, SKUs).
        return False
    return shannon_entropy(token) > BASE64_ENTROPY_LIMIT and _class_switches(token) > CLASS_SWITCH_LIMIT


def _is_plain_segment(segment: str) -> bool:
    return segment.isalpha() or segment.isdigit() or bool(_HEX.match(segment))


def _is_ordinary(token: str) -> bool:
    return bool(
        is_potential_uuid(token)
        or is_sequential_string(token)
        or _EMAIL.match(token)
        or _DOMAIN.match(token)
        or _PREFIXED_ID.match(token)
        or _PATH.match(token)
        or not any(c.isalpha() for c in token)
    )
