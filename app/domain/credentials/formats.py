"""Known token formats: one named rule per provider's documented token shape.

Each rule is written from the provider's own description of its tokens (a fixed prefix,
then a body of a given alphabet and length), so it fires on the token alone, wherever it
stands. The providers are at least those that gitleaks' default rules know; their names
are what a refusal and a redaction show.

Most tokens are one run of token characters, so ``find_token`` looks at those runs only
(``CANDIDATE``: at least 16 characters, in the text's long chunks), and runs a rule's regex
only when one of its literal ``hints`` is in the run: a 16 KB note of prose costs one
``split`` and a few substring tests per long word. The formats that span spaces or
punctuation (headers, connection strings, PEM blocks, JSON key files) are ``TEXT_RULES``,
each run in windows around its hint (``text.windows``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from app.domain.credentials.text import long_chunks, windows
from app.domain.credentials.vocabulary import PLACEHOLDER, looks_like_secret


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]  # literals one of which every match contains; () = always run
    lowered: bool = False  # hints are looked up in the lower-cased text
    # For a pattern with a group ``v``: a match counts only when its value passes this.
    value_check: Callable[[str], bool] | None = None

    def fires(self, text: str, spans: list[tuple[int, int]]) -> bool:
        for start, end in spans:
            if self.value_check is None:
                if self.pattern.search(text, start, end) is not None:
                    return True
            elif any(self.value_check(m["v"]) for m in self.pattern.finditer(text, start, end)):
                return True
        return False


def _rule(
    name: str, pattern: str, *hints: str, flags: int = 0, value_check: Callable[[str], bool] | None = None
) -> Rule:
    return Rule(name, re.compile(pattern, flags), hints, bool(flags & re.IGNORECASE), value_check)


def _header_value(value: str) -> bool:
    # ``Authorization: required for every endpoint`` is prose; a credential there reads
    # like one.
    return looks_like_secret(value) and not PLACEHOLDER.match(value)


# Not preceded / followed by another character of the token's alphabet.
_B = r"(?<![A-Za-z0-9_\-])"
_E = r"(?![A-Za-z0-9_\-])"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

TOKEN_RULES: Final[tuple[Rule, ...]] = (
    # -- code hosting and CI --------------------------------------------------------------
    _rule("GitHub Token", _B + r"gh[pousr]_[A-Za-z0-9]{30,251}" + _E, "ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    _rule("GitHub Fine-Grained Token", _B + r"github_pat_[A-Za-z0-9_]{30,}", "github_pat_"),
    _rule(
        "GitLab Token",
        _B + r"gl(?:pat|dt|ft|rt|cbt|ptt|oas|soat|imt|agent|ffct|wt)-[A-Za-z0-9_\-.]{20,}",
        "glpat-",
        "gldt-",
        "glft-",
        "glrt-",
        "glcbt-",
        "glptt-",
        "gloas-",
        "glsoat-",
        "glimt-",
        "glagent-",
        "glffct-",
        "glwt-",
    ),
    _rule("GitLab Runner Registration Token", r"GR1348941[A-Za-z0-9_\-]{20,}", "GR1348941"),
    _rule("Bitbucket App Password", _B + r"ATBB[A-Za-z0-9_=.\-]{28,}", "ATBB"),
    _rule(
        "Atlassian API Token", _B + r"AT(?:ATT|CTT|OAT)3[A-Za-z0-9_\-=]{60,}", "ATATT3", "ATCTT3", "ATOAT3"
    ),
    _rule("Sourcegraph Token", _B + r"sgp_(?:[a-f0-9]{16}_)?[a-f0-9]{40}" + _E, "sgp_"),
    _rule("SonarQube Token", _B + r"sq[pua]_[a-f0-9]{40}" + _E, "sqp_", "squ_", "sqa_"),
    _rule(
        "Harness Token",
        _B + r"(?:pat|sat)\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
        "pat.",
        "sat.",
    ),
    _rule("JFrog Token", _B + r"(?:AKCp[A-Za-z0-9]{60,}|cmVmdGtu[A-Za-z0-9]{50,})", "AKCp", "cmVmdGtu"),
    _rule("Octopus Deploy API Key", _B + r"API-[A-Z0-9]{26}" + _E, "API-"),
    _rule("Docker Hub Token", _B + r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{20,}", "dckr_"),
    _rule("Codecov Token", _B + r"(?:sigu|sigo)_[A-Za-z0-9]{20,}", "sigu_", "sigo_"),
    # -- package registries ------------------------------------------------------------
    _rule("npm Token", _B + r"npm_[A-Za-z0-9]{36}" + _E, "npm_"),
    _rule("PyPI Token", r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_\-]{30,}", "pypi-AgE"),
    _rule("RubyGems Token", _B + r"rubygems_[a-f0-9]{48}" + _E, "rubygems_"),
    _rule("NuGet API Key", _B + r"oy2[a-z0-9]{43}" + _E, "oy2"),
    _rule("Clojars Token", r"CLOJARS_[a-z0-9]{40,}", "CLOJARS_"),
    _rule("ReadMe API Key", _B + r"rdme_[a-z0-9]{70}" + _E, "rdme_"),
    # -- cloud and hosting -------------------------------------------------------------
    _rule(
        "AWS Access Key ID",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])",
        "AKIA",
        "ASIA",
        "ABIA",
        "ACCA",
    ),
    _rule("Google API Key", r"AIza[0-9A-Za-z_\-]{35}", "AIza"),
    _rule("Google OAuth Token", r"(?:ya29\.[0-9A-Za-z_\-]{20,}|1//0[0-9A-Za-z_\-]{40,})", "ya29.", "1//0"),
    _rule("Google OAuth Client Secret", r"GOCSPX-[A-Za-z0-9_\-]{20,}", "GOCSPX-"),
    _rule("Firebase Cloud Messaging Key", r"AAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}", ":APA91b"),
    _rule("Azure AD Client Secret", r"(?<![A-Za-z0-9])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}", "Q~"),
    _rule("Alibaba Cloud Access Key ID", _B + r"LTAI[A-Za-z0-9]{12,20}" + _E, "LTAI"),
    _rule("DigitalOcean Token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E, "dop_v1_", "doo_v1_", "dor_v1_"),
    _rule("Heroku API Key", _B + r"HRKU-[A-Za-z0-9_\-]{40,}", "HRKU-"),
    _rule(
        "Fly.io Token",
        r"(?:fo1_[A-Za-z0-9_\-]{40,}|fm[12][ar]?_[A-Za-z0-9+/]{60,}={0,3})",
        "fo1_",
        "fm1",
        "fm2",
    ),
    _rule("Netlify Token", _B + r"nf[pc]_[A-Za-z0-9]{36,}" + _E, "nfp_", "nfc_"),
    _rule("Render API Key", _B + r"rnd_[A-Za-z0-9]{32,}" + _E, "rnd_"),
    _rule("Supabase Token", _B + r"(?:sbp_[a-f0-9]{40}|sb_secret_[A-Za-z0-9_\-]{20,})", "sbp_", "sb_secret_"),
    _rule("PlanetScale Token", _B + r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.\-]{32,64}", "pscale_"),
    _rule("Scalingo Token", _B + r"tk-us-[A-Za-z0-9_\-]{48}" + _E, "tk-us-"),
    _rule("HashiCorp Terraform Token", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}", ".atlasv1."),
    _rule("HashiCorp Vault Token", _B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,}", "hvs.", "hvb.", "hvr."),
    _rule("Doppler Token", _B + r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9_.\-]{40,}", "dp."),
    _rule("Pulumi Token", _B + r"pul-[a-f0-9]{40}" + _E, "pul-"),
    _rule("Infracost API Key", _B + r"ico-[A-Za-z0-9]{32}" + _E, "ico-"),
    _rule("Databricks Token", _B + r"(?:dapi|dose)[a-f0-9]{32}(?:-\d)?" + _E, "dapi", "dose"),
    _rule("Dynatrace Token", r"dt0[a-z][0-9]{2}\.[A-Z0-9]{24}\.[A-Z0-9]{64}", "dt0"),
    _rule("New Relic Key", _B + r"NR(?:AK|II|AA)-[A-Za-z0-9_\-]{27,32}" + _E, "NRAK-", "NRII-", "NRAA-"),
    _rule(
        "Grafana Token",
        r"(?:glc_[A-Za-z0-9+/]{32,}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|eyJrIjoi[A-Za-z0-9]{40,}={0,2})",
        "glc_",
        "glsa_",
        "eyJrIjoi",
    ),
    _rule(
        "Sentry Token", _B + r"(?:sntrys_eyJ[A-Za-z0-9+/=_\-]{40,}|sntryu_[a-f0-9]{64})", "sntrys_", "sntryu_"
    ),
    _rule("Prefect API Key", _B + r"pnu_[A-Za-z0-9]{36}" + _E, "pnu_"),
    _rule("Cloudflare Origin CA Key", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{140,}", "v1.0-"),
    _rule("Defined Networking API Key", r"dnkey-[a-z0-9=_\-]{26}-[a-z0-9=_\-]{52}", "dnkey-"),
    _rule("1Password Service Account Token", r"ops_eyJ[A-Za-z0-9+/]{100,}={0,3}", "ops_eyJ"),
    _rule(
        "1Password Secret Key",
        r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}",
        "A3-",
    ),
    _rule("Age Secret Key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", "AGE-SECRET-KEY-1"),
    # -- messaging and collaboration ---------------------------------------------------
    _rule(
        "Slack Token",
        _B
        + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xoxe\.xox[bp]-\d-[A-Za-z0-9]{20,}|xapp-\d-[A-Za-z0-9\-]{20,})",
        "xox",
        "xapp-",
    ),
    _rule("Slack Webhook", r"/services/T[A-Z0-9]{8,}/B[A-Z0-9]{8,}/[A-Za-z0-9]{20,}", "/services/T"),
    _rule("Discord Webhook", r"/api/webhooks/\d{17,20}/[A-Za-z0-9_\-]{60,}", "/api/webhooks/"),
    _rule(
        "Discord Bot Token",
        r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}" + _E,
        ".",
    ),
    _rule("Telegram Bot Token", r"(?<![0-9])\d{8,10}:AA[A-Za-z0-9_\-]{33}" + _E, ":AA"),
    _rule("Linear API Key", _B + r"lin_(?:api|oauth)_[A-Za-z0-9]{32,64}" + _E, "lin_api_", "lin_oauth_"),
    _rule(
        "Notion Token",
        _B + r"(?:secret_[A-Za-z0-9]{43}|ntn_[0-9]{11}[A-Za-z0-9]{35})" + _E,
        "secret_",
        "ntn_",
    ),
    _rule("Asana Token", r"(?<![0-9])[0-9]/[0-9]{16}:[A-Za-z0-9]{32}" + _E, ":"),
    _rule("Postman API Key", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", "PMAK-"),
    _rule("Typeform Token", _B + r"tfp_[A-Za-z0-9_.=\-]{50,}", "tfp_"),
    _rule("Frame.io Token", _B + r"fio-u-[A-Za-z0-9_=\-]{64}", "fio-u-"),
    _rule("Figma Token", _B + r"figd_[A-Za-z0-9_\-]{40,}", "figd_"),
    _rule("Adafruit IO Key", _B + r"aio_[A-Za-z0-9]{28}" + _E, "aio_"),
    _rule("Twitter Bearer Token", r"A{20,}[A-Za-z0-9%]{30,}", "AAAAAAAAAAAAAAAAAAAA"),
    _rule("Facebook Access Token", _B + r"EAA[A-Za-z0-9]{100,}", "EAA"),
    # -- payments and commerce ---------------------------------------------------------
    _rule(
        "Stripe Key",
        _B + r"(?:(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{16,}|whsec_[A-Za-z0-9]{24,})",
        "sk_live_",
        "sk_test_",
        "rk_live_",
        "rk_test_",
        "whsec_",
    ),
    _rule(
        "Shopify Token",
        _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E,
        "shpat_",
        "shpca_",
        "shppa_",
        "shpss_",
    ),
    _rule(
        "Square Token",
        r"(?:sq0atp-[A-Za-z0-9_\-]{22}|sq0csp-[A-Za-z0-9_\-]{43}|(?<![A-Za-z0-9])EAAA[A-Za-z0-9_\-]{60})",
        "sq0atp-",
        "sq0csp-",
        "EAAA",
    ),
    _rule(
        "Braintree Access Token",
        r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}",
        "access_token$",
    ),
    _rule("Flutterwave Key", r"FLW(?:PUB|SEC)K(?:_TEST)?-[a-hA-H0-9]{32}-X", "FLWPUBK", "FLWSECK"),
    _rule("Duffel Token", _B + r"duffel_(?:test|live)_[A-Za-z0-9_=\-]{43}", "duffel_"),
    _rule("EasyPost Key", _B + r"EZ[AT]K[A-Za-z0-9]{54}" + _E, "EZAK", "EZTK"),
    _rule("Shippo Token", _B + r"shippo_(?:live|test)_[a-f0-9]{40}" + _E, "shippo_"),
    _rule("Lob API Key", _B + r"(?:live|test)_(?:pub_)?[a-f0-9]{35}" + _E, "live_", "test_"),
    _rule("Plaid Access Token", _B + r"access-(?:sandbox|development|production)-" + _UUID, "access-"),
    # -- e-mail and messaging APIs ----------------------------------------------------
    _rule("SendGrid API Key", r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}", "SG."),
    _rule("Mailchimp API Key", r"(?<![A-Za-z0-9])[0-9a-f]{32}-us[0-9]{1,2}" + _E, "-us"),
    _rule("Mailgun API Key", _B + r"key-[0-9a-f]{32}" + _E, "key-"),
    _rule("Brevo API Key", r"x(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16}", "xkeysib-", "xsmtpsib-"),
    _rule("Twilio API Key", r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}" + _E, "SK"),
    _rule("Telnyx API Key", r"KEY[0-9A-F]{32}_[A-Za-z0-9]{22}", "KEY"),
    # -- AI providers -------------------------------------------------------------------
    _rule("Anthropic API Key", _B + r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_\-]{20,}", "sk-ant-"),
    _rule(
        "OpenAI API Key",
        _B
        + r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{32,})",
        "sk-",
    ),
    _rule(
        "Hugging Face Token", _B + r"(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})" + _E, "hf_", "api_org_"
    ),
    _rule("Groq API Key", _B + r"gsk_[A-Za-z0-9]{48,}" + _E, "gsk_"),
    _rule("xAI API Key", _B + r"xai-[A-Za-z0-9]{70,}" + _E, "xai-"),
    _rule("Perplexity API Key", _B + r"pplx-[A-Za-z0-9]{40,}" + _E, "pplx-"),
    _rule("Replicate Token", _B + r"r8_[A-Za-z0-9]{37}" + _E, "r8_"),
    _rule("LangSmith API Key", _B + r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}" + _E, "lsv2_"),
    # -- other SaaS ---------------------------------------------------------------------
    _rule("Airtable Token", _B + r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}" + _E, "pat"),
    _rule("Contentful Token", _B + r"CFPAT-[A-Za-z0-9_\-]{43}", "CFPAT-"),
    _rule("HubSpot Token", _B + r"pat-(?:na|eu|ap)\d-" + _UUID, "pat-"),
    _rule("LaunchDarkly Key", _B + r"(?:api|sdk)-" + _UUID, "api-", "sdk-"),
    _rule("Mapbox Secret Token", _B + r"sk\.eyJ[A-Za-z0-9_\-]{40,}\.[A-Za-z0-9_\-]{20,}", "sk.eyJ"),
    _rule("OpenShift Token", r"sha256~[A-Za-z0-9_\-]{43}", "sha256~"),
    _rule("SettleMint Token", _B + r"sm_(?:pat|aat|sat)_[A-Za-z0-9]{16}" + _E, "sm_"),
    _rule("Intra42 Client Secret", _B + r"s-s4t2(?:ud|af)-[a-f0-9]{64}" + _E, "s-s4t2"),
    _rule("MaxMind License Key", _B + r"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk" + _E, "_mmk"),
    _rule(
        "Yandex Token",
        _B + r"(?:AQVN[A-Za-z0-9_\-]{35,38}|y[0-3]_[A-Za-z0-9_\-]{55})" + _E,
        "AQVN",
        "y0_",
        "y1_",
        "y2_",
        "y3_",
    ),
    _rule("Dropbox Token", _B + r"sl\.[A-Za-z0-9_\-]{130,}", "sl."),
    # -- generic shapes -----------------------------------------------------------------
    _rule("JSON Web Token", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{16,}", "eyJ"),
    _rule("npm Auth Token", r"_auth(?:Token)?=\S{8,}", "_auth"),
)

# A run of characters tokens are made of (``:`` and ``$`` for the few formats that use them).
CANDIDATE_MIN_CHARS = 16
# From a run's start only (the look-behind), or ``re`` retries inside every word.
CANDIDATE: Final = re.compile(rf"(?<![A-Za-z0-9_\-.~+/=:$%])[A-Za-z0-9_\-.~+/=:$%]{{{CANDIDATE_MIN_CHARS},}}")

# How far around a hint a text rule's match may reach (a connection string's key, a header
# line).
TEXT_RULE_BEFORE = 64
TEXT_RULE_AFTER = 512
TEXT_RULES: Final[tuple[Rule, ...]] = (
    _rule("Private Key", r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", "PRIVATE KEY"),
    _rule("PuTTY Private Key", r"PuTTY-User-Key-File-\d+:", "PuTTY-User-Key-File-"),
    _rule("GCP Service Account Key", r'"private_key(?:_id)?"\s*:\s*"[^"\s]{8,}', '"private_key'),
    _rule(
        "AWS Secret Access Key",
        r"(?i)aws.{0,30}?secret.{0,30}?[:=]\s*['\"]?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        "aws",
        flags=re.IGNORECASE,
    ),
    _rule(
        "Azure Connection String",
        r"(?i)(?:AccountKey|SharedAccessKey|SharedSecretValue)\s*=\s*[^;\s]{8,}",
        "accountkey",
        "sharedaccesskey",
        "sharedsecretvalue",
        flags=re.IGNORECASE,
    ),
    _rule("Azure SAS Signature", r"(?i)(?:^|[?&;\s])sig=[A-Za-z0-9%+/=]{16,}", "sig=", flags=re.IGNORECASE),
    _rule(
        "Authorization Header",
        r"(?i)\b(?:proxy-)?authori[sz]ation\s*[:=]\s*['\"]?(?:[A-Za-z0-9\-]+\s+)?(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)",
        "authori",
        flags=re.IGNORECASE,
        value_check=_header_value,
    ),
    _rule("Bearer Token", r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{12,}=*", "bearer", flags=re.IGNORECASE),
    _rule(
        "Cookie Header",
        r"(?i)(?<![A-Za-z0-9_-])(?:set-)?cookie\s*:\s*[^=\s;]+=[^\s;]{4,}",
        "cookie",
        flags=re.IGNORECASE,
    ),
    _rule(
        "API Key Header",
        r"(?i)\b(?:x-(?:api|auth)-(?:key|token)|private-token|x-vault-token|x-goog-api-key)\s*:\s*(?P<v>\S{8,})",
        "-key",
        "-token",
        flags=re.IGNORECASE,
        value_check=_header_value,
    ),
    _rule("Fly.io Token", r"FlyV1 fm\d", "FlyV1"),
)


# (hint, rule index) pairs: one comprehension of substring tests picks a run's rules.
_HINTS: Final = tuple((hint, i) for i, rule in enumerate(TOKEN_RULES) for hint in rule.hints)
_RULE_BY_PATTERN: Final = {rule.pattern: rule for rule in TOKEN_RULES}


def _match_run(run: str) -> re.Match[str] | None:
    for i in sorted({i for hint, i in _HINTS if hint in run}):
        found = TOKEN_RULES[i].pattern.search(run)
        if found is not None:
            return found
    return None


def _rule_of(found: re.Match[str]) -> str:
    return _RULE_BY_PATTERN[found.re].name


def find_token(text: str) -> str | None:
    """The name of the first token rule that matches a run of token characters in ``text``."""
    for chunk in long_chunks(text, CANDIDATE_MIN_CHARS):
        for run in CANDIDATE.finditer(chunk):
            found = _match_run(run.group())
            if found is not None:
                return _rule_of(found)
    return None


def find_broken_token(text: str) -> str | None:
    """A token wrapped over lines (``ghp_Zx81…`` + newline + ``…Hs4J``): each line's last
    chunk joined to the next line's first, when that makes a run long enough."""
    lines = text.splitlines()
    for line, following in itertools.pairwise(lines):
        head, tail = line.rstrip().rstrip("\\").rsplit(None, 1)[-1:], following.split(None, 1)[:1]
        if head and tail and len(head[0]) + len(tail[0]) >= CANDIDATE_MIN_CHARS:
            name = find_token(head[0] + tail[0])
            if name is not None:
                return name
    return None


