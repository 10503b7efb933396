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
  (``login: user@host / password``), **Login pair** (``use admin/hunter2``, ``log in with
  jane / Tulip42!``), **Session identifier** (bare ``session=`` / ``sid=``), **PIN** (and
  PUK), **Access code** (``door code 4821``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from app.domain.credentials.normalise import fold, keyword, lowered
from app.domain.credentials.text import occurrences, windows
from app.domain.credentials.vocabulary import (
    ACCOUNT_NAMES,
    DEFAULT_PASSWORDS,
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
# An ASCII text can only hold the ASCII words.
_ASCII_KEYWORD_GROUPS: Final = [g for g in _KEYWORD_GROUPS if g[0].isascii()]

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
    |(?P<word>[^\s'"`,;]{1,256})(?P<rest>(?:[ \t]+[^\s'"`,;.!?)\]}>]{1,64}){0,7})""",
    re.VERBOSE,
)


def _bare_value(value: str, kind: str) -> bool:
    """``Passcode delta617``, ``password Tulip42!``: a keyword and a value with only a space
    between them count when the value cannot be a word of the sentence (``password 12
    characters``, ``token count``)."""
    bare = _unwrap(value.strip()).rstrip(SENTENCE_END)
    if not looks_like_secret(bare) or PLACEHOLDER.match(bare):
        return False
    if kind == PASSWORD:
        return len(bare) >= 6  # ``passcode 482913``; not ``password 12 characters``
    return len(bare) >= 12 and not bare.isdigit() and any(c.isalpha() for c in bare)


_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}


def _unwrap(word: str) -> str:
    # ``(password: x)``: a closing bracket the word did not open belongs to the sentence.
    while word and word[-1] in _CLOSERS and _CLOSERS[word[-1]] not in word:
        word = word[:-1]
    return word


def _credential_value(value: str, rest: str, *, kind: str, tight: bool, assigned: bool) -> bool:
    """Whether the value after a keyword is the credential. ``tight``: written like
    configuration (``API_KEY=…``, ``"password": …``); ``assigned``: with ``=``."""
    first = _unwrap(value.strip())
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
    groups = _ASCII_KEYWORD_GROUPS if low.isascii() else _KEYWORD_GROUPS
    for _stem, kind, pattern in groups:
        # Each pattern starts with its stem as a literal: ``re`` finds it with a substring
        # search, so the pattern is its own pre-filter.
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
    r"\b(?:login|log-in|logon|sign[ -]?in|user(?:name)?|account|creds|credentials?|benutzer(?:name)?|utilisateur|usuario)\s*[:=]\s*"
    r"(?P<user>[^\s/,|]+)\s*(?:/|\|)\s*(?P<v>[^\s/,|]+)"
)
# ``use admin/hunter2``, ``log in with jane / Tulip42!``, ``login admin:hunter2``, ``WiFi:
# GuestNet / tulip4242``: a user and a password side by side. Without a login (or network)
# word before them only an account name with ``/`` counts (``chown root:root`` and
# ``TCP/IP`` do not), and the password must read like one (``admin/settings`` does not).
_PAIR: Final = re.compile(
    r"(?:(?P<verb>\b(?:login|logon|log[ -]?in|sign[ -]?in|creds|credentials|wi-?fi|wlan|ssid)\b"
    r"(?:[ \t]+(?:with|as|is|for|to))?[ \t]*[:=]?[ \t]*)|(?<![\w/.:@%+\-]))"
    r"(?P<user>[a-z0-9._%+\-]{1,64}@[a-z0-9.\-]{1,64}|[a-z0-9][a-z0-9._\-]{0,31})[ \t]*(?P<sep>(?(verb)[/:]|/))[ \t]*"
    r"(?P<v>[^\s/:,;|()\[\]<>]{3,128})(?![/\w:@])"
)
# ``u: admin p: hunter2``, ``U=root, P=Tulip42!``, ``usr: jane pw: …``: a user and a
# password under short labels, side by side. ``p:`` alone is any label (a p-value, a page);
# after a user label it is the password, when the value reads like one.
_LABELLED_PAIR: Final = re.compile(
    r"(?<![\w.\-])(?:u|usr|user(?:name)?|login|id)[ \t]*[:=][ \t]*(?P<user>[^\s,;|/]{1,64})[ \t]*[,;|/]?[ \t]*"
    r"(?:p|pw|pwd|pword|pass(?:word)?|passwd)[ \t]*[:=][ \t]*(?P<v>[^\s,;|()\[\]<>]{1,128})"
)
_SESSION: Final = re.compile(
    r"(?<![a-z0-9_\-])(?:session(?:[_\-]?(?:id|key|token))?|sess(?:ion)?id|sid|phpsessid|jsessionid|connect\.sid"
    r"|laravel_session|_session|ci_session|asp\.net_sessionid|sessid)\s*=\s*(?P<v>[A-Za-z0-9%._+/=~\-]{8,})"
)
_PIN: Final = re.compile(
    r"\bPIN\b[ \t]*(?:code|number)?[ \t]*(?:is|was|[:=#\-])?[ \t]*(?P<v>\d{4,8})\b"
    r"|(?i:\bpin[ _\-]?(?:code|number|nummer))[ \t]*(?:is|was|[:=#\-])?[ \t]*(?P<v2>\d{4,8})\b"
    r"|(?i:\bpin)[ \t]*(?:is|was|[:=#])[ \t]*(?P<v3>\d{4,8})\b"
)

_PUK: Final = re.compile(r"puk2?\b[ \t]*(?:code)?[ \t]*(?:is|was|[:=#\-])?[ \t]*(?P<v>\d{8})\b")
# ``door code 4821``, ``alarm code: 482913``; not ``error code 4040`` nor ``zip code 12345``.
_ACCESS_CODE: Final = re.compile(
    r"\b(?:door|gate|alarm|safe|garage|entry|keypad|building|unlock|access|lock|lockbox|key ?safe|intercom)"
    r"[ \t_\-]?code\b[ \t]*(?:is|was|[:=#\-])?[ \t]*(?P<v>\d{4,8})\b"
)


_LOGIN_WORDS = ("login", "log-in", "logon", "sign", "user", "account", "creds", "credential", "benutzer", "utilisateur",
                "usuario")  # fmt: skip


def _plausible(value: str) -> bool:
    value = value.strip("'\"`").rstrip(SENTENCE_END)
    return bool(value) and not PLACEHOLDER.match(value) and not is_prose_word(value)


def _slug(value: str) -> bool:
    # ``delta-2025-q1-planning``: words and numbers joined, a label rather than an id.
    parts = re.split(r"[-_.]", value)
    return len(parts) > 1 and all(p.isalpha() or p.isdigit() or (len(p) <= 3 and p.isalnum()) for p in parts)


def _any_value(m: re.Match[str], value: str) -> bool:
    return _plausible(value)


def _userinfo_value(m: re.Match[str], value: str) -> bool:
    return m["user"] not in _LABELS and _plausible(value)


def _login_value(m: re.Match[str], value: str) -> bool:
    return _plausible(value) and ("@" in m["user"] or looks_like_secret(value))


# A number, a version, a date or a quantity (``v2``, ``2.4ghz``, ``2026-11-30``): not a password.
_NUMBERISH: Final = re.compile(r"v?\d[\d.,:\-]*[a-z%]{0,5}")


def _pair_value(m: re.Match[str], value: str) -> bool:
    user = m["user"]
    if m["verb"] is None and user not in ACCOUNT_NAMES and "@" not in user:
        return False  # most ``a/b`` of a note end here
    value = value.strip("'\"`").rstrip(SENTENCE_END)
    low = value.lower()
    if not value or PLACEHOLDER.match(value):
        return False
    if low in DEFAULT_PASSWORDS or low == user:
        return True  # ``admin/admin``, ``root/toor``
    return looks_like_secret(value) and not _NUMBERISH.fullmatch(low)


def _labelled_pair_value(m: re.Match[str], value: str) -> bool:
    user = m["user"]
    value = value.strip("'\"`").rstrip(SENTENCE_END)
    low = value.lower()
    if not value or PLACEHOLDER.match(value) or _NUMBERISH.fullmatch(low) or _NUMBERISH.fullmatch(user):
        return False  # ``u: 3 p: 0.04``, ``u: admin p: (see the vault)``
    if low in DEFAULT_PASSWORDS or low == user or is_common_password(value):
        return True  # ``u: admin p: admin``
    if is_prose_word(value):
        return False  # ``u: admin p: settings``
    return looks_like_secret(value) or ((user in ACCOUNT_NAMES or "@" in user) and len(value) >= 6)


def _session_value(m: re.Match[str], value: str) -> bool:
    return (
        not PLACEHOLDER.match(value) and not _slug(value) and (looks_like_secret(value) or len(value) >= 16)
    )


@dataclass(frozen=True, slots=True)
class _Shape:
    """A fixed shape: ``pattern`` (with a value group ``v``) runs around each occurrence
    of a ``hint`` in the lowered text, and fires when ``accept`` takes a match."""

    name: str
    hints: tuple[str, ...]
    pattern: re.Pattern[str]
    accept: Callable[[re.Match[str], str], bool] = _any_value
    written: bool = False  # matched in the text as written (case matters), not lowered
    # The pattern starts with the hint: it is matched at each occurrence, not searched.
    anchored: bool = False
    before: int = 80
    after: int = 240


def _command(hints: tuple[str, ...], pattern: str) -> _Shape:
    # Matched as written: ``mysql -P3306`` is a port, ``-p3306`` a password.
    return _Shape("Command-Line Password", hints, re.compile(pattern), written=True, anchored=True)


_SHAPES: Final[tuple[_Shape, ...]] = (
    _Shape("URL With Password", ("://",), _URL_PASSWORD, before=32),
    _Shape("Credentials Before Host", ("@",), _USERINFO, _userinfo_value, before=200, after=100),
    _Shape("Netrc Line", ("login",), _NETRC, before=120),
    # -u user:pw (curl, wget), not uid:gid (docker run -u 1000:1000).
    _command(("-u", "--user", "--proxy-user"),
             r"(?<!\S)(?:-u|--user|--proxy-user)[\s=]*['\"]?(?![\d:]+\s)[^\s:'\"]+:(?P<v>[^\s'\"]+)"),
    _command(("mysql", "mariadb"),
             r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlsh)\b[^\n]*?\s-p(?P<v>[^\s'\"-][^\s'\"]*)"),
    _command(("sshpass",), r"\bsshpass\b[^\n]*?\s-p\s*(?P<v>\S+)"),
    _command(("redis-cli",), r"\bredis-cli\b[^\n]*?\s(?:-a|--pass)\s+(?P<v>\S+)"),
    _command(("docker",), r"\bdocker\s+login\b[^\n]*?\s-p\s+(?P<v>\S+)"),
    _command(("ldap",), r"\bldap\w*\b[^\n]*?\s-w\s+(?P<v>\S+)"),
    _command(("smbclient",), r"\bsmbclient\b[^\n]*?\s-U\s+[^\s%]+%(?P<v>\S+)"),
    _command(("-pass",), r"-pass(?:in|out)?\s+pass:(?P<v>\S+)"),
    _command(("--pass", "--pwd", "--token", "--api", "--secret", "--auth", "--access"),
             r"(?<!\S)--(?:password|passwd|pass|pwd|token|api-key|apikey|secret|auth-token|access-token)[\s=]+['\"]?(?P<v>[^\s'\"-]\S*)"),
    _Shape("Login And Password",
           _LOGIN_WORDS, _LOGIN_SLASH, _login_value, anchored=True),
    _Shape("Login Pair", ("/", ":"), _PAIR, _pair_value, before=72, after=140),
    _Shape("Login Pair", ("p:", "p=", "p :", "p =", "pw", "pass"), _LABELLED_PAIR, _labelled_pair_value,
           before=100, after=140),
    _Shape("Session Identifier", ("sess", "sid"), _SESSION, _session_value, before=24),
    _Shape("PIN", ("pin",), _PIN, written=True, anchored=True),
    _Shape("PIN", ("puk",), _PUK, anchored=True),
    _Shape("Access Code", ("code",), _ACCESS_CODE, before=24, after=32),
)  # fmt: skip


def _matches(shape: _Shape, source: str, low: str, aligned: bool) -> list[re.Match[str]]:
    if shape.anchored:
        starts = occurrences(low, shape.hints) if aligned else None
        if starts is not None:
            return [m for m in (shape.pattern.match(source, at) for at in starts) if m is not None]
        if aligned and not any(h in low for h in shape.hints):
            return []
        return list(shape.pattern.finditer(source))
    spans = windows(low, shape.hints, before=shape.before, after=shape.after)
    if spans and not aligned:
        spans = [(0, len(source))]  # positions in ``low`` do not carry over to ``text``
    return [m for start, end in spans for m in shape.pattern.finditer(source, start, end)]


def _find_shape(text: str, low: str) -> str | None:
    aligned = len(text) == len(low)
    for shape in _SHAPES:
        source = text if shape.written or not aligned else low
        for m in _matches(shape, source, low, aligned):
            group = next(g for g in ("v", "v2", "v3") if g in m.re.groupindex and m[g] is not None)
            value = (text if aligned else low)[m.start(group) : m.end(group)]
            if shape.accept(m, value):
                return shape.name
    return None


# -- a password given by reference ------------------------------------------------------------

# ``the password is the same as the username``, ``password = username``, ``pw same as
# login``, ``username and password are identical``: the credential is another field of the
# same account, which whoever reads the memory can see. What keeps ordinary facts out (``the
# username is shown on the login page``, ``passwords must not be the same as the
# username``): the password word and the account field must be joined by a copula or ``same
# as`` with nothing but a determiner or one qualifier between, the field must end the clause
# (``the login page`` is not the login), and a negation never passes for a qualifier.
_PW_WORD: Final = r"(?:passwords?|passwd|passwort|kennwort|passcode|passphrase|pass|pwd|pw)(?![\w-])"
_ACCOUNT_FIELD: Final = (
    r"(?:user[ \t]?names?|user'?s[ \t]+name|user[ \t]?id|users?|login(?:[ \t]?name|[ \t]?id)?|logon"
    r"|account[ \t]?name|account|e-?mail(?:[ \t]+address)?|handle|benutzername|nom[ \t]+d'utilisateur)"
)
# The field a bare ``password: …`` may name: ``password: email`` is a form's field list.
_STRONG_FIELD: Final = r"(?:user[ \t]?name|username|login[ \t]?name|user[ \t]?id)"
_CLAUSE_END: Final = (
    r"(?=[ \t]*(?:$|[.,;:!?()\]\n]|(?:too|again|reversed|backwards|in[ \t]+reverse|as[ \t]+well|plus|followed"
    r"|with|and|but|so|lower-?case|upper-?case|capitali[sz]ed|spelled)\b))"
)
_SAME: Final = r"(?:(?:the[ \t]+)?same[ \t]+as|identical[ \t]+(?:to|with)|equal[ \t]+to|equals|matches|==?)"
_WHOSE: Final = (
    r"(?:(?:the|their|his|her|its|your|our|that|this)[ \t]+)?(?:(?!not\b|never\b|no\b)[\w-]+[ \t]+)?"
)
_BY_REFERENCE: Final = (
    re.compile(
        rf"\b{_PW_WORD}(?:[ \t]+(?:for|of|on)(?:[ \t]+[^\s=:,;]+){{1,3}}?)?[ \t]*"
        rf"(?:(?:is|was|=|==|:=|->)[ \t]*(?:(?:just|simply|also|still|literally|exactly)[ \t]+)?(?:{_SAME}[ \t]*)?"
        rf"|{_SAME}[ \t]*|:[ \t]*{_SAME}[ \t]*)"
        rf"{_WHOSE}{_ACCOUNT_FIELD}\b{_CLAUSE_END}"
    ),
    re.compile(rf"\b{_PW_WORD}[ \t]*:[ \t]*(?:the[ \t]+)?{_STRONG_FIELD}\b{_CLAUSE_END}"),
    # ``username and password are the same``, ``login/pass identical``, ``user = password``.
    re.compile(
        rf"\b{_ACCOUNT_FIELD}[ \t]*(?:and|&|/|\+)[ \t]*(?:the[ \t]+)?{_PW_WORD}[ \t]*"
        rf"(?:(?:are|is|were|:)[ \t]+)?(?:(?:both|all|just)[ \t]+)?(?:the[ \t]+same|identical|equal)\b"
        rf"(?:[ \t]+(?:on|for|at|in)[ \t]+(?:the|this|that|our|my|its)[ \t]+[\w-]+(?:[ \t]+[\w-]+)?)?{_CLAUSE_END}"
    ),
    re.compile(
        rf"\b{_STRONG_FIELD}[ \t]*(?:(?:is|=|==)[ \t]*(?:(?:also|just)[ \t]+)?|doubles[ \t]+as[ \t]+)"
        rf"(?:the[ \t]+)?{_PW_WORD}{_CLAUSE_END}"
    ),
    # ``same username and password`` (not ``the same username and password as the portal``).
    re.compile(rf"\bsame[ \t]+{_ACCOUNT_FIELD}[ \t]*(?:and|&|/)[ \t]*{_PW_WORD}(?=[ \t]*(?:$|[.,;!)\n]))"),
)
_PW_HINTS: Final = ("pass", "pw", "pwd", "passwort", "kennwort")


BY_REFERENCE = "Password By Reference"


def find_reference(low: str) -> str | None:
    """``BY_REFERENCE`` when the lowered text gives a password as another account field.
    The guard also runs it on each field alone: a field's end ends the clause, which the
    fields joined by spaces would hide (``…doubles as the pw`` followed by a tag)."""
    if any(h in low for h in _PW_HINTS) and any(p.search(low) for p in _BY_REFERENCE):
        return BY_REFERENCE
    return None


def find_phrase(text: str, low: str) -> str | None:
    return (
        _find_shape(text, low)
        or ("Keyword Assignment" if _keyword_assignment(text, low) else None)
        or find_reference(low)
    )


# -- a value that is a well-known password -----------------------------------------------------

_LEET: Final = str.maketrans("@4$5013!7", "aassoleit")
_LEET_I: Final = str.maketrans("@4$5013!7", "aassoieit")
# Words every list of leaked passwords starts with: the value is one of them with digits or
# symbols added, or written in leet (``password123``, ``P@ssw0rd``, ``Welcome1!``).
_PASSWORD_STEMS: Final = frozenset(
    "password passwort passwd passw pass qwerty qwertz azerty letmein iloveyou welcome changeme trustno "
    "abc abcd".split()
)
# Ordinary words too (``master1`` is a host name, ``Summer2024`` a campaign, ``march-2026``
# a label): only in leet, or with digits and a symbol (``Summer2024!``).
_WORD_STEMS: Final = frozenset(
    "admin root master secret login hello monkey dragon sunshine princess football baseball shadow "
    "superman batman summer winter spring autumn january february march april may june july august "
    "september october november december".split()
)
_COMMON: Final = re.compile(
    r"(?P<stem>[A-Za-z@$0-9!]*?[A-Za-z@$][A-Za-z@$0-9]*?)(?P<tail>[0-9!@#$%^&*?._\-]+)?"
)


def is_common_password(value: str) -> bool:
    """The whole value is a well-known password, whatever the key says."""
    value = value.strip().strip("'\"`")
    if not 4 <= len(value) <= 32 or any(c.isspace() for c in value):
        return False
    m = _COMMON.fullmatch(value)
    if m is None:
        return False
    stem, tail = m["stem"], m["tail"] or ""
    low = stem.lower()
    marked = any(c.isdigit() for c in tail) and any(c in "!@#$%^&*?" for c in tail)
    for plain in {low.translate(_LEET), low.translate(_LEET_I)}:  # a 1 reads as l or as i
        leet = plain != low
        if plain in _PASSWORD_STEMS:
            # ``abc123`` but not ``abc``; ``pass`` only with three characters more.
            return bool(leet or (len(tail) >= (3 if plain in ("pass", "abc", "abcd") else 1)))
        if plain in _WORD_STEMS and (leet or marked):
            return True
    return False
