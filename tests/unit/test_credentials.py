"""The credential guard: a labelled corpus (recall and false positives) and tables of cases."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.credentials import check_credentials
from tests.unit.credential_corpus import FORMATS, benign_samples, credential_samples

MIN_RECALL = 0.99
MAX_FALSE_POSITIVE_RATE = 0.01


def test_corpus_recall_and_false_positive_rate() -> None:
    secrets = credential_samples()
    facts = benign_samples()
    assert len(secrets) >= 300 and len(facts) >= 300
    assert {s.kind for s in secrets} >= set(FORMATS)  # every format is represented
    missed = [s for s in secrets if check_credentials(s.key, s.value, s.tags) is None]
    flagged = [s for s in facts if check_credentials(s.key, s.value, s.tags) is not None]
    recall = 1 - len(missed) / len(secrets)
    false_positive_rate = len(flagged) / len(facts)
    print(
        f"\ncredential guard: recall {recall:.2%} on {len(secrets)} secrets, "
        f"false positives {false_positive_rate:.2%} on {len(facts)} facts"
    )
    assert recall >= MIN_RECALL, [(s.kind, s.key) for s in missed]
    assert false_positive_rate <= MAX_FALSE_POSITIVE_RATE, [(s.kind, s.key) for s in flagged]


def test_the_rejection_never_contains_the_secret() -> None:
    for sample in credential_samples(n=120):
        rejection = check_credentials(sample.key, sample.value, sample.tags)
        assert rejection is not None
        for text in (sample.value, *sample.tags):
            for piece in text.split():
                if len(piece) >= 6 and not piece.isalpha():  # words like "secret" may appear
                    assert piece not in rejection.message
                    assert piece not in rejection.rule


@pytest.mark.parametrize(
    ("key", "value", "tags", "rule", "field"),
    [
        ("password", "hunter2", [], "credential-named key", "value"),
        ("githubToken", "abc", [], "credential-named key", "value"),
        ("api_key", "x", [], "credential-named key", "value"),
        ("note", "password=a", [], "Connection String Password", "value"),
        ("note", "smtp_password: x1", [], "keyword assignment", "value"),
        ("note", '{"apiKey": "q"}', [], "keyword assignment", "value"),
        ("note", "the password is tulip", [], "keyword assignment", "value"),
        ("note", "Cookie: sid=abc", [], "Cookie Header", "value"),
        ("note", "Authorization: Bearer abc.def.ghi-jkl", [], "Authorization Header", "value"),
        ("note", "postgres://app:pw@127.0.0.1/crm", [], "Basic Auth Credentials", "value"),
        ("note", "ok", ["token=abc"], "keyword assignment", "tags"),
        ("secret=abc", "ok", [], "keyword assignment", "key"),
        ("note", "-----BEGIN PRIVATE KEY-----", [], "Private Key", "value"),
    ],
)
def test_rules(key: str, value: str, tags: list[str], rule: str, field: str) -> None:
    rejection = check_credentials(key, value, tags)
    assert rejection is not None
    assert (rejection.rule, rejection.field) == (rule, field)
    assert rule in rejection.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Plan", "plan"),
        ("password_policy", "Passwords rotate every 90 days."),
        ("api_key_owner", "The platform team owns it; ask in #platform."),
        ("token_budget", "max_tokens: 2048, token budget 4000"),
        ("note", "password: <redacted>"),
        ("note", "api_key=${CRM_API_KEY}"),
        ("note", "the token is stored in the vault"),
        ("commit", "deployed 3f2c1a9b7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b"),
        ("digest", "sha256:" + "ab12" * 16),
        ("link", "http://127.0.0.1:8080/d/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms/edit"),
        ("contact", "jane.doe@acme-widgets.localhost"),
        ("ulid", "01HF8Z3K6Y2QW4ZJ5N7P9R0S1T"),
        ("stripe customer", "cus_NffrFeUfNV2Hib and pi_3MtwBwLkdIwHu7ix28a3tqPa"),
        ("when", "2026-11-30T09:18:58Z, score 0.87, 14/20 qualified"),
    ],
)
def test_ordinary_facts_pass(key: str, value: str) -> None:
    assert check_credentials(key, value, ["ops", "2026-q4"]) is None


@given(st.uuids(), st.integers(min_value=0, max_value=2**160 - 1))
def test_uuids_and_commit_hashes_pass(value: uuid.UUID, commit: int) -> None:
    assert check_credentials("ref", f"batch {value} at commit {commit:040x}") is None


@given(st.from_regex(r"[a-z]{3,12}( [a-z]{2,10}){0,8}\.", fullmatch=True))
def test_plain_sentences_pass(sentence: str) -> None:
    assert check_credentials("note", sentence) is None
