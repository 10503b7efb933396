"""schema.graphql is generated from the code, and stays a compatible superset of the
public contract, ``tests/contract/contract.graphql``."""

from __future__ import annotations

from pathlib import Path

from graphql import build_schema, find_breaking_changes

from app.graphql.schema import schema

REPO = Path(__file__).parents[2]
SCHEMA_FILE = REPO / "schema.graphql"
CONTRACT_FILE = REPO / "tests" / "contract" / "contract.graphql"
REGENERATE = (
    ".venv/bin/python -c 'from app.graphql.schema import schema; print(schema.as_str())' > schema.graphql"
)


def test_schema_file_is_up_to_date() -> None:
    generated = schema.as_str() + "\n"
    current = SCHEMA_FILE.read_text() if SCHEMA_FILE.exists() else ""
    assert current == generated, (
        f"schema.graphql is out of date with the code; regenerate it with:\n  {REGENERATE}"
    )


def test_schema_is_a_compatible_superset_of_the_contract() -> None:
    contract = build_schema(CONTRACT_FILE.read_text())
    ours = build_schema(schema.as_str())
    # A breaking change is exactly one that can make an operation valid against the contract
    # invalid against ours (a removed type/field/enum value, a narrowed argument or input,
    # a new required argument or input field). Dangerous changes (an added optional argument,
    # an added interface) keep every such operation valid.
    breaking = [f"{c.type.name}: {c.description}" for c in find_breaking_changes(contract, ours)]
    assert not breaking, "schema.graphql breaks the contract:\n" + "\n".join(breaking)


def test_the_compatibility_check_catches_a_break() -> None:
    # Guard against a check that cannot fail: dropping a contract field or making an
    # argument required must be reported.
    contract = build_schema("type Query { viewer: String agents(first: Int): [String] }")
    dropped = build_schema("type Query { agents(first: Int): [String] }")
    required = build_schema("type Query { viewer: String agents(first: Int!): [String] }")
    assert find_breaking_changes(contract, dropped)
    assert find_breaking_changes(contract, required)
