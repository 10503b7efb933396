"""Pure rules of the HTTP edge: Accept negotiation, suggestion stripping, production settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.graphql.hardening import _SUGGESTION
from app.graphql.view import GRAPHQL_RESPONSE, JSON, negotiate
from app.settings import Settings


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, JSON),
        ("", JSON),
        ("   ", JSON),
        ("application/json", JSON),
        ("Application/JSON", JSON),
        ("application/json; charset=utf-8", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        (GRAPHQL_RESPONSE, GRAPHQL_RESPONSE),
        (f"{GRAPHQL_RESPONSE}, application/json;q=0.9", GRAPHQL_RESPONSE),
        (f"application/json;q=0.9, {GRAPHQL_RESPONSE}", GRAPHQL_RESPONSE),
        (f"application/json, {GRAPHQL_RESPONSE}", GRAPHQL_RESPONSE),
        (f"application/json, {GRAPHQL_RESPONSE};q=0.5", JSON),
        (f"*/*, {GRAPHQL_RESPONSE}", GRAPHQL_RESPONSE),
        ("text/html, */*;q=0.8", JSON),
        ("text/html", None),
        ("text/csv, image/png", None),
        ("application/json;q=0", None),
        (f"{GRAPHQL_RESPONSE};q=0, */*;q=0.1", JSON),
        ("application/json;q=abc", None),
        ("application/json;q=2", None),
    ],
)
def test_negotiate(accept: str | None, chosen: str | None) -> None:
    assert negotiate(accept) == chosen


@given(st.text(max_size=200))
def test_negotiate_never_fails_and_picks_only_what_we_serve(accept: str) -> None:
    assert negotiate(accept) in (JSON, GRAPHQL_RESPONSE, None)


@pytest.mark.parametrize(
    ("message", "stripped"),
    [
        (
            "Cannot query field 'viewr' on type 'Query'. Did you mean 'viewer'?",
            "Cannot query field 'viewr' on type 'Query'.",
        ),
        (
            "Value 'RUNNNG' does not exist in 'RunStatus' enum. Did you mean the enum value 'RUNNING'?",
            "Value 'RUNNNG' does not exist in 'RunStatus' enum.",
        ),
        (
            "Unknown type 'Agnt'. Did you mean 'Agent', 'AgentEdge', or 'AgentStatus'?",
            "Unknown type 'Agnt'.",
        ),
        ("Syntax Error: Expected Name, found <EOF>.", "Syntax Error: Expected Name, found <EOF>."),
    ],
)
def test_suggestions_are_stripped(message: str, stripped: str) -> None:
    assert _SUGGESTION.sub("", message) == stripped


def test_production_is_the_opt_in_and_refuses_graphiql_and_dev_mode() -> None:
    assert Settings().env == "development"
    assert Settings(env="production").is_production
    for flag in ("graphiql", "dev_mode"):
        with pytest.raises(ValidationError, match="ENVERIF_ENV=production"):
            Settings(env="production", **{flag: True})
    with pytest.raises(ValidationError):
        Settings(env="staging")  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1023, 2**31])
def test_max_body_bytes_is_bounded(size: int) -> None:
    with pytest.raises(ValidationError):
        Settings(max_body_bytes=size)
