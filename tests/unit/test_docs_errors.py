"""The errors page names exactly the codes the code produces.

``docs/graphql/errors.md`` has one ``### `CODE``` section per ``extensions.code`` a client can
get (under "Codes a client sees") and one per code a model can get inside a run (under
"Errors the model sees"). A client or a model author reads it to learn what a code means and
what to do about it, so:

* the client codes are exactly ``EnverifError``'s subclasses' codes, ``INTERNAL``, and the
  codes the GraphQL edge writes itself (``RATE_LIMITED`` for one websocket operation too many);
* the model codes are exactly ``app.domain.model_errors.ModelErrorCode``, the one vocabulary
  every producer builds its results with (and no producer in the engine, the services or the
  domain spells a code by hand: ``failed("X", ...)``, ``ToolError("X", ...)``,
  ``Refusal("X", ...)``, ``{"code": "X"}``), so the page neither misses a code nor invents one;
* each section says when it happens, what to do, and shows an example.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.domain import errors
from app.domain.model_errors import ModelErrorCode
from app.graphql.errors import INTERNAL_CODE

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "graphql" / "errors.md"
WHERE = PAGE.relative_to(REPO)
CLIENT_SECTION = "## Codes a client sees"
MODEL_SECTION = "## Errors the model sees"
# Where results the model sees are built (the GraphQL edge and the CLI build none), and the
# one module that may spell their codes.
MODEL_CODE_SOURCES = ("app/engine", "app/services", "app/domain")
VOCABULARY = "app/domain/model_errors.py"

# An error the GraphQL edge builds itself, not from an EnverifError.
_EDGE_CODE = re.compile(r'"code":\s*"([A-Z][A-Z_]+)"')
_HEADING = re.compile(r"^### `([A-Z][A-Z_]*)`$", re.MULTILINE)
# A code spelled by hand where a result is built.
_MODEL_CODE_USES = (
    re.compile(r'\b(?:failed|ToolError|Refusal|model_error)\(\s*"([A-Z][A-Z_]+)"'),  # the constructors
    re.compile(r'_refuse\([^)\n]*?"([A-Z][A-Z_]+)"'),  # the planner's refusals
    re.compile(r'"code":\s*"([A-Z][A-Z_]+)"'),  # a result built by hand
)


def sections(title: str) -> dict[str, str]:
    """The ``### `CODE``` sections of one ``##`` part of the page: code -> its text."""
    text = PAGE.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    part = text[start : end if end != -1 else len(text)]
    pieces = _HEADING.split(part)
    found: dict[str, str] = {}
    for code, body in zip(pieces[1::2], pieces[2::2], strict=True):
        assert code not in found, f"{WHERE}: {code} has two sections under {title!r}"
        found[code] = body
    return found


def client_codes() -> set[str]:
    codes = {INTERNAL_CODE}
    for path in sorted((REPO / "app" / "graphql").rglob("*.py")):
        codes.update(_EDGE_CODE.findall(path.read_text()))
    pending = [errors.EnverifError]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            codes.add(sub.code)
            pending.append(sub)
    return codes


def source_texts() -> dict[str, str]:
    return {
        str(path.relative_to(REPO)): path.read_text()
        for folder in MODEL_CODE_SOURCES
        for path in sorted((REPO / folder).rglob("*.py"))
        if str(path.relative_to(REPO)) != VOCABULARY
    }


def codes_spelled_by_hand() -> dict[str, str]:
    """Each model-facing code some producer spells as a string, and one file that does."""
    found: dict[str, str] = {}
    for name, text in source_texts().items():
        for pattern in _MODEL_CODE_USES:
            for code in pattern.findall(text):
                found.setdefault(code, name)
    return found


CLIENT = sections(CLIENT_SECTION)
MODEL = sections(MODEL_SECTION)


def test_one_section_per_client_code() -> None:
    assert set(CLIENT) == client_codes(), (
        f"{WHERE} {CLIENT_SECTION!r}: missing {sorted(client_codes() - set(CLIENT))}, "
        f"not codes of app.domain.errors: {sorted(set(CLIENT) - client_codes())}"
    )


def test_one_section_per_model_code() -> None:
    codes = {code.value for code in ModelErrorCode}
    assert set(MODEL) == codes, (
        f"{WHERE} {MODEL_SECTION!r}: missing {sorted(codes - set(MODEL))}, "
        f"not in app.domain.model_errors.ModelErrorCode: {sorted(set(MODEL) - codes)}"
    )


def test_no_producer_spells_a_model_code_by_hand() -> None:
    found = codes_spelled_by_hand()
    assert not found, f"model-facing codes spelled as strings, not ModelErrorCode members: {found}"


def test_the_hand_spelling_patterns_still_match() -> None:
    """Guard against patterns that silently stopped matching."""
    samples = ['failed("TIMEOUT", "x")', 'ToolError("HTTP_ERROR", m)', '_refuse(call.tool, None, "UNKNOWN_TOOL", m)',
               '{"code": "DENIED", "message": m}', 'model_error("DENIED", m)']  # fmt: skip
    for sample in samples:
        assert any(p.search(sample) for p in _MODEL_CODE_USES), sample


@pytest.mark.parametrize(
    ("part", "code"), [("client", c) for c in sorted(CLIENT)] + [("model", c) for c in sorted(MODEL)]
)
def test_each_section_says_when_what_to_do_and_shows_an_example(part: str, code: str) -> None:
    body = (CLIENT if part == "client" else MODEL)[code]
    when, what = (
        ("**When.**", "**What to do.**") if part == "client" else ("**Cause.**", "**The model should**")
    )
    assert when in body and what in body, f"{WHERE} {code}: needs {when} and {what}"
    assert "```json" in body and f'"{code}"' in body, f"{WHERE} {code}: needs a json example showing the code"
