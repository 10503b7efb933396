"""Keys and names others look things up by (app.services.validation.check_identifier_text):
no control characters, no whitespace at either end, so both databases compare them alike."""

from __future__ import annotations

import pytest

from app.domain.errors import ValidationFailed
from app.services.validation import check_identifier_text


@pytest.mark.parametrize(
    "value",
    ["plan", "Plan B", "naïve-ключ", "emoji 👩\u200d💻 key", "a.b_c-d", "x" * 255],
)
def test_accepted(value: str) -> None:
    assert check_identifier_text(value, field="key") == value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("dup\x00", "U+0000"),
        ("a\nb", "U+000A"),
        ("a\rb", "U+000D"),
        ("tab\tinside", "U+0009"),
        ("bell\x07", "U+0007"),
        ("del\x7f", "U+007F"),
        ("c1\x85", "U+0085"),
        ("line\u2028sep", "U+2028"),
        ("para\u2029sep", "U+2029"),
        ("dup ", "whitespace"),
        (" dup", "whitespace"),
        ("dup\u00a0", "whitespace"),
        ("dup\u3000", "whitespace"),
    ],
)
def test_refused(value: str, says: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_identifier_text(value, field="key")
    assert raised.value.field == "key"
    assert says in raised.value.message
