# ruff: noqa: RUF001 -- lookalike characters are this module's subject
"""Credentials written out in words: assignments, sentences, command lines, login lines.

``find_phrase`` takes the folded text and its ``lowered`` twin (same length, or the value's
case is read from the lowered one) and returns the name of the first rule that fires:

* **Keyword assignment**: a credential word (``vocabulary``), then an operator (``=``,
  ``:``, ``=>``, ``is``, ``ist``, ``est``, ``是``, ``は``…), then a value that is neither a
  placeholder nor prose about the credential. ``the password for the router is …`` and
  ``the db password for prod: …`` are assignments too (a short ``for``/``of`` phrase may sit
  between the word and the operator). Keywords are found by their first letters with plain
  substring tests and literal-prefixed patterns: a big alternation costs ~1.5 µs a character
  in ``re``, where these cost a few µs for a 16 KB note.
* **Netrc line**, **Command-line password** (``curl -u user:pw``, ``mysql -pPW``,
  ``sshpass -p``, ``--password PW``, ``redis-cli -a``, ``docker login -p``, ``ldapsearch -w``,
  ``smbclient -U user%pw``, ``openssl -passin pass:``), **URL with password**,
  **Credentials before host** (``user:pw@host`` without a scheme), **Login and password**
  (``login: user@host / password``), **Session identifier** (bare ``session=`` / ``sid=``),
  **PIN**.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from app.domain.credentials.normalise import fold, keyword, lowered
from app.domain.credentials.vocabulary import (
    KEY_QUALIFIERS,
    NON_VALUES,
    PASSWORD_WORDS,
    PLACEHOLDER,
    SECRET_WORDS,
    SENTENCE_END,
    UNIT_WORDS,
    is_prose_word,
    looks_like_secret,
)

PASSWORD = "password"
SECRET = "secret"


def _groups(words: tuple[str, ...], kind: str) -> list[tuple[str, str, re.Pattern[str]]]:
    """(stem, kind, pattern) per group of words sharing their first three folded letters: a
    group is only searched when its stem is in the text, with a pattern that starts with the
    stem as a literal (which ``re`` finds with a fast substring search)."""
    by_stem: dict[str, list[str]] = {}
    for word in words:
        stem = re.split(r"[ _.\-]", lowered(fold(word)))[0][:3]
        by_stem.setdefault(stem, []).append(keyword(word)[len(re.escape(stem)) :])
    return [
        (
            stem,
            kind,
            re.compile(re.escape(stem) + "(?:" + "|".join(sorted(rests, key=len, reverse=True)) + ")"),
        )
        for stem, rests in by_stem.items()
    ]


_KEYWORD_GROUPS: Final = _groups(PASSWORD_WORDS, PASSWORD) + _groups(SECRET_WORDS, SECRET)

_QUALIFIER = "|".join(sorted(KEY_QUALIFIERS, key=len, reverse=True))
# After the keyword: identifier qualifiers (``_prod``), a closing quote (``"password":``), a
# short ``for``/``of`` phrase or a parenthesis, then the operator.
_TAIL: Final = re.compile(
    rf"""(?P<suffix>(?:[_.\-](?:{_QUALIFIER}|\d{{1,3}}))*)
    (?P<quote>['"`]?)
    (?:(?P<phrase>[ \t]+(?:for|of|on|at|to|für|pour|de|del|da|do|van|voor|для|от|на)(?:[ \t]+[^\s=:,;!?()]+){{1,4}}?
         |[ \t]*\([^)\n]{{1,40}}\))?
       (?P<op>[ \t]*(?:=>|:=|::|=|:|->|→)[ \t]*
         |[ \t]+(?:is|was|are|ist|lautet|est|es|é|er|är|je|jest|este|это|equals|reads)[ \t]+(?:(?:now|still|currently|set[ \t]+to)[ \t]+)?
         |[ \t]*(?:是|为|為|は|が|는|은|：)[ \t]*
         |[ \t]+[-–—][ \t]+)
     |(?P<bare>[ \t]+))""",
    re.VERBOSE,
)
_VALUE: Final = re.compile(
    r"""(?P<quoted>"[^"\n]{1,256}"|'[^'\n]{1,256}'|`[^`\n]{1,256}`)
    |(?P<word>[^\s'"`,;)\]}>]{1,256})(?P<rest>(?:[ \t]+[^\s'"`,;.!?)\]}>]{1,64}){0,7})""",
    re.VERBOSE,
)


def _bare_value(value: str, kind: str) -> bool:
    """``Passcode delta617``, ``password Tulip42!``: a keyword and a value with only a space
    between them count when the value cannot be a word of the sentence (``password 12
    characters``, ``token count``)."""
    bare = value.strip().rstrip(SENTENCE_END)
    if not looks_like_secret(bare) or bare.isdigit() or PLACEHOLDER.match(bare):
        return False
    if kind == PASSWORD:
        return len(bare) >= 6
    return len(bare) >= 12 and any(c.isdigit() for c in bare) and any(c.isalpha() for c in bare)


def _credential_value(value: str, rest: str, *, kind: str, tight: bool, assigned: bool) -> bool:
    """Whether the value after a keyword is the credential. ``tight``: written like
    configuration (``API_KEY=…``, ``"password": …``); ``assigned``: with ``=``."""
    first = value.strip()
    if first[:1] in "'\"`" and first[-1:] == first[:1] and len(first) > 1:
        first = first[1:-1].strip()
    bare = first.rstrip(SENTENCE_END)
    if not bare or PLACEHOLDER.match(first) or PLACEHOLDER.match(bare) or bare.lower() in NON_VALUES:
        return False
    if first[0] in "([" or (
        rest.split()[:1] and rest.split()[0].lower().strip(SENTENCE_END + ",") in UNIT_WORDS
    ):
        return False  # ``password: (see the vault)``, ``password: 12 characters``
    if assigned:
        return True  # ``password=a``: configuration, whatever the value
    if looks_like_secret(first) and not (bare.isdigit() and kind == SECRET and len(bare) <= 6):
        # (Numbers after ``token`` are counts; a PIN has its own rule.)
        return True
    if is_prose_word(first.split()[0]):
        return False
    if kind == PASSWORD or tight:
        return True
    # ``secret is persistence``: a plain word after an everyday word; a passphrase of plain
    # words still counts when the words go on without a word of prose among them.
    words = rest.split()
    return len(words) >= 3 and not any(is_prose_word(w) for w in words)


def _identifier_styled(word: str) -> bool:
    # ``API_KEY``, ``apiKey``, ``client-secret``: written like configuration, not prose.
    return (
        "_" in word or "-" in word or (word.isupper() and len(word) > 1) or any(c.isupper() for c in word[1:])
    )


def _keyword_assignment(text: str, low: str) -> bool:
    aligned = len(text) == len(low)
    source = text if aligned else low
    for stem, kind, pattern in _KEYWORD_GROUPS:
        if stem not in low:
            continue
        for hit in pattern.finditer(low):
            start, end = hit.span()
            ascii_word = hit.group().isascii()
            if ascii_word:
                before = low[start - 1] if start else " "
                after = low[end] if end < len(low) else " "
                if after.isalpha() or (before.isalpha() and len(hit.group()) < 5):
                    continue  # ``tokens``, ``secretary``, ``compass``; ``PGPASSWORD`` is fine
            tail = _TAIL.match(low, end)
            if tail is None:
                continue
            value = _VALUE.match(source, tail.end())
            if value is None:
                continue
            written = source[start:end]
            op = tail["op"] or ""
            tight = bool(tail["quote"] or tail["suffix"] or "=" in op or _identifier_styled(written))
            word = value["quoted"] or value["word"]
            if tail["bare"] is not None:
                if _bare_value(word, kind):
                    return True
                continue
            assigned = "=" in op
            if _credential_value(word, value["rest"] or "", kind=kind, tight=tight or value["quoted"] is not None,
                                 assigned=assigned):  # fmt: skip
                return True
    return False


# -- fixed shapes ----------------------------------------------------------------------------

_NETRC: Final = re.compile(r"\b(?:(?:machine|host)\s+\S+\s+|default\s+)?login\s+\S+\s+password\s+(?P<v>\S+)")
_COMMANDS: Final = (
    re.compile(
        r"(?:^|\s)(?:-u|--user|--proxy-user)[\s=]*['\"]?(?![\d:]+\s)[^\s:'\"]+:(?P<v>[^\s'\"]+)"
    ),  # not uid:gid
    re.compile(
        r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlsh)\b[^\n]*?\s-p(?P<v>[^\s'\"-][^\s'\"]*)"
    ),
    re.compile(r"\bsshpass\b[^\n]*?\s-p\s*(?P<v>\S+)"),
    re.compile(r"\bredis-cli\b[^\n]*?\s(?:-a|--pass)\s+(?P<v>\S+)"),
    re.compile(r"\bdocker\s+login\b[^\n]*?\s-p\s+(?P<v>\S+)"),
    re.compile(r"\bldap\w*\b[^\n]*?\s-w\s+(?P<v>\S+)"),
    re.compile(r"\bsmbclient\b[^\n]*?\s-U\s+[^\s%]+%(?P<v>\S+)"),
    re.compile(r"-pass(?:in|out)?\s+pass:(?P<v>\S+)"),
    re.compile(
        r"(?:^|\s)--(?:password|passwd|pass|pwd|token|api-key|apikey|secret|auth-token|access-token)[\s=]+['\"]?(?P<v>[^\s'\"-]\S*)"
    ),
)
_COMMAND_HINTS: Final = ("-u", "--user", "mysql", "mariadb", "sshpass", "redis-cli", "docker", "ldap", "smbclient",
                         "-pass", "--")  # fmt: skip
_URL_PASSWORD: Final = re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s/:@]*:(?P<v>[^\s/@]+)@")
_USERINFO: Final = re.compile(
    r"(?<![\w/.:@%+\-])(?P<user>[a-z0-9._%+\-]{1,64}):(?P<v>[^\s:@/]{3,128})@"
    r"(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-f:]+\]|[a-z0-9\-]+(?:\.[a-z0-9\-]+)+)"
)
# ``email:jane@acme.localhost`` is a label, not a user name with a password.
_LABELS: Final = frozenset(
    "mailto email e-mail mail contact from to cc bcc reply-to sender owner by send support sip sips tel xmpp im "
    "user login account author maintainer reporter assignee".split()
)
_LOGIN_SLASH: Final = re.compile(
    r"\b(?:login|log-in|logon|sign[ -]?in|user(?:name)?|account|benutzer(?:name)?|utilisateur|usuario)\s*[:=]\s*"
    r"(?P<user>[^\s/,|]+)\s*(?:/|\|)\s*(?P<v>[^\s/,|]+)"
)
_SESSION: Final = re.compile(
    r"(?<![a-z0-9_\-])(?:session(?:[_\-]?(?:id|key|token))?|sess(?:ion)?id|sid|phpsessid|jsessionid|connect\.sid"
    r"|laravel_session|_session|ci_session|asp\.net_sessionid|sessid)\s*=\s*(?P<v>[A-Za-z0-9%._+/=~\-]{8,})"
)
_PIN: Final = re.compile(
    r"\bPIN\b[ \t]*(?:code|number)?[ \t]*(?:is|was|[:=#\-])?[ \t]*(?P<v>\d{4,8})\b"
    r"|(?i:\bpin[ _\-]?(?:code|number|nummer))[ \t]*(?:is|was|[:=#\-])?[ \t]*\d{4,8}\b"
    r"|(?i:\bpin)[ \t]*(?:is|was|[:=#])[ \t]*\d{4,8}\b"
)


def _plausible(value: str) -> bool:
    value = value.strip("'\"`").rstrip(SENTENCE_END)
    return bool(value) and not PLACEHOLDER.match(value) and not is_prose_word(value)


def _values(pattern: re.Pattern[str], text: str, low: str) -> list[tuple[re.Match[str], str]]:
    """Matches of ``pattern`` in ``low``, each with its value as written in ``text`` (its
    case matters) when the two are aligned."""
    source = text if len(text) == len(low) else low
    return [(m, source[m.start("v") : m.end("v")]) for m in pattern.finditer(low)]


def _netrc(text: str, low: str) -> bool:
    return "login" in low and any(_plausible(v) for _, v in _values(_NETRC, text, low))


def _command(text: str, low: str) -> bool:
    # Matched as written: ``mysql -P3306`` is a port, ``-p3306`` a password.
    if not any(h in low for h in _COMMAND_HINTS):
        return False
    return any(_plausible(m["v"]) for pattern in _COMMANDS for m in pattern.finditer(text))


def _url_password(text: str, low: str) -> bool:
    return "://" in text and any(_plausible(v) for _, v in _values(_URL_PASSWORD, text, low))


def _userinfo(text: str, low: str) -> bool:
    if "@" not in text or ":" not in text:
        return False
    return any(m["user"] not in _LABELS and _plausible(v) for m, v in _values(_USERINFO, text, low))


def _login_slash(text: str, low: str) -> bool:
    if "/" not in text and "|" not in text:
        return False
    return any(
        _plausible(v) and ("@" in m["user"] or looks_like_secret(v))
        for m, v in _values(_LOGIN_SLASH, text, low)
    )


def _session(text: str, low: str) -> bool:
    if "=" not in text or not ("sess" in low or "sid" in low):
        return False
    return any(
        not PLACEHOLDER.match(v) and not _slug(v) and (looks_like_secret(v) or len(v) >= 16)
        for _, v in _values(_SESSION, text, low)
    )


def _slug(value: str) -> bool:
    # ``delta-2025-q1-planning``: words and numbers joined, a label rather than an id.
    parts = re.split(r"[-_.]", value)
    return len(parts) > 1 and all(p.isalpha() or p.isdigit() or (len(p) <= 3 and p.isalnum()) for p in parts)


def _pin(text: str, low: str) -> bool:
    return "pin" in low and _PIN.search(text) is not None


_RULES: Final[tuple[tuple[str, Callable[[str, str], bool]], ...]] = (
    ("URL With Password", _url_password),
    ("Credentials Before Host", _userinfo),
    ("Netrc Line", _netrc),
    ("Command-Line Password", _command),
    ("Login And Password", _login_slash),
    ("Session Identifier", _session),
    ("PIN", _pin),
    ("Keyword Assignment", _keyword_assignment),
)


def find_phrase(text: str, low: str) -> str | None:
    for name, rule in _RULES:
        if rule(text, low):
            return name
    return None
