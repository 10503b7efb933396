"""The errors page names exactly the codes the code produces.

``docs/graphql/errors.md`` has one ``### `CODE``` section per ``extensions.code`` a client can
get (under "Codes a client sees") and one per code a model can get inside a run (under
"Errors the model sees"). A client or a model author reads it to learn what a code means and
what to do about it, so:

* the client codes are exactly ``EnverifError``'s subclasses' codes, ``INTERNAL``, and the
  codes the GraphQL edge writes itself (``RATE_LIMITED`` for one websocket operation too many);
* every model-facing code that the engine, the services or the domain put in a result
  (``failed("X", ...)``, ``ToolError("X", ...)``, ``Refusal("X", ...)``, ``{"code": "X"}``,
  the strict-JSON codes) has a section, and every section names a code that exists in the
  code, so the page neither misses a code nor invents one;
* each section says when it happens, what to do, and shows an example.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.domain import errors
from app.graphql.errors import INTERNAL_CODE

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "graphql" / "errors.md"
WHERE = PAGE.relative_to(REPO)
CLIENT_SECTION = "## Codes a client sees"
MODEL_SECTION = "## Errors the model sees"
# Where results the model sees are built (the GraphQL edge and the CLI build none).
MODEL_CODE_SOURCES = ("app/engine", "app/services", "app/domain")

# An error the GraphQL edge builds itself, not from an EnverifError.
_EDGE_CODE = re.compile(r'"code":\s*"([A-Z][A-Z_]+)"')
_HEADING = re.compile(r"^### `([A-Z][A-Z_]*)`$", re.MULTILINE)
_MODEL_CODE_USES = (
    re.compile(r'\b(?:failed|ToolError|Refusal)\(\s*"([A-Z][A-Z_]+)"'),  # the constructors
    re.compile(r'_refuse\([^)\n]*?"([A-Z][A-Z_]+)"'),  # the planner's refusals
    re.compile(r'"code":\s*"([A-Z][A-Z_]+)"'),  # a result built by hand
    re.compile(r'^([A-Z][A-Z_]+) = "\1"$', re.MULTILINE),  # a module constant (NOT_JSON, ...)
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
    }


def model_codes_in_code() -> dict[str, str]:
    """Each model-facing code the code builds a result with, and one file that does."""
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


def test_every_model_code_of_the_code_has_a_section() -> None:
    found = model_codes_in_code()
    # Guard against patterns that silently stopped matching.
    assert {"UNKNOWN_TOOL", "DENIED", "TIMEOUT", "NOT_JSON", "URL_REFUSED", "DELEGATION_CYCLE"} <= set(found)
    missing = {code: where for code, where in found.items() if code not in MODEL}
    assert not missing, f"model-facing codes without a section under {MODEL_SECTION!r} in {WHERE}: {missing}"


@pytest.mark.parametrize("code", sorted(MODEL))
def test_each_model_section_names_a_code_the_code_has(code: str) -> None:
    # A section may name a code that reaches the model indirectly (the memory tools pass a
    # service's CREDENTIAL_REJECTED on); it must still be a code the code defines.
    assert any(f'"{code}"' in text for text in source_texts().values()), (
        f"{WHERE}: {code} is under {MODEL_SECTION!r}, but no file of {MODEL_CODE_SOURCES} has it"
    )


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
