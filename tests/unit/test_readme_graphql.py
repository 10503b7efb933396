"""Every GraphQL operation the README shows is valid against ``schema.graphql``.

Readers paste the README's ``gql '{"query": ...}'`` lines and its ``graphql`` blocks as they
are; a renamed field or argument must fail here, not in an operator's terminal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from graphql import GraphQLError, build_schema, parse, validate

REPO = Path(__file__).parents[2]
README = REPO / "README.md"

# A JSON string after "query": in the shell examples (quotes inside it escaped as \").
_QUERY_STRING = re.compile(r'"query": "((?:[^"\\]|\\.)*)"')
_GRAPHQL_BLOCK = re.compile(r"^```graphql\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_operations() -> list[tuple[int, str]]:
    """(line, document) for each query string and each ```graphql block of the README."""
    text = README.read_text()
    found = [(m.start(), json.loads(f'"{m[1]}"')) for m in _QUERY_STRING.finditer(text)]
    found += [(m.start(), m[1]) for m in _GRAPHQL_BLOCK.finditer(text)]
    return sorted((text.count("\n", 0, offset) + 1, document) for offset, document in found)


SCHEMA = build_schema((REPO / "schema.graphql").read_text())
OPERATIONS = readme_operations()


def test_the_readme_shows_operations() -> None:
    assert len(OPERATIONS) >= 10, "the README's examples were not found: did their format change?"


@pytest.mark.parametrize(("line", "document"), OPERATIONS, ids=[f"line {line}" for line, _ in OPERATIONS])
def test_each_operation_is_valid(line: int, document: str) -> None:
    try:
        errors = validate(SCHEMA, parse(document))
    except GraphQLError as exc:
        pytest.fail(f"README.md:{line}: does not parse: {exc.message}\n{document}")
    # A block may show several anonymous operations side by side, as alternatives to send one
    # at a time; only that rule is waived.
    errors = [e for e in errors if "anonymous operation must be the only" not in e.message]
    assert not errors, f"README.md:{line}: " + "; ".join(e.message for e in errors) + f"\n{document}"
