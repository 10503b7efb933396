"""The provider and template settings: parsing from the environment and fail-fast checks.

Every URL here is a loopback address (nothing connects to it); the defaults are compared
with their constant, not written out."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.settings import DEFAULT_PROVIDER_KEYS, OPENAI_DEFAULT_BASE_URL, Settings


def test_keys_are_bound_to_their_vendors_by_default() -> None:
    assert Settings().provider_keys == DEFAULT_PROVIDER_KEYS
    assert Settings().provider_key_envs is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"TEST_KEY": ["http://127.0.0.1:8631/v1"]}', {"TEST_KEY": ("http://127.0.0.1:8631/v1",)}),
        # Stored in normal form: what the checks compare against.
        (
            '{"TEST_KEY": ["HTTP://LocalHost:8631/v1/", "http://[::1]:80"]}',
            {"TEST_KEY": ("http://localhost:8631/v1", "http://[::1]")},
        ),
        (
            '{"A_KEY": ["http://127.0.0.1:1/a"], "B_KEY": ["http://127.0.0.1:2/b"]}',
            {"A_KEY": ("http://127.0.0.1:1/a",), "B_KEY": ("http://127.0.0.1:2/b",)},
        ),
        ("{}", {}),  # no remote models at all
    ],
)
def test_provider_keys_are_json(monkeypatch: pytest.MonkeyPatch, raw: str, expected: dict[str, Any]) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEYS", raw)
    assert Settings().provider_keys == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("{not json", "is not valid JSON"),
        ('["http://127.0.0.1:1"]', "must be a JSON object mapping"),
        ('{"TEST_KEY": "http://127.0.0.1:1"}', "must be a JSON object mapping"),
        ('{"TEST_KEY": [1]}', "must be a JSON object mapping"),
        ('{"TEST_KEY": []}', "bound to no base URL"),
        ('{"ENVERIF_DATABASE_URL": ["http://127.0.0.1:1"]}', "may not name ENVERIF_"),
        ('{"HAS SPACE": ["http://127.0.0.1:1"]}', "is not an environment variable name"),
        ('{"TEST_KEY": ["ftp://127.0.0.1/v1"]}', "must be an http or https URL"),
        ('{"TEST_KEY": ["http://user:pw@127.0.0.1/v1"]}', "credentials"),
        ('{"TEST_KEY": ["http://127.0.0.1/v1/../x"]}', "segments"),
        ('{"TEST_KEY": ["http://127.1/v1"]}', "four decimal numbers"),
    ],
)
def test_bad_provider_keys_stop_start_up(monkeypatch: pytest.MonkeyPatch, raw: str, fragment: str) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEYS", raw)
    with pytest.raises(ValidationError, match=fragment):
        Settings()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("OPENAI_API_KEY", ("OPENAI_API_KEY",)),
        ("OPENAI_API_KEY,GROQ_KEY", ("OPENAI_API_KEY", "GROQ_KEY")),
        (" OPENAI_API_KEY , GROQ_KEY ,", ("OPENAI_API_KEY", "GROQ_KEY")),
        ("", ()),
    ],
)
def test_the_deprecated_key_envs_bind_each_name_to_the_openai_default_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, raw: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEY_ENVS", raw)
    settings = Settings()
    assert settings.provider_key_envs == expected
    assert settings.provider_keys == {name: (OPENAI_DEFAULT_BASE_URL,) for name in expected}
    assert "ENVERIF_PROVIDER_KEY_ENVS is deprecated" in caplog.text


def test_both_key_settings_at_once_stop_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEY_ENVS", "TEST_KEY")
    monkeypatch.setenv("ENVERIF_PROVIDER_KEYS", '{"TEST_KEY": ["http://127.0.0.1:1"]}')
    with pytest.raises(ValidationError, match="replaces the deprecated ENVERIF_PROVIDER_KEY_ENVS"):
        Settings()


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("ENVERIF_DATABASE_URL", "may not name ENVERIF_"),
        ("OPENAI_API_KEY,enverif_redis_url", "may not name ENVERIF_"),
        ("HAS SPACE", "is not an environment variable name"),
        ("1ABC", "is not an environment variable name"),
    ],
)
def test_bad_key_envs_stop_start_up(monkeypatch: pytest.MonkeyPatch, raw: str, fragment: str) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEY_ENVS", raw)
    with pytest.raises(ValidationError, match=fragment):
        Settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ENVERIF_TEMPLATE_TIMEOUT_MS", "0"),
        ("ENVERIF_TEMPLATE_MAX_OUTPUT_BYTES", "10"),
        ("ENVERIF_TEMPLATE_WORKERS", "0"),
        ("ENVERIF_PROVIDER_MAX_RESPONSE_BYTES", "100"),
    ],
)
def test_template_and_response_limits_are_checked(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("not json", "is not valid JSON"),
        ('["gpt"]', "must be a JSON object"),
        ('{"gpt": 3}', "'gpt' must map to prices"),
        ('{"gpt": {"input": "cheap"}}', "'gpt'.input must be a number"),
        ('{"gpt": {"input": true}}', "'gpt'.input must be a number"),
        ('{"gpt": {"input": -1}}', "'gpt'.input must be a number"),
        ('{"gpt": {"input": 1e9}}', "'gpt'.input must be a number"),
        ('{"gpt": {"inputs": 1}}', "'gpt'.inputs is not a price"),
    ],
)
def test_model_prices_that_are_not_prices_are_refused_at_start_up(
    raw: str, names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVERIF_MODEL_PRICES", raw)
    with pytest.raises(ValidationError) as failed:
        Settings()
    assert "ENVERIF_MODEL_PRICES" in str(failed.value) and names in str(failed.value)


def test_model_prices_parse_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVERIF_MODEL_PRICES", '{"gpt": {"input": 0.15, "output": 0.6}}')
    assert Settings().model_prices == {"gpt": {"input": 0.15, "output": 0.6}}
