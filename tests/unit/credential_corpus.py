# ruff: noqa: RUF001 -- lookalike characters are this module's subject
"""A labelled corpus for the credential guard, generated from seeded RNGs at test time.

Every secret is assembled at run time from a prefix and a random body, so no string in this
file is a live-looking token of a real provider (push protection scans committed text), and
none is a real secret. Hosts are loopback only (127.0.0.1, localhost, ``*.localhost``):
tests send nothing anywhere, and name no other host.

``credential_samples`` draws the same number of samples from every secret family
(``SECRET_FAMILIES``), ``benign_samples`` from every family of ordinary facts
(``BENIGN_FAMILIES``), so the recall and false-positive figures weigh each family alike
and a per-family table shows where the guard is weak.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
LETTERS = UPPER + LOWER
DIGITS = string.digits
ALNUM = UPPER + LOWER + DIGITS
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
BASE32 = UPPER + "234567"
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

BIP39_WORDS = (
    (Path(__file__).resolve().parents[2] / "app/domain/credentials/bip39_english.txt").read_text().split()
)


@dataclass(frozen=True)
class Sample:
    family: str
    key: str
    value: str
    tags: list[str] = field(default_factory=list)


Rng = random.Random


def _r(rng: Rng, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _word(rng: Rng) -> str:
    return rng.choice(
        "acme orbit nimbus harbor falcon maple quartz cedar summit vertex lumen atlas delta "
        "pioneer beacon ember granite willow cobalt aurora".split()
    )


def _company(rng: Rng) -> str:
    return f"{_word(rng).title()} {rng.choice(['Labs', 'GmbH', 'Inc', 'Analytics', 'Logistics', 'Health'])}"


def _domain(rng: Rng) -> str:
    return f"{_word(rng)}-{_word(rng)}.localhost"


def _host(rng: Rng) -> str:
    return rng.choice(["127.0.0.1", "localhost", _domain(rng)])


def _key(rng: Rng, *words: str) -> str:
    return rng.choice(["_", "-", "."]).join(words) + rng.choice(["", f"_{rng.randint(1, 99)}"])


def _password(rng: Rng) -> str:
    return rng.choice(
        [
            _word(rng) + str(rng.randint(1, 999)),
            _r(rng, ALNUM + "!@#%^&*", rng.randint(8, 20)),
            _word(rng).title() + rng.choice("!#$") + str(rng.randint(10, 99)),
            _r(rng, LOWER, rng.randint(5, 10)) + str(rng.randint(0, 99)),
        ]
    )


def _jwt(rng: Rng) -> str:
    header = _b64url(json.dumps({"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"}).encode())
    payload = _b64url(
        json.dumps({"sub": _r(rng, ALNUM, 12), "iat": rng.randint(1_600_000_000, 1_800_000_000)}).encode()
    )
    return f"{header}.{payload}.{_r(rng, B64URL, 43)}"


def _pem(rng: Rng) -> str:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    lines = "\n".join(_r(rng, B64, 64) for _ in range(rng.randint(3, 6)))
    dashes = "-" * 5
    return f"{dashes}BEGIN {kind}PRIVATE KEY{dashes}\n{lines}\n{dashes}END {kind}PRIVATE KEY{dashes}"


def _uuid(rng: Rng) -> str:
    return "-".join(_r(rng, HEX, n) for n in (8, 4, 4, 4, 12))


# -- secret formats (the text of one secret) ---------------------------------------------------

# Provider token formats: prefix + body, bodies random. Prefixes are split ("gh" + "p_") so
# the file itself matches no scanner.
VENDOR_TOKENS: dict[str, Callable[[Rng], str]] = {
    "github": lambda r: r.choice(["gh" + "p_", "gh" + "o_", "gh" + "s_", "gh" + "u_"]) + _r(r, ALNUM, 36),
    "github-fine-grained": lambda r: "github" + "_pat_" + _r(r, ALNUM, 22) + "_" + _r(r, ALNUM, 59),
    "gitlab": lambda r: (
        r.choice(["gl" + "pat-", "gl" + "dt-", "gl" + "rt-", "gl" + "cbt-", "gl" + "ptt-"])
        + _r(r, B64URL, 20)
    ),
    "slack": lambda r: (
        "xo"
        + "x"
        + r.choice("bpa")
        + "-"
        + str(r.randint(10**10, 10**12))
        + "-"
        + str(r.randint(10**10, 10**12))
        + "-"
        + _r(r, ALNUM, 24)
    ),
    "slack-app": lambda r: (
        "xa"
        + "pp-1-"
        + _r(r, UPPER + DIGITS, 11)
        + "-"
        + str(r.randint(10**12, 10**13))
        + "-"
        + _r(r, HEX, 64)
    ),
    "stripe": lambda r: (
        r.choice(["sk", "rk"]) + r.choice(["_live_", "_test_"]) + _r(r, ALNUM, r.randint(24, 99))
    ),
    "stripe-webhook": lambda r: "wh" + "sec_" + _r(r, ALNUM, 32),
    "npm": lambda r: "np" + "m_" + _r(r, ALNUM, 36),
    "shopify": lambda r: "sh" + r.choice(["pat_", "pca_", "ppa_", "pss_"]) + _r(r, HEX, 32),
    "digitalocean": lambda r: "do" + r.choice(["p", "o", "r"]) + "_v1_" + _r(r, HEX, 64),
    "huggingface": lambda r: "h" + "f_" + _r(r, LETTERS, 34),
    "twilio": lambda r: "S" + "K" + _r(r, HEX, 32),
    "sendgrid": lambda r: "S" + "G." + _r(r, B64URL, 22) + "." + _r(r, B64URL, 43),
    "mailchimp": lambda r: _r(r, HEX, 32) + "-us" + str(r.randint(1, 20)),
    "pypi": lambda r: "py" + "pi-AgEIcHlwaS5vcmc" + _r(r, B64URL, r.randint(60, 150)),
    "databricks": lambda r: "da" + "pi" + _r(r, HEX, 32) + r.choice(["", "-2"]),
    "doppler": lambda r: "dp." + r.choice(["pt", "st", "ct", "sa", "scim", "audit"]) + "." + _r(r, ALNUM, 43),
    "postman": lambda r: "PM" + "AK-" + _r(r, HEX, 24) + "-" + _r(r, HEX, 34),
    "linear": lambda r: "lin" + "_api_" + _r(r, ALNUM, 40),
    "atlassian": lambda r: "ATA" + "TT3" + _r(r, B64URL, 170) + "=" + _r(r, HEX, 8).upper(),
    "grafana": lambda r: r.choice(
        ["gl" + "c_" + _r(r, B64, 60) + "=", "gl" + "sa_" + _r(r, ALNUM, 32) + "_" + _r(r, HEX, 8)]
    ),
    "pulumi": lambda r: "pu" + "l-" + _r(r, HEX, 40),
    "aws-access-key-id": lambda r: r.choice(["AK", "AS"]) + "IA" + _r(r, UPPER + DIGITS, 16),
    "google-api-key": lambda r: "AI" + "za" + _r(r, B64URL, 35),
    "google-oauth": lambda r: "ya" + "29." + _r(r, B64URL, r.randint(60, 120)),
    "openai": lambda r: "sk-" + r.choice(["proj-", "svcacct-", ""]) + _r(r, B64URL, r.randint(40, 120)),
    "anthropic": lambda r: "sk-" + "ant-api03-" + _r(r, B64URL, 93) + "AA",
    "azure-client-secret": lambda r: (
        _r(r, ALNUM, 3) + str(r.randint(0, 9)) + "Q~" + _r(r, ALNUM + "_~.-", 34)
    ),
    "airtable": lambda r: "pa" + "t" + _r(r, ALNUM, 14) + "." + _r(r, HEX, 64),
    "age": lambda r: "AGE-SECRET" + "-KEY-1" + _r(r, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
    "alibaba": lambda r: "LT" + "AI" + _r(r, ALNUM, 20),
    "clojars": lambda r: "CLO" + "JARS_" + _r(r, LOWER + DIGITS, 60),
    "contentful": lambda r: "CF" + "PAT-" + _r(r, B64URL, 43),
    "dynatrace": lambda r: "dt0" + "c01." + _r(r, UPPER + DIGITS, 24) + "." + _r(r, UPPER + DIGITS, 64),
    "easypost": lambda r: "EZ" + "AK" + _r(r, ALNUM, 54),
    "flutterwave": lambda r: "FLW" + "SECK_TEST-" + _r(r, "abcdefgh0123456789", 32) + "-X",
    "frameio": lambda r: "fio" + "-u-" + _r(r, B64URL, 64),
    "harness": lambda r: "pa" + "t." + _r(r, B64URL, 22) + "." + _r(r, ALNUM, 24) + "." + _r(r, ALNUM, 20),
    "terraform": lambda r: _r(r, ALNUM, 14) + ".atl" + "asv1." + _r(r, B64URL, 64),
    "vault": lambda r: "hv" + "s." + _r(r, B64URL, 90),
    "heroku": lambda r: "HR" + "KU-" + _r(r, B64URL, 60),
    "hubspot": lambda r: "pa" + "t-na1-" + _uuid(r),
    "infracost": lambda r: "ic" + "o-" + _r(r, ALNUM, 32),
    "jfrog": lambda r: "AK" + "Cp" + _r(r, ALNUM, 69),
    "mapbox": lambda r: "sk" + ".eyJ" + _r(r, B64URL, 60) + "." + _r(r, B64URL, 22),
    "newrelic": lambda r: "NR" + "AK-" + _r(r, UPPER + DIGITS, 27),
    "notion": lambda r: r.choice(
        ["sec" + "ret_" + _r(r, ALNUM, 43), "nt" + "n_" + _r(r, DIGITS, 11) + _r(r, ALNUM, 35)]
    ),
    "nuget": lambda r: "oy" + "2" + _r(r, LOWER + DIGITS, 43),
    "octopus": lambda r: "AP" + "I-" + _r(r, UPPER + DIGITS, 26),
    "openshift": lambda r: "sha256" + "~" + _r(r, B64URL, 43),
    "perplexity": lambda r: "pp" + "lx-" + _r(r, ALNUM, 48),
    "planetscale": lambda r: "pscale" + "_tkn_" + _r(r, B64URL, 43),
    "prefect": lambda r: "pn" + "u_" + _r(r, ALNUM, 36),
    "readme": lambda r: "rd" + "me_" + _r(r, LOWER + DIGITS, 70),
    "rubygems": lambda r: "ruby" + "gems_" + _r(r, HEX, 48),
    "brevo": lambda r: "xkey" + "sib-" + _r(r, HEX, 64) + "-" + _r(r, ALNUM, 16),
    "sentry": lambda r: "sntr" + "yu_" + _r(r, HEX, 64),
    "shippo": lambda r: "ship" + "po_live_" + _r(r, HEX, 40),
    "sonarqube": lambda r: "sq" + "p_" + _r(r, HEX, 40),
    "sourcegraph": lambda r: "sg" + "p_" + _r(r, HEX, 16) + "_" + _r(r, HEX, 40),
    "square": lambda r: "sq0" + "csp-" + _r(r, B64URL, 43),
    "telegram": lambda r: str(r.randint(10**8, 10**9)) + ":AA" + _r(r, B64URL, 33),
    "typeform": lambda r: "tf" + "p_" + _r(r, B64URL, 59),
    "groq": lambda r: "gs" + "k_" + _r(r, ALNUM, 52),
    "replicate": lambda r: "r8" + "_" + _r(r, ALNUM, 37),
    "supabase": lambda r: "sb" + "p_" + _r(r, HEX, 40),
    "dockerhub": lambda r: "dckr" + "_pat_" + _r(r, B64URL, 27),
    "figma": lambda r: "fi" + "gd_" + _r(r, B64URL, 40),
    "langsmith": lambda r: "lsv" + "2_pt_" + _r(r, HEX, 32) + "_" + _r(r, HEX, 10),
    "jwt": _jwt,
}


def _vendor(rng: Rng) -> tuple[str, str]:
    name = rng.choice(sorted(VENDOR_TOKENS))
    return f"vendor:{name}", VENDOR_TOKENS[name](rng)


def _kv_secret(rng: Rng) -> str:
    """A secret in one of the plain forms the other families disguise."""
    return rng.choice(
        [
            lambda: VENDOR_TOKENS[rng.choice(["github", "npm", "stripe", "slack", "openai", "gitlab"])](rng),
            lambda: f"password={_password(rng)}",
            lambda: f"api_key: {_r(rng, ALNUM, 32)}",
            lambda: f"postgres://app:{_password(rng)}@127.0.0.1:5432/crm",
        ]
    )()


I18N_PASSWORD = [
    "Passwort", "Kennwort", "mot de passe", "contraseña", "senha", "wachtwoord", "hasło", "пароль",
    "密码", "パスワード", "비밀번호", "lösenord", "salasana", "heslo", "jelszó", "şifre", "lozinka",
    "adgangskode", "passord", "κωδικός",
]  # fmt: skip
I18N_SENTENCES = [
    "Das Passwort ist {p}", "Le mot de passe est {p}", "La contraseña es {p}", "A senha é {p}",
    "Het wachtwoord is {p}", "Hasło: {p}", "Пароль: {p}", "密码是{p}", "パスワードは{p}", "비밀번호는 {p}",
    "Lösenordet: {p}", "Salasana: {p}", "Heslo je {p}",
]  # fmt: skip

_HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і", "s": "ѕ", "y": "у",
               "A": "Α", "B": "Β", "E": "Ε", "H": "Η", "K": "Κ", "M": "Μ", "O": "Ο", "P": "Ρ", "T": "Τ"}  # fmt: skip
INVISIBLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"]


def insert_invisibles(rng: Rng, text: str, k: int = 2) -> str:
    chars = list(text)
    for _ in range(k):
        chars.insert(rng.randint(1, max(len(chars) - 1, 1)), rng.choice(INVISIBLES))
    return "".join(chars)


def swap_homoglyph(rng: Rng, text: str) -> str:
    spots = [i for i, c in enumerate(text) if c in _HOMOGLYPHS]
    if not spots:
        return text
    i = rng.choice(spots)
    return text[:i] + _HOMOGLYPHS[text[i]] + text[i + 1 :]


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _obfuscated(rng: Rng) -> tuple[str, str]:
    secret = _kv_secret(rng)
    how = rng.choice(["invisible", "homoglyph", "fullwidth", "line-break"])
    if how == "invisible":
        return f"obfuscated:{how}", insert_invisibles(rng, secret, rng.randint(1, 3))
    if how == "homoglyph":
        return f"obfuscated:{how}", swap_homoglyph(rng, secret)
    if how == "fullwidth":
        return f"obfuscated:{how}", fullwidth(secret)
    token = VENDOR_TOKENS[rng.choice(["github", "npm", "stripe", "gitlab", "huggingface"])](rng)
    cut = rng.randint(8, len(token) - 4)
    return f"obfuscated:{how}", token[:cut] + rng.choice(["\n", "\n  ", "\\\n"]) + token[cut:]


def _encoded(rng: Rng) -> tuple[str, str]:
    secret = _kv_secret(rng)
    how = rng.choice(["url", "base64", "hex"])
    if how == "url":
        return f"encoded:{how}", quote(secret, safe="")
    if how == "base64":
        return f"encoded:{how}", base64.b64encode(secret.encode()).decode()
    return f"encoded:{how}", secret.encode().hex()


def _bip39(rng: Rng) -> str:
    words = " ".join(rng.choice(BIP39_WORDS) for _ in range(rng.choice([12, 15, 18, 24])))
    return rng.choice(
        ["{w}", "seed phrase: {w}", "Wallet backup words - {w}", "{w} (hardware wallet)"]
    ).format(w=words)


def _totp(rng: Rng) -> str:
    seed = _r(rng, BASE32, rng.choice([16, 26, 32]))
    grouped = " ".join(seed[i : i + 4] for i in range(0, len(seed), 4))
    return rng.choice(
        [
            f"otpauth://totp/{_company(rng).replace(' ', '')}:jane?secret={seed}&issuer=Acme",
            f"TOTP seed {seed}",
            f"2FA setup key: {grouped.lower()}",
            f"authenticator secret {grouped}",
        ]
    )


def _recovery(rng: Rng) -> str:
    codes = rng.choice(
        [
            lambda: [f"{_r(rng, HEX, 5)}-{_r(rng, HEX, 5)}" for _ in range(rng.randint(2, 8))],
            lambda: [
                f"{rng.randint(1000, 9999)} {rng.randint(1000, 9999)}" for _ in range(rng.randint(2, 8))
            ],
            lambda: [_r(rng, LOWER + DIGITS, 10) for _ in range(rng.randint(2, 8))],
        ]
    )()
    label = rng.choice(["Recovery codes", "backup codes", "2FA recovery codes", "Emergency codes"])
    return f"{label}: " + rng.choice([", ", " ", "\n"]).join(codes)


def _command(rng: Rng) -> str:
    pw = _password(rng).replace("'", "")
    host = rng.choice(["127.0.0.1", "localhost"])
    return rng.choice(
        [
            f"curl -u {_word(rng)}:{pw} http://{host}:8080/api",
            f"curl --user {_word(rng)}:{pw} http://{host}/status",
            f"mysql -h {host} -u root -p{pw} crm",
            f"mysqldump -uroot -p{pw} crm > dump.sql",
            f"sshpass -p '{pw}' ssh deploy@{host}",
            f"redis-cli -h {host} -a {pw} ping",
            f"docker login -u ci -p {pw} {host}:5000",
            f"ldapsearch -x -D cn=admin -w {pw} -H ldap://{host}",
            f"smbclient //{host}/share -U admin%{pw}",
            f"openssl pkcs12 -in cert.p12 -passin pass:{pw}",
            f"./deploy.sh --password {pw} --env staging",
        ]
    )


def _keyword(rng: Rng) -> str:
    name = rng.choice(
        [
            "password",
            "DB_PASSWORD",
            "api_key",
            "apiKey",
            "secret",
            "client_secret",
            "token",
            "auth_token",
            "access_token",
            "passwd",
            "pwd",
            "smtp_password",
            "session_id",
            "cookie",
            "PGPASSWORD",
            "MYSQL_ROOT_PASSWORD",
            "x-api-key",
            "refresh_token",
            "private_key",
        ]
    )
    sep = rng.choice(["=", ": ", " = ", ":", " => "])
    quote_ = rng.choice(["", '"', "'"])
    return f"{name}{sep}{quote_}{_password(rng)}{quote_}"


def _short_keyword(rng: Rng) -> str:
    pw = _password(rng)
    return rng.choice(
        [
            f"pass: {pw}",
            f"pw: {pw}",
            f"PW={pw}",
            f"passcode: {rng.randint(100000, 999999)}",
            f"PIN {rng.randint(1000, 99999999)}",
            f"PIN: {rng.randint(1000, 9999)}",
            f"card pin code {rng.randint(1000, 9999)}",
            f"Passcode {pw}",
            f"pwd {pw}".replace("pwd ", "pwd: "),
        ]
    )


def _prose(rng: Rng) -> str:
    pw = _password(rng)
    thing = rng.choice(["router", "VPN", "staging database", "wifi", "admin panel", "CRM", "NAS"])
    return rng.choice(
        [
            f"the {rng.choice(['password', 'api key', 'token', 'secret'])} is {pw}",
            f"The password for the {thing} is {pw}",
            f"the db password for {rng.choice(['prod', 'staging', 'qa'])} is {pw}",
            f"Password of the {thing}: {pw}",
            f"our {thing} password is {pw}, please keep it",
            f"{thing} login password is now {pw}",
        ]
    )


def _i18n(rng: Rng) -> str:
    pw = _password(rng)
    if rng.random() < 0.5:
        return f"{rng.choice(I18N_PASSWORD)}{rng.choice([': ', '=', ' = ', '：'])}{pw}"
    return rng.choice(I18N_SENTENCES).format(p=pw)


def _netrc(rng: Rng) -> str:
    host = rng.choice(["127.0.0.1", "localhost", _domain(rng)])
    return rng.choice(
        [
            f"machine {host} login {_word(rng)} password {_password(rng)}",
            f"machine {host}\n  login {_word(rng)}\n  password {_password(rng)}",
            f"default login anonymous password {_password(rng)}",
        ]
    )


def _login_slash(rng: Rng) -> str:
    return rng.choice(
        [
            f"login: {_word(rng)}@{_host(rng)} / {_password(rng)}",
            f"Login: admin / {_word(rng).title()}{rng.randint(10, 99)}!",
            f"username: {_word(rng)}@{_domain(rng)} | {_password(rng)}",
        ]
    )


ACCOUNTS = ["admin", "root", "administrator", "pi", "postgres", "guest", "ubuntu", "operator"]


def _pair_password(rng: Rng) -> str:
    # A password as a login pair holds it: no separator of the pair inside.
    return _password(rng).translate(str.maketrans("/:", "#!"))


def _login_pair(rng: Rng) -> str:
    account, password = rng.choice(ACCOUNTS), _pair_password(rng)
    return rng.choice(
        [
            f"use {account}/{password}",
            f"log in with {_word(rng)} / {password}",
            f"{account} / {password} on the {rng.choice(['switch', 'router', 'nas', 'printer'])}",
            f"WiFi: {_word(rng).title()}-Guest / {password}",
            f"default creds {account}/{rng.choice(['admin', 'toor', 'changeme', account])}",
            f"login {_word(rng)}:{password}",
            f"sign in as {account}/{password}",
            # Short labels: ``u: admin p: hunter2``.
            f"u: {account} p: {password}",
            f"U={_word(rng)} P={password}",
            f"usr: {_word(rng)}@{_domain(rng)}, pw: {password}",
            f"u: {account} / p: {rng.choice(['admin', 'changeme', 'hunter2', account])}",
        ]
    )


# ``{pw}`` a password word, ``{field}`` another field of the same account.
_BY_REFERENCE = (
    "the {thing} {pw} is the same as the {field}",
    "{pw} = {field}",
    "{pw} same as {field}",
    "{pw}: same as {field}",
    "The {pw} for the {thing} is the {field}.",
    "{pw} equals the {field}",
    "{thing}: {pw} is just the {field} reversed",
    "{field} and {pw} are the same on the {thing}",
    "{thing} login and {pw} are identical",
    "the username doubles as the {pw}",
    "{pw} matches the {field}, lowercase",
    "{thing}: same username and {pw}.",
)


def _by_reference(rng: Rng) -> str:
    """A password given as another field of the same account: whoever reads the memory
    reads the password too."""
    return rng.choice(_BY_REFERENCE).format(
        thing=rng.choice(["router", "NAS", "staging box", "printer", "wifi", "CRM admin", "VPN"]),
        pw=rng.choice(["password", "Password", "pw", "pwd", "pass", "passwd", "passcode"]),
        field=rng.choice(["username", "user name", "login", "user id", "email", "account name", "user"]),
    )


def _access_code(rng: Rng) -> str:
    digits = str(rng.randint(1000, 99_999_999))[: rng.randint(4, 8)]
    return rng.choice(
        [
            f"door code {digits}",
            f"alarm code: {digits}",
            f"the gate code is {digits}",
            f"keypad code {digits}",
            f"PUK {rng.randint(10**7, 10**8 - 1)}",
        ]
    )


def _userinfo(rng: Rng) -> str:
    return f"{_word(rng)}:{_password(rng).replace('@', '#').replace(':', '!')}@{rng.choice(['127.0.0.1', 'localhost:5432', _domain(rng)])}"


def _session(rng: Rng) -> str:
    return rng.choice(["session=", "sid=", "PHPSESSID=", "sessionid=", "connect.sid="]) + _r(
        rng, ALNUM, rng.randint(16, 40)
    )


def _url_password(rng: Rng) -> str:
    scheme = rng.choice(["postgres", "mysql", "https", "redis", "amqp", "mongodb+srv", "ftp", "smtp"])
    return f"{scheme}://{_word(rng)}:{_password(rng).replace('@', '#').replace('/', '!')}@{rng.choice(['127.0.0.1', 'localhost'])}:{rng.randint(1000, 9999)}/{_word(rng)}"


def _aws_secret(rng: Rng) -> str:
    return f"aws_secret_access_key = {_r(rng, B64, 40)}"


def _gcp(rng: Rng) -> str:
    return json.dumps(
        {
            "type": "service_" + "account",
            "project_id": f"{_word(rng)}-prod",
            "private_key_id": _r(rng, HEX, 40),
        }
    )


def _azure_storage(rng: Rng) -> str:
    return ("DefaultEndpointsProtocol=https;AccountName=" + _word(rng) + "store;Account" + "Key=" + _r(rng, B64, 86)
            + "==;EndpointSuffix=core.localhost")  # fmt: skip


def _azure_sas(rng: Rng) -> str:
    return f"http://127.0.0.1:10000/{_word(rng)}?sv=2022-11-02&se=2026-12-31&sig=" + _r(rng, ALNUM + "%", 44)


def _header(rng: Rng) -> str:
    return rng.choice(
        [
            lambda: "Authorization: Bearer " + rng.choice([_r(rng, B64URL, 40), _jwt(rng)]),
            lambda: (
                "Authorization: Basic " + base64.b64encode(f"{_word(rng)}:{_password(rng)}".encode()).decode()
            ),
            lambda: (
                rng.choice(["Cookie: ", "Set-Cookie: "])
                + rng.choice(["session", "sid", "_auth"])
                + "="
                + _r(rng, ALNUM, rng.randint(8, 48))
                + "; Path=/; HttpOnly"
            ),
            lambda: "X-Api-Key: " + _r(rng, ALNUM, 32),
        ]
    )()


def _connection_string(rng: Rng) -> str:
    return f"Server=127.0.0.1;Database={_word(rng)};User Id={_word(rng)};Password={_password(rng)};"


def _random_key(rng: Rng) -> str:
    return rng.choice(
        [
            lambda: _r(rng, ALNUM, rng.randint(24, 64)),
            lambda: _r(rng, B64, rng.randint(30, 60)) + rng.choice(["", "=", "=="]),
            lambda: _r(rng, HEX, rng.choice([32, 48, 56])),
        ]
    )()


_SECRET_TEXT: dict[str, Callable[[Rng], str]] = {
    "aws-secret-key": _aws_secret,
    "gcp-service-account": _gcp,
    "azure-storage": _azure_storage,
    "azure-sas": _azure_sas,
    "pem": _pem,
    "header": _header,
    "url-password": _url_password,
    "connection-string": _connection_string,
    "keyword": _keyword,
    "short-keyword": _short_keyword,
    "prose": _prose,
    "i18n-password": _i18n,
    "netrc": _netrc,
    "command-line": _command,
    "login-slash": _login_slash,
    "userinfo-no-scheme": _userinfo,
    "session-bare": _session,
    "login-pair": _login_pair,
    "access-code": _access_code,
    "by-reference": _by_reference,
    "totp": _totp,
    "bip39": _bip39,
    "recovery-codes": _recovery,
    "high-entropy": _random_key,
}

_FRAMES = [
    "{s}",
    "Use this for the CRM sync: {s}",
    "Credentials for the staging export -> {s}",
    "Found in the vendor onboarding email: {s} (rotate later)",
    "note: {s}",
    "For the {w} integration, {s}",
]


def _placed(rng: Rng, family: str, secret: str) -> Sample:
    """The secret where an agent would put it: mostly framed in the value, sometimes a tag
    or the key, sometimes in the middle of a long note."""
    where = rng.random()
    if where < 0.1:
        note = " ".join(BENIGN_FAMILIES[name](rng).value for name in ("icp", "reporting", "score", "hash"))
        note = note * rng.randint(1, 8)
        cut = rng.randint(0, len(note))
        return Sample(
            family, _key(rng, "notes", _word(rng)), f"{note[:cut]} {secret} {note[cut:]}", ["notes"]
        )
    if where < 0.85 or "\n" in secret:
        return Sample(family, _key(rng, _word(rng), "integration"), rng.choice(_FRAMES).format(s=secret, w=_word(rng)),
                      rng.sample(["crm", "ops", "setup", "vendor"], rng.randint(0, 2)))  # fmt: skip
    if where < 0.93 and len(secret) <= 64:
        return Sample(family, _key(rng, "creds"), "see tags", [secret])
    return Sample(family, f"{_word(rng)} {secret}"[:255], "stored", [])


def _from_text(family: str) -> Callable[[Rng], Sample]:
    return lambda rng: _placed(rng, family, _SECRET_TEXT[family](rng))


def _vendor_sample(rng: Rng) -> Sample:
    _, token = _vendor(rng)
    return _placed(rng, "vendor", token)


def _obfuscated_sample(rng: Rng) -> Sample:
    _, secret = _obfuscated(rng)
    return _placed(rng, "obfuscated", secret)


def _encoded_sample(rng: Rng) -> Sample:
    _, secret = _encoded(rng)
    return _placed(rng, "encoded", secret)


def _named_key(rng: Rng) -> Sample:
    key = rng.choice(["password", "db_password", "apiKey", "github_token", "stripe-secret", "smtp.passwd", "client_secret",
                      "session_id", "API_KEY", "access-token", "wifi password", "Passwort", "mot de passe", "contraseña",
                      "root_pass", "vpn_pin", "router-passphrase"])  # fmt: skip
    value = rng.choice(
        [
            lambda: _password(rng),
            lambda: " ".join(rng.choice(BIP39_WORDS) for _ in range(rng.randint(3, 5))),
            lambda: f"{_word(rng)} {_word(rng)} {rng.randint(10, 99)}",
        ]
    )()
    return Sample("credential-named-key", key, value, [])


def _split(rng: Rng) -> Sample:
    token = VENDOR_TOKENS[rng.choice(["github", "npm", "stripe", "gitlab", "slack", "huggingface"])](rng)
    how = rng.choice(["key-value", "tags", "words"])
    if how == "key-value":
        cut = rng.randint(8, 16)
        return Sample("split", token[:cut], token[cut:], [])
    if how == "tags":
        parts = [token[i : i + 14] for i in range(0, len(token), 14)]
        return Sample("split", "vendor-token-parts", "in the tags, in order", parts)
    thing = rng.choice(["router", "vpn", "wifi", "nas"])
    return Sample("split", f"the {thing} password", f"is {_password(rng)}", [])


def _common_password(rng: Rng) -> Sample:
    """A well-known password as the whole value, under any key."""
    stem = rng.choice(["password", "P@ssw0rd", "Passw0rd", "qwerty", "letmein", "Welcome", "iloveyou", "changeme",
                       "trustno", "abc"])  # fmt: skip
    tail = rng.choice(
        [str(rng.randint(1, 9)), str(rng.randint(100, 999)), f"{rng.randint(1, 99)}!", "!", "2026"]
    )
    if stem == "abc":
        tail = str(rng.randint(100, 999))
    elif tail == "!" and stem.isalpha():
        tail = "1!"
    return Sample("common-password", _key(rng, _word(rng), rng.choice(["login", "note", "admin"])), stem + tail,
                  rng.sample(["crm", "ops", "setup", "vendor"], rng.randint(0, 2)))  # fmt: skip


def _named_tag(rng: Rng) -> Sample:
    """The key says where, a tag says what: key ``router admin``, tag ``password``."""
    thing = rng.choice(["router", "vpn", "nas", "printer", "wifi", "switch"])
    value = rng.choice([lambda: _password(rng), lambda: _word(rng), lambda: f"{_word(rng)}-{_word(rng)}"])()
    tags = [rng.choice(["password", "wifi-password", "Passwort", "pin", "credentials", "api_key"])]
    return Sample("credential-named-tag", f"{thing} {rng.choice(['admin', 'login', 'access'])}", value,
                  tags + rng.sample(["ops", "setup"], rng.randint(0, 1)))  # fmt: skip


SECRET_FAMILIES: dict[str, Callable[[Rng], Sample]] = {
    **{family: _from_text(family) for family in _SECRET_TEXT},
    "vendor": _vendor_sample,
    "obfuscated": _obfuscated_sample,
    "encoded": _encoded_sample,
    "credential-named-key": _named_key,
    "split": _split,
    "common-password": _common_password,
    "credential-named-tag": _named_tag,
}


def credential_samples(seed: int = 1234, per_family: int = 16) -> list[Sample]:
    rng = random.Random(seed)
    samples = [make(rng) for _ in range(per_family) for make in SECRET_FAMILIES.values()]
    # Vendor formats are many: every one of them at least twice more.
    for name in sorted(VENDOR_TOKENS):
        for _ in range(2):
            samples.append(_placed(rng, "vendor", VENDOR_TOKENS[name](rng)))
    return samples


# -- ordinary facts ------------------------------------------------------------------------------


def _base58check(payload: bytes) -> str:
    raw = payload + hashlib.sha256(hashlib.sha256(payload).digest()).digest()[:4]
    number = int.from_bytes(raw, "big")
    out = ""
    while number:
        number, digit = divmod(number, 58)
        out = BASE58[digit] + out
    return "1" * (len(raw) - len(raw.lstrip(b"\0"))) + out


def _btc_address(rng: Rng) -> str:
    version = rng.choice([b"\x00", b"\x05"])
    return _base58check(version + rng.randbytes(20))


def _eth_address(rng: Rng) -> str:
    body = _r(rng, HEX, 40)
    return "0x" + "".join(c.upper() if c.isalpha() and rng.random() < 0.5 else c for c in body)


def _cid(rng: Rng) -> str:
    if rng.random() < 0.5:
        return "Qm" + _r(rng, BASE58, 44)
    return "bafy" + _r(rng, LOWER + "234567", 55)


def _camel(rng: Rng) -> str:
    words = rng.sample(["customer", "lifetime", "value", "estimate", "region", "quarterly", "pipeline", "stage",
                        "qualified", "opportunity", "renewal", "forecast", "account", "owner", "revenue", "churn",
                        "HTTP", "API", "response", "handler", "factory", "provider"], rng.randint(4, 7))  # fmt: skip
    name = words[0].lower() + "".join(w if w.isupper() else w.title() for w in words[1:])
    return name + rng.choice(["", str(rng.randint(2020, 2030))])


def _digest_fact(rng: Rng) -> str:
    data = rng.randbytes(32)
    return rng.choice(
        [
            f"md5 {hashlib.md5(data).hexdigest()} matches the vendor's checksum",
            f"Content-MD5: {base64.b64encode(hashlib.md5(data).digest()).decode()}",
            f"sha1 of the export: {hashlib.sha1(data).hexdigest()}",
            f"SHA-256 digest {hashlib.sha256(data).hexdigest()}",
            f"sha512sum {hashlib.sha512(data).hexdigest()}  export.csv",
            f'integrity="sha384-{base64.b64encode(hashlib.sha384(data).digest()).decode()}"',
            f"SRI hash sha256-{base64.b64encode(hashlib.sha256(data).digest()).decode()} for the widget script",
            f'ETag "{hashlib.md5(data).hexdigest()}"',
            f"base64 sha256 digest: {base64.b64encode(hashlib.sha256(data).digest()).decode()}",
            f"checksum (sha224) {hashlib.sha224(data).hexdigest()}",
        ]
    )


def _json_b64(rng: Rng) -> str:
    doc = {"company": _company(rng), "segment": rng.choice(["smb", "mid-market", "enterprise"]),
           "score": rng.randint(1, 100), "tags": rng.sample(["icp", "fintech", "eu", "renewal"], 2)}  # fmt: skip
    encoded = base64.b64encode(json.dumps(doc).encode()).decode()
    return rng.choice([f"Export payload (base64 JSON): {encoded}", f"state={encoded}", encoded])


_PROSE_FACTS = [
    "API key: stored in Vault",
    "The secret is persistence",
    "password policy requires 12 characters",
    "Password policy: rotate every 90 days, at least 14 characters, no reuse of the last 5.",
    "The API key is managed by the platform team; ask them, never paste it here.",
    "Tokens are issued per workspace and expire after 30 days.",
    "The password reset link expires after 24 hours.",
    "Secret santa draw happens on the first Monday of December.",
    "Token budget per run: 4000 tokens, max_tokens 512.",
    "The secret to their growth is a partner channel.",
    "Ask the platform team for the token; it is kept in 1Password.",
    "Session timeout is 30 minutes for the console.",
    "Pinned the onboarding doc to the top of the channel.",
    "The credentials are in the team vault under 'CRM export'.",
    "Password: see the shared vault entry",
    "token: none required for the public endpoint",
    "Das Passwort wird alle 90 Tage geändert.",
    "Le mot de passe est stocké dans le coffre de l'équipe.",
    "La contraseña se cambia cada trimestre.",
    "Пароль хранится в сейфе команды.",
    "密码保存在团队保险库中。",
    "Key results: pipeline up 12%, churn down 3%.",
    "Our secret weapon is the onboarding call.",
    "Bypass=false for the approval step; the pass rate was 92% last week.",
    "Compass score 7 of 10; passage of the budget expected in Q3.",
    "mysql -h 127.0.0.1 -P 3306 -u readonly crm (password from the vault)",
    "curl -s http://127.0.0.1:8080/healthz returns ok",
    "git clone git@127.0.0.1:acme/crm.git",
    "Contact: jane.doe@acme-widgets.localhost",
    "email:jane.doe@acme-widgets.localhost for the renewal",
    "The PIN pad at reception was replaced.",
    "login: via SSO / Okta tile",
    "Recovery codes are printed and kept in the office safe.",
    "Two-factor authentication is mandatory for admins.",
    "seed round closed at $4M with two angels",
    "user: jane / role: admin",
]


def _prose_fact(rng: Rng) -> Sample:
    return Sample(
        "prose-about-credentials", _key(rng, "note", _word(rng)), rng.choice(_PROSE_FACTS), ["policy"]
    )


def _policy_key(rng: Rng) -> Sample:
    key = rng.choice(["password_policy", "token_budget", "api-key-rotation", "secret-santa-list", "auth_flow",
                      "password_reset_flow", "api_key_owner", "session_timeout", "pin_layout", "credential-storage"])  # fmt: skip
    value = rng.choice(
        [
            "Passwords rotate every 90 days; the password is stored in the team vault.",
            f"Token budget per run: {rng.randint(1000, 9000)} tokens, max_tokens {rng.randint(256, 4096)}.",
            "The platform team owns it; ask in #platform.",
            "Owned by the security team, rotated quarterly.",
            "Secret santa draw happens on the first Monday of December.",
            "Auth flow: OAuth consent screen, then the callback stores the session server-side.",
            f"{rng.randint(15, 60)} minutes of inactivity",
        ]
    )
    return Sample("policy-key", key, value, ["policy"])


def _config_fact(rng: Rng) -> str:
    return rng.choice(
        [
            f"timeout={rng.randint(5, 60)}s, retries: {rng.randint(1, 5)}, region=eu-central-{rng.randint(1, 3)}",
            f"password_min_length={rng.randint(8, 16)}; password_max_age_days={rng.randint(30, 365)}",
            f"token_ttl_s={rng.randint(600, 86400)} session_timeout=30m refresh_window_s={rng.randint(60, 600)}",
            f"api_version=2024-{rng.randint(1, 12):02d}-01, key: icp-decision, max_tokens: {rng.randint(256, 8192)}",
            f"token: {rng.randint(100, 99999)} per run (budget)",
            "password: 12 characters minimum, one digit, one symbol",
            "Authorization: required for every endpoint except /healthz",
            "X-Api-Key: required on write requests",
            f"session={_word(rng)}-{rng.randint(2024, 2026)}-q{rng.randint(1, 4)}-planning",
            "password: (see the vault entry 'CRM admin')",
            "secret: none, the endpoint is public",
            f"pin: top of the #{_word(rng)} channel",
        ]
    )


def _command_fact(rng: Rng) -> str:
    host = rng.choice(["127.0.0.1", "localhost"])
    return rng.choice(
        [
            f"curl -s http://{host}:{rng.randint(3000, 9000)}/healthz",
            f"mysql -h {host} -P 3306 -u readonly -p crm",
            f"docker login {host}:5000 --password-stdin < token.txt",
            f"ssh -p 2222 deploy@{host}",
            "git push -u origin feature/icp-scoring:main",
            f"docker run -u 1000:1000 -p 8080:8080 {host}:5000/acme/crm:1.4.2",
            f"redis-cli -h {host} -p 6379 ping",
            "psql -U app -d crm -c 'select count(*) from leads'",
            f"kubectl logs crm-api-7d9f8b6c5-{_r(rng, LOWER + DIGITS, 5)} --since=1h",
            "pytest -q --maxfail 3 tests/unit",
        ]
    )


def _public_key(rng: Rng) -> str:
    body = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00 " + rng.randbytes(32)).decode()
    dashes = "-" * 5
    cert = "\n".join(_r(rng, B64, 64) for _ in range(rng.randint(3, 6)))
    kind = rng.choice(["PUBLIC KEY", "CERTIFICATE", "PGP PUBLIC KEY BLOCK"])
    return rng.choice(
        [
            f"Deploy key: ssh-ed25519 {body} ci@{_domain(rng)}",
            f"{dashes}BEGIN {kind}{dashes}\n{cert}\n{dashes}END {kind}{dashes}",
        ]
    )


def _ordinary_ids(rng: Rng) -> str:
    return rng.choice(
        [
            f"Order ORD-2026-{rng.randint(1, 999999):06d}, tracking 1Z{_r(rng, UPPER + DIGITS, 16)}",
            f"IBAN DE{rng.randint(10, 99)}{_r(rng, DIGITS, 18)}, BIC {_r(rng, UPPER, 6)}{_r(rng, UPPER + DIGITS, 2)}",
            f"Slack channel C0{_r(rng, UPPER + DIGITS, 9)}, Jira CRM-{rng.randint(1, 9999)}",
            f"Stripe publishable key pk_live_{_r(rng, ALNUM, 24)} goes in the checkout page",
            f"Phone +49 30 {rng.randint(1000000, 9999999)}, fax +49 30 {rng.randint(1000000, 9999999)}",
            f"MAC {':'.join(_r(rng, HEX, 2) for _ in range(6))}, serial SN{_r(rng, UPPER + DIGITS, 12)}",
            f"Pod crm-api-{_r(rng, HEX, 10)}-{_r(rng, LOWER + DIGITS, 5)} restarted {rng.randint(1, 9)} times",
            f"Doc id {_r(rng, B64URL, 44)} in the shared drive folder",
        ]
    )


def _long_note(rng: Rng) -> str:
    facts = [
        BENIGN_FAMILIES[name](rng).value for name in ("icp", "reporting", "processed-domain", "score", "hash")
    ]
    return " ".join(rng.sample(facts, len(facts)) * rng.randint(2, 6))


BENIGN_FAMILIES: dict[str, Callable[[Rng], Sample]] = {
    "icp": lambda rng: Sample(
        "icp",
        _key(rng, "icp", _word(rng)),
        f"ICP decision: B2B SaaS in {rng.choice(['DACH', 'Nordics', 'UK', 'Benelux'])}, "
        f"{rng.randint(20, 200)}-{rng.randint(300, 2000)} employees, ARR above ${rng.randint(2, 50)}M; "
        f"skip agencies and {rng.choice(['resellers', 'public sector', 'non-profits'])}.",
        ["icp", "decision"],
    ),
    "exclusion": lambda rng: Sample(
        "exclusion",
        _key(rng, "exclude", _word(rng)),
        f"Exclude {_company(rng)} ({_domain(rng)}) from research: existing customer since "
        f"{rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}.",
        ["research", "exclusion"],
    ),
    "reporting": lambda rng: Sample(
        "reporting",
        _key(rng, "report", "prefs"),
        f"Weekly report every {rng.choice(['Monday', 'Friday'])} at {rng.randint(7, 17):02d}:00 "
        f"{rng.choice(['CET', 'UTC', 'PST'])}; bullet points, at most {rng.randint(5, 15)} items, "
        f"send to {_word(rng)}.{_word(rng)}@{_domain(rng)}.",
        ["reporting"],
    ),
    "processed-domain": lambda rng: Sample(
        "processed-domain",
        f"processed:{_domain(rng)}",
        f"Processed {_domain(rng)} on 2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}: "
        f"{rng.randint(0, 40)} contacts, {rng.randint(0, 9)} qualified, score {rng.random():.2f}.",
        ["processed"],
    ),
    "ids": lambda rng: Sample(
        "ids",
        _key(rng, "account", _word(rng)),
        f"CRM account id {rng.randint(10**8, 10**10)}, Stripe customer cus_{_r(rng, ALNUM, 14)}, "
        f"payment pi_{_r(rng, ALNUM, 24)}, ticket {rng.choice(['OPS', 'SALES', 'RES'])}-{rng.randint(1, 9999)}.",
        ["ids"],
    ),
    "uuid": lambda rng: Sample(
        "uuid",
        _key(rng, "run", "ref"),
        f"Last enrichment batch {_uuid(rng)} finished OK; job ULID 01{_r(rng, '0123456789ABCDEFGHJKMNPQRSTVWXYZ', 24)}.",
        ["batch"],
    ),
    "url": lambda rng: Sample(
        "url",
        _key(rng, "dashboard", _word(rng)),
        f"Dashboard lives at http://{rng.choice(['localhost', '127.0.0.1'])}:{rng.randint(3000, 9000)}"
        f"/d/{_r(rng, B64URL, 44)}/edit?tab={_word(rng)}&page={rng.randint(1, 9)}",
        ["links"],
    ),
    "hash": lambda rng: Sample(
        "hash",
        _key(rng, "deploy", _word(rng)),
        f"Deployed commit {_r(rng, HEX, 40)} (short {_r(rng, HEX, 7)}); image digest sha256:{_r(rng, HEX, 64)}.",
        ["deploy"],
    ),
    "digest": lambda rng: Sample("digest", _key(rng, "export", "checksum"), _digest_fact(rng), ["integrity"]),
    "score": lambda rng: Sample(
        "score",
        _key(rng, "lead", "score"),
        f"Lead score {rng.randint(1, 100)}/100 for {_company(rng)} on {rng.randint(1, 28)}.{rng.randint(1, 12)}.2026;"
        f" NPS {rng.randint(-20, 80)}, win rate {rng.randint(5, 60)}%.",
        ["scoring"],
    ),
    "policy-key": _policy_key,
    "prose-about-credentials": _prose_fact,
    "identifiers": lambda rng: Sample(
        "identifiers",
        _key(rng, "pipeline", _word(rng)),
        f"Pipeline stage renamed to QualifiedOpportunityStage{rng.randint(2020, 2030)}; field "
        f"{_camel(rng)} drives the {_word(rng)}-{_word(rng)}-q{rng.randint(1, 4)}-outreach-list.",
        ["crm"],
    ),
    "camel-case": lambda rng: Sample(
        "camel-case", _key(rng, "field", _word(rng)), f"Renamed {_camel(rng)} to {_camel(rng)}.", ["schema"]
    ),
    "labels": lambda rng: Sample(
        "labels",
        _key(rng, "label", _word(rng)),
        f"Workspace ws-{_r(rng, HEX, 10)} runs the {_word(rng)}-run-{_r(rng, HEX, 12)} job; "
        f"marker confidential-{_word(rng)}-{_r(rng, HEX, 8)}.",
        ["labels"],
    ),
    "path": lambda rng: Sample(
        "path",
        _key(rng, "export", "path"),
        f"Exports go to /srv/exports/{_word(rng)}/{rng.randint(2024, 2026)}/{_word(rng)}_contacts_final_v{rng.randint(1, 9)}.csv",
        ["exports"],
    ),
    "ipfs": lambda rng: Sample(
        "ipfs", _key(rng, "asset", _word(rng)), f"Brochure pinned on IPFS as {_cid(rng)}.", ["assets"]
    ),
    "crypto-address": lambda rng: Sample(
        "crypto-address",
        _key(rng, "treasury", _word(rng)),
        rng.choice(
            [
                f"Donations go to BTC {_btc_address(rng)}",
                f"Invoice paid from {_eth_address(rng)}",
                f"Cold wallet address bc1q{_r(rng, '023456789acdefghjklmnpqrstuvwxyz', 38)}",
                f"tx 0x{_r(rng, HEX, 64)} confirmed",
            ]
        ),
        ["finance"],
    ),
    "base64-json": lambda rng: Sample(
        "base64-json", _key(rng, "export", "payload"), _json_b64(rng), ["export"]
    ),
    "dates-versions": lambda rng: Sample(
        "dates-versions",
        _key(rng, "release", _word(rng)),
        f"v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}-rc.{rng.randint(1, 5)} shipped "
        f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z; "
        f"build #{rng.randint(1000, 99999)}, IPv6 fd00::{rng.randint(1, 9999):x}:{rng.randint(1, 9999):x}.",
        ["release"],
    ),
    "multilingual": lambda rng: Sample(
        "multilingual",
        _key(rng, "note", _word(rng)),
        rng.choice(
            [
                "Kunde möchte den Vertrag im März verlängern.",
                "Le client préfère un appel le mardi.",
                "El cliente pidió una demo en español.",
                "Клиент просит счёт в евро.",
                "客户希望下周二开会。",
                "顧客は来週のデモを希望しています。",
                "고객은 다음 주 화요일 회의를 원합니다.",
            ]
        ),
        ["notes"],
    ),
    "bip39-like-prose": lambda rng: Sample(
        "bip39-like-prose",
        _key(rng, "note", _word(rng)),
        " ".join(rng.choice(BIP39_WORDS) for _ in range(rng.randint(4, 9)))
        + " is the tagline the customer liked.",
        ["marketing"],
    ),
    "config": lambda rng: Sample("config", _key(rng, "settings", _word(rng)), _config_fact(rng), ["config"]),
    "command": lambda rng: Sample(
        "command", _key(rng, "runbook", _word(rng)), _command_fact(rng), ["runbook"]
    ),
    "public-key": lambda rng: Sample("public-key", _key(rng, "keys", _word(rng)), _public_key(rng), ["keys"]),
    "ordinary-ids": lambda rng: Sample(
        "ordinary-ids", _key(rng, "ref", _word(rng)), _ordinary_ids(rng), ["ids"]
    ),
    "long-note": lambda rng: Sample(
        "long-note", _key(rng, "summary", _word(rng)), _long_note(rng)[:16_000], ["summary"]
    ),
}


def _slash_pair(rng: Rng) -> Sample:
    """``/`` and ``:`` between two words, ``u:`` and ``p:`` labels, as notes use them: no
    login pair."""
    account = rng.choice(ACCOUNTS)
    value = rng.choice(
        [
            f"use TCP/IP on port {rng.randint(1024, 65535)}",
            f"read/write access for the {_word(rng)} team",
            f"open {account}/settings to change the {_word(rng)} plan",
            f"the endpoint is {account}/v{rng.randint(1, 4)}",
            "wifi bands 2.4GHz / 5GHz",
            f"{rng.randint(1, 19)}/{rng.randint(20, 40)} qualified",
            "supports user/password login and SSO",
            f"chown {account}:{account} /srv/{_word(rng)}",
            f"the user/group is {account}/staff",
            f"input/output of the {_word(rng)} job, login {rng.randint(1, 12):02d}:{rng.randint(0, 59):02d}",
            # ``u:`` and ``p:`` as statistics and notes use them.
            f"u: {rng.random():.2f}, p: {rng.random() / 10:.3f}",
            f"fit for {_word(rng)}: u = {rng.randint(1, 40)} p = {rng.randint(1, 9)}",
            f"u: {account} p: (see the vault)",
            f"u: {account} p: {rng.choice(['settings', 'unknown', 'pending', 'rotated'])}",
            f"id: {rng.randint(1, 9999)} p: {rng.randint(1, 99)}",
            f"U-{rng.randint(200, 240)}, p: {rng.randint(80, 99)} protons",
            f"login: {rng.randint(1, 12):02d}:{rng.randint(0, 59):02d} p: {rng.randint(1, 5)} pages",
        ]
    )
    return Sample("slash-pair", _key(rng, "runbook", _word(rng)), value, ["ops"])


def _numbered_code(rng: Rng) -> Sample:
    value = rng.choice(
        [
            f"error code {rng.randint(1000, 9999)}",
            f"zip code {rng.randint(10000, 99999)}",
            f"status code {rng.choice([200, 404, 503])}, retry after {rng.randint(1, 60)} s",
            f"postal code {rng.randint(1000, 99999)}",
            f"promo code {_word(rng).upper()}{rng.randint(10, 50)} for the {_word(rng)} launch",
            f"the pin count is {rng.randint(1, 99)}",
        ]
    )
    return Sample("numbered-code", _key(rng, "note", _word(rng)), value, ["support"])


def _label(rng: Rng) -> Sample:
    """A whole value that is a label, even where a password list would have the word."""
    value = rng.choice(
        [
            f"Summer{rng.randint(2019, 2027)}",
            f"master{rng.randint(1, 9)}",
            f"march-{rng.randint(2019, 2027)}",
            f"admin-{rng.randint(1, 9)}",
            "Hello!",
            "passport",
            "password policy",
            f"{_word(rng)}{rng.randint(1, 99)}",
        ]
    )
    return Sample("label", rng.choice(["campaign", "host", "label", "codename", "stage"]), value,
                  rng.sample(["campaign", "ops", "release"], rng.randint(0, 2)))  # fmt: skip


def _account_fields(rng: Rng) -> Sample:
    """The words of a password by reference (password, username, login, same as) in facts
    about accounts that give no password away."""
    field = rng.choice(["username", "user name", "login", "email address", "account name"])
    value = rng.choice(
        [
            f"the {field} is shown on the login page",
            f"the password field is below the {field} field",
            f"passwords must not be the same as the {field}",
            f"the password must differ from the {field} and be 12 characters",
            f"the password is not the {field}",
            f"the {field} is the same as the email on the invoice",
            f"password reset mails go to the same address as the {field}",
            f"the password is stored in the same vault as the {field}",
            f"use the same username and password as the {_word(rng)} portal",
            "password: the login page has a reset link",
            f"the login page is password protected; the {field} is case-insensitive",
            f"the pass rate equals the user count in the {_word(rng)} cohort",
            "the username and password fields are identical in size",
            f"the password policy is the same as for the {_word(rng)} login service",
            f"password managers fill in the {field} and password",
            f"the {field} is the password reset contact",
        ]
    )
    return Sample("account-fields", _key(rng, "runbook", _word(rng)), value, ["ops"])


BENIGN_FAMILIES.update(
    {
        "slash-pair": _slash_pair,
        "numbered-code": _numbered_code,
        "label": _label,
        "account-fields": _account_fields,
    }
)


def benign_samples(seed: int = 4321, per_family: int = 14) -> list[Sample]:
    rng = random.Random(seed)
    return [make(rng) for _ in range(per_family) for make in BENIGN_FAMILIES.values()]
