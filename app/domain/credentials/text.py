"""Where in a text the rules look: around their hint words, and at its long chunks.

The guard runs on every memory write, values up to 16 KB. A regex that must try every
position of such a text costs about 20 ns a character in ``re`` (0.3 ms for 16 KB), and the
guard has dozens of rules. So a rule names the literal words its matches contain; its
pattern is matched at their ``occurrences`` (found with ``str.find``, which is C-fast), or
runs in ``windows`` around them when the match may start before the word, and token rules
look only at ``long_chunks`` (whitespace-separated pieces long enough to hold a token,
from one ``str.split``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# Occurrences of one hint beyond this are one window over the whole text: the cost of a
# text full of hints is then one pass of each pattern, like a text without the trick.
MAX_HINT_OCCURRENCES: Final = 64
# Matching at an occurrence costs a few hundred ns, so many more are worth it.
MAX_ANCHORS: Final = 1024
SHORT_TEXT_CHARS: Final = 512


def _found(low: str, hints: Iterable[str], limit: int) -> list[tuple[int, int]] | None:
    """(start, end) of each occurrence of a hint; None past ``limit`` occurrences of one."""
    found: list[tuple[int, int]] = []
    for hint in hints:
        at = low.find(hint)
        count = 0
        while at >= 0:
            count += 1
            if count > limit:
                return None
            found.append((at, at + len(hint)))
            at = low.find(hint, at + 1)
    found.sort()
    return found


def windows(low: str, hints: Iterable[str], *, before: int, after: int) -> list[tuple[int, int]]:
    """(start, end) spans of ``low`` around each occurrence of a hint, overlapping ones
    merged, in order; [] when no hint occurs."""
    size = len(low)
    if size <= SHORT_TEXT_CHARS:
        # A short text is one window: cheaper than finding where in it a hint is.
        return [(0, size)] if any(hint in low for hint in hints) else []
    found = _found(low, hints, MAX_HINT_OCCURRENCES)
    if found is None:
        return [(0, size)]
    merged: list[tuple[int, int]] = []
    for at, end in found:
        start, stop = max(0, at - before), min(size, end + after)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def long_chunks(text: str, min_chars: int) -> list[str]:
    """The whitespace-separated pieces of ``text`` of at least ``min_chars`` characters."""
    return [chunk for chunk in text.split() if len(chunk) >= min_chars]


def occurrences(low: str, hints: Iterable[str]) -> list[int] | None:
    """Where each hint starts in ``low``, in order; None when a hint occurs more than
    ``MAX_ANCHORS`` times (the caller then scans the whole text)."""
    found = _found(low, hints, MAX_ANCHORS)
    return None if found is None else [at for at, _ in found]
