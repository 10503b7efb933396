"""The errors page's "Why a model turn failed" table lists exactly ``ProviderErrorCode``."""

from __future__ import annotations

import re
from pathlib import Path

from app.domain.provider_errors import ProviderErrorCode

PAGE = Path(__file__).parents[2] / "docs" / "graphql" / "errors.md"
_ROW = re.compile(r"^\| `([A-Z][A-Z_]+)` \|", re.MULTILINE)


def test_the_table_lists_every_provider_error_code() -> None:
    text = PAGE.read_text()
    part = text[text.index("## Why a model turn failed") :]
    assert _ROW.findall(part) == [code.value for code in ProviderErrorCode]
