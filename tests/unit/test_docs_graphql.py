"""Every GraphQL operation the README and the manual show is valid against ``schema.graphql``.

Readers paste the ``gql '{"query": ...}'`` lines and the ``graphql`` blocks of ``README.md``
and ``docs/**/*.md`` as they are, and run the clients in ``docs/examples/``; a renamed field
or argument must fail here, not in an operator's terminal.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from graphql import GraphQLError, build_schema, parse, validate

REPO = Path(__file__).parents[2]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]

# The query of a shell example's request body, `gql '{"query": "...` or `-d '{"query": "...`
# (quotes inside it escaped as \"). JSON elsewhere, say a scripted model's "query" argument to
# memory.search, is not GraphQL and does not open a single-quoted shell word.
_QUERY_STRING = re.compile(r"""'\{"query": "((?:[^"\\]|\\.)*)\"""")
_GRAPHQL_BLOCK = re.compile(r"^```graphql\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A JavaScript template literal holding an operation (`subscription ... { ... }`).
_JS_OPERATION = re.compile(r"`\s*((?:query|mutation|subscription)\b[^`]*)`")
_OPERATION_START = re.compile(r"^\s*(query|mutation|subscription)?\s*[A-Za-z_]*\s*(\(|\{)")


def page_operations(page: Path) -> list[tuple[str, str]]:
    """(where, document) for each query string and each ```graphql block of a page."""
    text = page.read_text()
    found = [(m.start(), json.loads(f'"{m[1]}"')) for m in _QUERY_STRING.finditer(text)]
    found += [(m.start(), m[1]) for m in _GRAPHQL_BLOCK.finditer(text)]
    name = page.relative_to(REPO)
    return sorted((f"{name}:{text.count(chr(10), 0, offset) + 1}", doc) for offset, doc in found)


def python_operations(path: Path) -> list[tuple[str, str]]:
    """The module-level strings of an example program that are GraphQL operations."""
    spec = importlib.util.spec_from_file_location(f"docs_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the examples run nothing on import
    name = path.relative_to(REPO)
    return [
        (f"{name}:{attr}", value)
        for attr, value in vars(module).items()
        if attr.isupper() and isinstance(value, str) and _OPERATION_START.match(value)
    ]


def javascript_operations(path: Path) -> list[tuple[str, str]]:
    text = path.read_text()
    name = path.relative_to(REPO)
    return [(f"{name}:{text.count(chr(10), 0, m.start()) + 1}", m[1]) for m in _JS_OPERATION.finditer(text)]


SCHEMA = build_schema((REPO / "schema.graphql").read_text())
OPERATIONS = [op for page in PAGES for op in page_operations(page)]
OPERATIONS += [op for path in sorted(EXAMPLES.glob("*.py")) for op in python_operations(path)]
OPERATIONS += [op for path in sorted(EXAMPLES.glob("*.mjs")) for op in javascript_operations(path)]


def test_the_docs_show_operations() -> None:
    shown = {where.split(":")[0] for where, _ in OPERATIONS}
    # Guard against a pattern that silently stopped matching: these pages and programs show
    # operations, so each must have been found.
    for expected in (
        "README.md",
        "docs/getting-started.md",
        "docs/concepts/memory.md",
        "docs/concepts/delegation.md",
        "docs/concepts/schedules.md",
        "docs/operating/security.md",
        "docs/graphql/guide.md",
        "docs/examples/tour.py",
        "docs/examples/watch_tree.mjs",
        "docs/examples/apollo_client.mjs",
    ):
        assert expected in shown, f"no GraphQL operation found in {expected}: did its format change?"
    assert len(OPERATIONS) >= 25


@pytest.mark.parametrize(("where", "document"), OPERATIONS, ids=[where for where, _ in OPERATIONS])
def test_each_operation_is_valid(where: str, document: str) -> None:
    try:
        errors = validate(SCHEMA, parse(document))
    except GraphQLError as exc:
        pytest.fail(f"{where}: does not parse: {exc.message}\n{document}")
    # A block may show several anonymous operations side by side, as alternatives to send one
    # at a time; only that rule is waived.
    errors = [e for e in errors if "anonymous operation must be the only" not in e.message]
    assert not errors, f"{where}: " + "; ".join(e.message for e in errors) + f"\n{document}"
