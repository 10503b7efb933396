"""The provider and template settings: parsing from the environment and fail-fast checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("OPENAI_API_KEY", ("OPENAI_API_KEY",)),
        ("OPENAI_API_KEY,GROQ_KEY", ("OPENAI_API_KEY", "GROQ_KEY")),
        (" OPENAI_API_KEY , GROQ_KEY ,", ("OPENAI_API_KEY", "GROQ_KEY")),
        ("", ()),  # no openai agents at all
    ],
)
def test_key_envs_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setenv("ENVERIF_PROVIDER_KEY_ENVS", raw)
    assert Settings().provider_key_envs == expected


def test_key_envs_default_to_openai() -> None:
    assert Settings().provider_key_envs == ("OPENAI_API_KEY",)


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
