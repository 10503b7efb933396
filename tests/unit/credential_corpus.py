"""A labelled corpus for the credential guard, generated from a seeded RNG.

Every secret is assembled at run time from a prefix and a random body, so no string in this
file is a live-looking token of a real provider (push protection scans committed text).
Hosts in URLs are loopback only (tests send nothing anywhere, and name no other host).
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass, field

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = UPPER + LOWER + DIGITS
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Sample:
    kind: str
    key: str
    value: str
    tags: list[str] = field(default_factory=list)


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _word(rng: random.Random) -> str:
    return rng.choice(
        "acme orbit nimbus harbor falcon maple quartz cedar summit vertex lumen atlas delta "
        "pioneer beacon ember granite willow cobalt aurora".split()
    )


def _company(rng: random.Random) -> str:
    return f"{_word(rng).title()} {rng.choice(['Labs', 'GmbH', 'Inc', 'Analytics', 'Logistics', 'Health'])}"


def _domain(rng: random.Random) -> str:
    return f"{_word(rng)}-{_word(rng)}.localhost"


def _key(rng: random.Random, *words: str) -> str:
    return rng.choice(["_", "-", "."]).join(words) + rng.choice(["", f"_{rng.randint(1, 99)}"])


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"}).encode())
    payload = _b64url(
        json.dumps({"sub": _r(rng, ALNUM, 12), "iat": rng.randint(1_600_000_000, 1_800_000_000)}).encode()
    )
    return f"{header}.{payload}.{_r(rng, B64URL, 43)}"


def _pem(rng: random.Random) -> str:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    lines = "\n".join(_r(rng, B64, 64) for _ in range(rng.randint(3, 6)))
    dashes = "-" * 5
    return f"{dashes}BEGIN {kind}PRIVATE KEY{dashes}\n{lines}\n{dashes}END {kind}PRIVATE KEY{dashes}"


def _password(rng: random.Random) -> str:
    return rng.choice(
        [
            _word(rng) + str(rng.randint(1, 999)),
            _r(rng, ALNUM + "!@#%^&*", rng.randint(6, 20)),
            _word(rng).title() + rng.choice("!#$") + str(rng.randint(10, 99)),
            _r(rng, LOWER, rng.randint(4, 10)),
        ]
    )


def _secret_value(rng: random.Random) -> tuple[str, str]:
    """(format, secret text) for one randomly chosen format."""
    fmt = rng.choice(FORMATS)
    s: str
    match fmt:
        case "aws-access-key-id":
            s = rng.choice(["AK", "AS"]) + "IA" + _r(rng, UPPER + DIGITS, 16)
        case "aws-secret-key":
            s = f"aws_secret_access_key = {_r(rng, B64, 40)}"
        case "gcp-service-account":
            s = json.dumps(
                {
                    "type": "service_" + "account",
                    "project_id": f"{_word(rng)}-prod",
                    "private_key_id": _r(rng, HEX, 40),
                }
            )
        case "google-api-key":
            s = "AI" + "za" + _r(rng, B64URL, 35)
        case "google-oauth":
            s = "ya" + "29." + _r(rng, B64URL, rng.randint(60, 120))
        case "azure-storage":
            s = (
                "DefaultEndpointsProtocol=https;AccountName="
                + _word(rng)
                + "store;Account"
                + "Key="
                + _r(rng, B64, 86)
                + "==;EndpointSuffix=core.localhost"
            )
        case "azure-sas":
            s = f"http://127.0.0.1:10000/{_word(rng)}?sv=2022-11-02&se=2026-12-31&sig=" + _r(
                rng, ALNUM + "%", 44
            )
        case "azure-client-secret":
            s = _r(rng, ALNUM, 3) + str(rng.randint(0, 9)) + "Q~" + _r(rng, ALNUM + "_~.-", 34)
        case "github":
            s = rng.choice(["gh" + "p_", "gh" + "o_", "gh" + "s_"]) + _r(rng, ALNUM, 36)
        case "github-fine-grained":
            s = "github" + "_pat_" + _r(rng, ALNUM, 22) + "_" + _r(rng, ALNUM, 59)
        case "gitlab":
            s = "gl" + "pat-" + _r(rng, B64URL, 20)
        case "slack":
            s = (
                "xo"
                + "x"
                + rng.choice("bpa")
                + "-"
                + str(rng.randint(10**10, 10**12))
                + "-"
                + str(rng.randint(10**10, 10**12))
                + "-"
                + _r(rng, ALNUM, 24)
            )
        case "stripe":
            s = (
                rng.choice(["sk", "rk"])
                + rng.choice(["_live_", "_test_"])
                + _r(rng, ALNUM, rng.randint(24, 99))
            )
        case "openai":
            s = "sk-" + rng.choice(["proj-", "svcacct-", ""]) + _r(rng, B64URL, rng.randint(40, 120))
        case "openai-legacy":
            s = "sk-" + _r(rng, ALNUM, 20) + "T3Blbk" + "FJ" + _r(rng, ALNUM, 20)
        case "anthropic":
            s = "sk-" + "ant-api03-" + _r(rng, B64URL, 93) + "AA"
        case "jwt":
            s = _jwt(rng)
        case "pem":
            s = _pem(rng)
        case "bearer":
            s = "Authorization: Bearer " + rng.choice([_r(rng, B64URL, 40), _jwt(rng)])
        case "basic-auth-header":
            s = "Authorization: Basic " + base64.b64encode(f"{_word(rng)}:{_password(rng)}".encode()).decode()
        case "cookie":
            s = (
                rng.choice(["Cookie: ", "Set-Cookie: "])
                + rng.choice(["session", "sid", "_auth"])
                + "="
                + _r(rng, ALNUM, rng.randint(8, 48))
                + "; Path=/; HttpOnly"
            )
        case "url-password":
            scheme = rng.choice(["postgres", "mysql", "https", "redis", "amqp", "mongodb+srv"])
            s = f"{scheme}://{_word(rng)}:{_password(rng)}@{rng.choice(['127.0.0.1', 'localhost'])}:{rng.randint(1000, 9999)}/{_word(rng)}"
        case "connection-string":
            s = f"Server=127.0.0.1;Database={_word(rng)};User Id={_word(rng)};Password={_password(rng)};"
        case "keyword":
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
                ]
            )
            sep = rng.choice(["=", ": ", " = ", ":", " => "])
            quote = rng.choice(["", '"', "'"])
            s = f"{name}{sep}{quote}{_password(rng)}{quote}"
        case "prose":
            s = f"the {rng.choice(['password', 'api key', 'token', 'secret'])} is {_password(rng)}"
        case "high-entropy-base62":
            s = _r(rng, ALNUM, rng.randint(24, 64))
        case "high-entropy-base64":
            s = _r(rng, B64, rng.randint(30, 60)) + rng.choice(["", "=", "=="])
        case "high-entropy-hex":
            s = _r(rng, HEX, rng.choice([32, 48, 56]))
        case _:
            raise AssertionError(fmt)
    return fmt, s


FORMATS = [
    "aws-access-key-id",
    "aws-secret-key",
    "gcp-service-account",
    "google-api-key",
    "google-oauth",
    "azure-storage",
    "azure-sas",
    "azure-client-secret",
    "github",
    "github-fine-grained",
    "gitlab",
    "slack",
    "stripe",
    "openai",
    "openai-legacy",
    "anthropic",
    "jwt",
    "pem",
    "bearer",
    "basic-auth-header",
    "cookie",
    "url-password",
    "connection-string",
    "keyword",
    "prose",
    "high-entropy-base62",
    "high-entropy-base64",
    "high-entropy-hex",
]

_SECRET_FRAMES = [
    "{s}",
    "Use this for the CRM sync: {s}",
    "Credentials for the staging export -> {s}",
    "Found in the vendor onboarding email: {s} (rotate later)",
    "note: {s}",
    "For the {w} integration, {s}",
]


def credential_samples(seed: int = 1234, n: int = 420) -> list[Sample]:
    rng = random.Random(seed)
    samples: list[Sample] = []
    for i in range(n):
        if i % 14 == 13:
            # The key names the credential; the value is just the bare secret.
            key = rng.choice(
                [
                    "password",
                    "db_password",
                    "apiKey",
                    "github_token",
                    "stripe-secret",
                    "smtp.passwd",
                    "client_secret",
                    "session_id",
                    "API_KEY",
                    "access-token",
                ]
            )
            samples.append(Sample("credential-named-key", key, _password(rng), []))
            continue
        fmt, secret = _secret_value(rng)
        frame = rng.choice(_SECRET_FRAMES)
        where = rng.random()
        if where < 0.85:
            samples.append(
                Sample(
                    fmt,
                    _key(rng, _word(rng), "integration"),
                    frame.format(s=secret, w=_word(rng)),
                    rng.sample(["crm", "ops", "setup", "vendor"], rng.randint(0, 2)),
                )
            )
        elif where < 0.93 and "\n" not in secret and len(secret) <= 64:
            samples.append(Sample(fmt, _key(rng, "creds"), "see tags", [secret]))
        elif "\n" not in secret and len(secret) <= 200:
            samples.append(Sample(fmt, f"{_word(rng)} {secret}"[:255], "stored", []))
        else:
            samples.append(Sample(fmt, _key(rng, _word(rng)), secret, []))
    return samples


def benign_samples(seed: int = 4321, n: int = 420) -> list[Sample]:
    rng = random.Random(seed)
    makers = [
        lambda: Sample(
            "icp",
            _key(rng, "icp", _word(rng)),
            f"ICP decision: B2B SaaS in {rng.choice(['DACH', 'Nordics', 'UK', 'Benelux'])}, "
            f"{rng.randint(20, 200)}-{rng.randint(300, 2000)} employees, ARR above ${rng.randint(2, 50)}M; "
            f"skip agencies and {rng.choice(['resellers', 'public sector', 'non-profits'])}.",
            ["icp", "decision"],
        ),
        lambda: Sample(
            "exclusion",
            _key(rng, "exclude", _word(rng)),
            f"Exclude {_company(rng)} ({_domain(rng)}) from research: existing customer since "
            f"{rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}.",
            ["research", "exclusion"],
        ),
        lambda: Sample(
            "reporting",
            _key(rng, "report", "prefs"),
            f"Weekly report every {rng.choice(['Monday', 'Friday'])} at {rng.randint(7, 17):02d}:00 "
            f"{rng.choice(['CET', 'UTC', 'PST'])}; bullet points, at most {rng.randint(5, 15)} items, "
            f"send to {_word(rng)}.{_word(rng)}@{_domain(rng)}.",
            ["reporting"],
        ),
        lambda: Sample(
            "processed-domain",
            f"processed:{_domain(rng)}",
            f"Processed {_domain(rng)} on 2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}: "
            f"{rng.randint(0, 40)} contacts, {rng.randint(0, 9)} qualified, score {rng.random():.2f}.",
            ["processed"],
        ),
        lambda: Sample(
            "ids",
            _key(rng, "account", _word(rng)),
            f"CRM account id {rng.randint(10**8, 10**10)}, Stripe customer cus_{_r(rng, ALNUM, 14)}, "
            f"payment pi_{_r(rng, ALNUM, 24)}, ticket {rng.choice(['OPS', 'SALES', 'RES'])}-{rng.randint(1, 9999)}.",
            ["ids"],
        ),
        lambda: Sample(
            "uuid",
            _key(rng, "run", "ref"),
            f"Last enrichment batch {'-'.join(_r(rng, HEX, n) for n in (8, 4, 4, 4, 12))} finished OK; "
            f"job ULID 01{_r(rng, '0123456789ABCDEFGHJKMNPQRSTVWXYZ', 24)}.",
            ["batch"],
        ),
        lambda: Sample(
            "url",
            _key(rng, "dashboard", _word(rng)),
            f"Dashboard lives at http://{rng.choice(['localhost', '127.0.0.1'])}:{rng.randint(3000, 9000)}"
            f"/d/{_r(rng, B64URL, 44)}/edit?tab={_word(rng)}&page={rng.randint(1, 9)}",
            ["links"],
        ),
        lambda: Sample(
            "hash",
            _key(rng, "deploy", _word(rng)),
            f"Deployed commit {_r(rng, HEX, 40)} (short {_r(rng, HEX, 7)}); image digest "
            f"sha256:{_r(rng, HEX, 64)}.",
            ["deploy"],
        ),
        lambda: Sample(
            "score",
            _key(rng, "lead", "score"),
            f"Lead score {rng.randint(1, 100)}/100 for {_company(rng)} on {rng.randint(1, 28)}.{rng.randint(1, 12)}.2026;"
            f" NPS {rng.randint(-20, 80)}, win rate {rng.randint(5, 60)}%.",
            ["scoring"],
        ),
        lambda: Sample(
            "policy-words",
            rng.choice(
                ["password_policy", "token_budget", "api-key-rotation", "secret-santa-list", "auth_flow"]
            ),
            rng.choice(
                [
                    "Passwords rotate every 90 days; the password is stored in the team vault.",
                    f"Token budget per run: {rng.randint(1000, 9000)} tokens, max_tokens {rng.randint(256, 4096)}.",
                    "The API key is managed by the platform team; ask them, never paste it here.",
                    "Secret santa draw happens on the first Monday of December.",
                    "Auth flow: OAuth consent screen, then the callback stores the session server-side.",
                ]
            ),
            ["policy"],
        ),
        lambda: Sample(
            "identifiers",
            _key(rng, "pipeline", _word(rng)),
            f"Pipeline stage renamed to QualifiedOpportunityStage{rng.randint(2020, 2030)}; field "
            f"customerLifetimeValueEstimate drives the {_word(rng)}-{_word(rng)}-q{rng.randint(1, 4)}-outreach-list.",
            ["crm"],
        ),
        lambda: Sample(
            "labels",
            _key(rng, "label", _word(rng)),
            f"Workspace ws-{_r(rng, HEX, 10)} runs the {_word(rng)}-run-{_r(rng, HEX, 12)} job; "
            f"marker confidential-{_word(rng)}-{_r(rng, HEX, 8)}.",
            ["labels"],
        ),
        lambda: Sample(
            "path",
            _key(rng, "export", "path"),
            f"Exports go to /srv/exports/{_word(rng)}/{rng.randint(2024, 2026)}/{_word(rng)}_contacts_final_v{rng.randint(1, 9)}.csv",
            ["exports"],
        ),
    ]
    return [rng.choice(makers)() for _ in range(n)]
