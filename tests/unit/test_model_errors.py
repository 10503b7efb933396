"""The vocabulary of errors the model sees (``app.domain.model_errors``): one shape, one enum,
and the GraphQL guide's list of them held to that enum."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from pathlib import Path

import pytest

from app.domain.model_errors import CODE_PATTERN, MAX_MESSAGE_CHARS, ModelErrorCode, error_code, model_error

ERRORS_DOC = Path(__file__).parents[2] / "docs" / "graphql" / "errors.md"
SECTION = "Errors the model sees"


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (ModelErrorCode.DENIED, "no", {"error": {"code": "DENIED", "message": "no"}}),
        (
            "CRM_DOWN",
            "a plugin's own code",
            {"error": {"code": "CRM_DOWN", "message": "a plugin's own code"}},
        ),
        (ModelErrorCode.TOOL_FAILED, "", {"error": {"code": "TOOL_FAILED", "message": ""}}),
        (
            ModelErrorCode.TOOL_FAILED,
            "x" * (MAX_MESSAGE_CHARS + 5),
            {"error": {"code": "TOOL_FAILED", "message": "x" * MAX_MESSAGE_CHARS}},
        ),
    ],
)
def test_model_error_has_one_shape(code: str, message: str, expected: dict[str, object]) -> None:
    result = model_error(code, message)
    assert result == expected
    assert type(result["error"]["code"]) is str  # stored as JSON: the plain value, not the enum
    assert error_code(result) == expected["error"]["code"]  # type: ignore[index]


@pytest.mark.parametrize("result", [None, "text", {"status": 200}, {"error": "x"}, {"error": {"code": 3}}])
def test_error_code_of_anything_else_is_none(result: object) -> None:
    assert error_code(result) is None


def test_every_code_is_its_own_name_in_upper_snake_case() -> None:
    for code in ModelErrorCode:
        assert code.value == code.name and CODE_PATTERN.match(code.value), code


def test_every_code_says_when_it_happens() -> None:
    """Each member is followed by a string saying when it happens (read from the source, as
    enum members cannot carry docstrings of their own)."""
    tree = ast.parse(inspect.getsource(ModelErrorCode))
    body = tree.body[0].body  # type: ignore[attr-defined]
    documented: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if isinstance(node, ast.Assign) and isinstance(following, ast.Expr):
            if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                documented[node.targets[0].id] = following.value.value  # type: ignore[attr-defined]
    missing = [code.name for code in ModelErrorCode if len(documented.get(code.name, "").strip()) < 10]
    assert not missing, f"codes without a line saying when they happen: {missing}"


def documented_codes(text: str) -> list[str]:
    """The ``### `CODE` `` headings under the "Errors the model sees" heading, up to the next
    heading of the same or a higher level."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if re.fullmatch(rf"#+\s+{re.escape(SECTION)}\s*", line)), None
    )
    assert start is not None, f"{ERRORS_DOC} has no heading {SECTION!r}"
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    codes = []
    for line in lines[start + 1 :]:
        heading = re.match(r"(#+)\s", line)
        if heading and len(heading.group(1)) <= level:
            break
        code = re.fullmatch(r"#+\s+`([A-Z0-9_]+)`\s*", line)
        if code:
            codes.append(code.group(1))
    return codes


def test_the_graphql_guide_lists_exactly_the_enum() -> None:
    if not ERRORS_DOC.exists():
        pytest.skip(
            f"{ERRORS_DOC.relative_to(ERRORS_DOC.parents[2])} does not exist yet (the docs branch "
            f"writes it, with a section {SECTION!r} and one ### `CODE` heading per code)"
        )
    codes = documented_codes(ERRORS_DOC.read_text())
    assert len(codes) == len(set(codes)), f"codes documented twice: {codes}"
    assert set(codes) == {c.value for c in ModelErrorCode}, (
        f"missing from the docs: {sorted({c.value for c in ModelErrorCode} - set(codes))}; "
        f"documented but not in ModelErrorCode: {sorted(set(codes) - {c.value for c in ModelErrorCode})}"
    )


def test_the_section_reader_stops_at_the_next_section() -> None:
    text = "# Errors\n## Errors the model sees\n### `DENIED`\ntext\n### `TIMEOUT`\n## Other\n### `NOPE`\n"
    assert documented_codes(text) == ["DENIED", "TIMEOUT"]
