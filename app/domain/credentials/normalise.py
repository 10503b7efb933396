# ruff: noqa: RUF001, RUF002 -- lookalike characters are this module's subject
"""What the guard scans: the text as a reader sees it, not as it is encoded.

A secret is hidden from a pattern by characters that change its code points but not how it
reads: a zero-width space or soft hyphen inside ``ghp_…``, a Cyrillic ``р`` in ``раssword``,
fullwidth ``ｐａｓｓｗｏｒｄ``. ``fold`` undoes those (a token wrapped over two lines is
``formats.find_broken_token``'s business):

1. format characters are dropped (zero-width spaces and joiners, soft hyphens, bidi
   controls, variation selectors, Unicode tag characters: ``INVISIBLE``), and so are
   combining marks stacked on an ASCII character;
2. NFKC folds compatibility forms (fullwidth and halfwidth forms, ligatures, mathematical
   letters, superscripts) to their plain characters;
3. letters of other scripts that look like Latin ones (Cyrillic, Greek, Armenian, Cherokee
   and a few Latin variants) are replaced by the Latin letter: their *skeleton*, after
   Unicode's confusables idea (UTS #39), for the lookalikes that matter in tokens and
   keywords (``SKELETON``), plus dash, quote and colon variants.

Folding is only for scanning: what is stored is the text as written. The keyword
vocabulary is folded the same way (``keyword``), so a Russian ``пароль`` still matches
after its lookalike letters became Latin ones.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

# Format (Cf) and filler characters that render as nothing. Listed rather than derived from
# unicodedata at import: iterating 1.1 M code points would cost a start-up second.
_INVISIBLE_RANGES: Final = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors, vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x2064),  # word joiner, invisible operators
    (0x2066, 0x206F),  # bidi isolates, deprecated format characters
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),  # zero-width no-break space (BOM)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF9, 0xFFFB),  # interlinear annotation
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE007F),  # tag characters
    (0xE0100, 0xE01EF),  # variation selectors supplement
)
INVISIBLE: Final[frozenset[int]] = frozenset(
    cp for low, high in _INVISIBLE_RANGES for cp in range(low, high + 1)
)

# Lookalike -> Latin. Only letters that pass for a Latin letter in ordinary fonts; letters
# with no Latin twin (Cyrillic л, ж, Greek λ) stay as they are.
SKELETON: Final[dict[str, str]] = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j", "к": "k",
    "м": "m", "н": "h", "о": "o", "п": "n", "р": "p", "с": "c", "т": "t", "у": "y", "х": "x",
    "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "ү": "y", "ь": "b", "ɡ": "g",
    "А": "A", "В": "B", "Е": "E", "Ё": "E", "З": "3", "Һ": "H", "І": "I", "Ї": "I", "Ј": "J",
    "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T", "У": "Y", "Х": "X",
    "Ѕ": "S", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "I", "Ү": "Y", "Ь": "b",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C", "Ϳ": "J",
    # Armenian
    "ա": "w", "հ": "h", "ո": "n", "ս": "u", "ց": "g", "օ": "o", "ք": "p", "Ս": "U", "Օ": "O",
    # Cherokee capitals
    "Ꭺ": "A", "Ᏼ": "B", "Ꮯ": "C", "Ꭰ": "D", "Ꭼ": "E", "Ꮐ": "G", "Ꮋ": "H", "Ꭻ": "J", "Ꮶ": "K",
    "Ꮮ": "L", "Ꮇ": "M", "Ꮲ": "P", "Ꮪ": "S", "Ꭲ": "T", "Ꮃ": "W", "Ꮓ": "Z",
    # Latin variants NFKC keeps
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ʏ": "y", "ɪ": "i", "ᴏ": "o", "ᴄ": "c", "ᴠ": "v",
    "ᴡ": "w", "ᴢ": "z", "ꜱ": "s",
    # Punctuation that stands in for ASCII in tokens and assignments
    "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "―": "-", "−": "-", "﹣": "-",
    "‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"',
    "∶": ":", "꞉": ":", "˸": ":", "⁄": "/", "∕": "/", "ǀ": "l",
}  # fmt: skip

# Combining marks stacked on an ASCII character (``p̷assword``, ``gh̀p_…``): precomposed
# letters (é, ñ) are single code points and keep their marks.
_MARK_ON_ASCII: Final = re.compile(
    r"(?<=[\x21-\x7e])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+"
)

_TABLE: Final[dict[int, str | None]] = {
    **{ord(src): dst for src, dst in SKELETON.items()},
    **dict.fromkeys(INVISIBLE, None),
}


def fold(text: str) -> str:
    """``text`` with invisible characters dropped, NFKC applied and lookalikes folded."""
    if text.isascii():  # the common case: nothing to fold (NFKC leaves ASCII as it is)
        return text
    text = _MARK_ON_ASCII.sub("", text.translate(_TABLE))
    if not unicodedata.is_normalized("NFKC", text):
        # NFKC can produce lookalikes of its own (a fullwidth Cyrillic letter has none, but
        # compatibility forms of Greek letters do), so the table is applied once more.
        text = unicodedata.normalize("NFKC", text).translate(_TABLE)
    return text


def lowered(text: str) -> str:
    """``fold``ed text in lower case, folded again: lower-casing turns capitals that have no
    Latin twin (Cyrillic П) into small letters that do (п), so keywords match in any case.
    ``keyword`` folds the vocabulary the same way."""
    low = text.lower()
    return low if low.isascii() else fold(low)


def keyword(word: str) -> str:
    """A regex for ``word`` in ``lowered`` text: the folded letters, and any space, ``_``,
    ``-`` or ``.`` between words as any one of those, or none."""
    parts = re.split(r"[ _.\-]", lowered(fold(word)))
    return r"[\s_.\-]?".join(re.escape(p) for p in parts)
