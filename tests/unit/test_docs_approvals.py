"""The GraphQL examples of docs/concepts/approvals.md validate against the schema, and the
page names every decision kind, scope and event type the schema has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from graphql import build_schema, parse, validate

from app.domain.approvals import ApprovalDecision, ApprovalEventType, ApprovalScope, NotificationStatus
from app.domain.runs import ApprovalStatus

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "concepts" / "approvals.md").read_text()
SCHEMA = build_schema((REPO / "schema.graphql").read_text())
EXAMPLES = re.findall(r"```graphql\n(.*?)```", PAGE, re.S)


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_validates(example: str) -> None:
    assert validate(SCHEMA, parse(example)) == []


@pytest.mark.parametrize(
    "name",
    [m.value for enum in (ApprovalDecision, ApprovalScope, ApprovalEventType, NotificationStatus, ApprovalStatus)
     for m in enum],
)  # fmt: skip
def test_every_kind_is_documented(name: str) -> None:
    assert f"`{name}`" in PAGE
