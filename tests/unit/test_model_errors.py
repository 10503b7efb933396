"""The vocabulary of errors the model sees (``app.domain.model_errors``): one shape, one enum.
(``test_docs_errors.py`` holds the GraphQL guide's list to the enum.)"""

from __future__ import annotations

import ast
import inspect
import itertools

import pytest

from app.domain.model_errors import CODE_PATTERN, MAX_MESSAGE_CHARS, ModelErrorCode, error_code, model_error


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