def find_split_token(pieces: list[str]) -> tuple[str, range] | None:
    """A token cut into consecutive ``pieces`` (key, value, tags): (rule, the pieces it
    spans). At each seam, the last chunk before it is glued to the chunks after it (through
    pieces that are one chunk each, as tags cut from one token are); a match counts when it
    crosses a seam and its part before the seam is no token by itself."""
    for left in range(len(pieces) - 1):
        head = pieces[left].rsplit(None, 1)[-1:] if pieces[left] else []
        if not head:
            continue
        parts, seams, right = [head[0]], [len(head[0])], left + 1
        while right < len(pieces):
            first = pieces[right].split(None, 1)[:1]
            if not first:
                break
            parts.append(first[0])
            seams.append(seams[-1] + len(first[0]))
            if first[0] != pieces[right].strip():
                break  # the piece goes on after its first chunk: the run ends there
            right += 1
        glued = "".join(parts)
        for run in CANDIDATE.finditer(glued):
            found = _match_run(run.group())
            if found is None:
                continue
            first_at, last_at = run.start() + found.start(), run.start() + found.end()
            crossed = [seam for seam in seams[:-1] if first_at < seam < last_at]
            if crossed and _match_run(glued[first_at : crossed[0]]) is None:
                spanned = sum(1 for seam in seams[:-1] if seam < last_at)
                return _rule_of(found), range(left, left + spanned + 1)
    return None


def find_text(text: str, lowered: str) -> str | None:
    aligned = len(text) == len(lowered)
    for rule in TEXT_RULES:
        source = lowered if rule.lowered else text
        spans = windows(source, rule.hints, before=TEXT_RULE_BEFORE, after=TEXT_RULE_AFTER)
        if spans and not aligned and rule.lowered:
            spans = [(0, len(text))]  # positions in ``lowered`` do not carry over to ``text``
        if spans and rule.fires(text, spans):
            return rule.name
    return None


def rule_names() -> Iterator[str]:
    for rule in (*TOKEN_RULES, *TEXT_RULES):
        yield rule.name
