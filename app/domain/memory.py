"""Which memories an agent starts a run with (pure ranking under a budget), and how search
hits are ordered."""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

# A memory untouched for this long counts half as much as a fresh one of equal importance.
RECENCY_HALF_LIFE_DAYS = 30.0


@dataclass(frozen=True, slots=True)
class MemoryCandidate:
    id: int
    key: str
    value: str
    importance: float
    updated_at: datetime
    last_used_at: datetime | None
    tags: tuple[str, ...] = ()


def value_score(memory: MemoryCandidate, now: datetime) -> float:
    """importance x recency, recency halving every RECENCY_HALF_LIFE_DAYS since last touched."""
    return _importance_x_recency(memory.importance, memory.updated_at, memory.last_used_at, now)


def _importance_x_recency(
    importance: float, updated_at: datetime, last_used_at: datetime | None, now: datetime
) -> float:
    touched = max(updated_at, last_used_at or updated_at)
    age_days = max((now - touched).total_seconds(), 0.0) / 86_400
    recency: float = 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    return importance * recency


# The rank of a memory of importance 0: its value is 0 whenever it was touched.
NO_VALUE_RANK = -1e12


def injection_rank(importance: float, updated_at: datetime, last_used_at: datetime | None) -> float:
    """A key that orders memories exactly as ``value_score`` does at any ``now`` after they
    were touched, without depending on ``now``: importance x 0.5^((now - touched)/H) is
    2^(log2(importance) + touched/H - now/H), and now/H is the same for every memory. Stored
    on the row (``memories.injection_rank``, rewritten whenever importance or a time changes)
    so the best memories are one ordered index read. A memory touched in the future (clock
    skew) ranks above what ``value_score`` gives it, which clamps its age at 0."""
    if importance <= 0:
        return NO_VALUE_RANK
    touched = max(updated_at, last_used_at or updated_at)
    if touched.tzinfo is None:
        touched = touched.replace(tzinfo=UTC)
    return math.log2(importance) + touched.timestamp() / 86_400 / RECENCY_HALF_LIFE_DAYS


def injection_size(memory: MemoryCandidate) -> int:
    return len(memory.key) + len(memory.value)


def select_for_injection(
    candidates: list[MemoryCandidate], *, now: datetime, max_items: int, max_chars: int
) -> list[MemoryCandidate]:
    """Highest value first, within both budgets. A memory too large for what is left of the
    character budget is skipped, so one huge memory cannot crowd out all the others. Ties
    break on id (newer first) so the choice is deterministic."""
    ranked = sorted(candidates, key=lambda m: (-value_score(m, now), -m.id))
    chosen: list[MemoryCandidate] = []
    chars = 0
    for memory in ranked:
        if len(chosen) >= max_items:
            break
        size = injection_size(memory)
        if chars + size > max_chars:
            continue
        chosen.append(memory)
        chars += size
    return chosen


# -- search ----------------------------------------------------------------------------------

# How much text relevance counts against importance x recency when ranking search hits. Both
# parts are in 0..1, so a memory that matches the words far better still wins, while among
# similar matches the important, recently touched one comes first.
RELEVANCE_WEIGHT = 0.7
# A search word: letters and digits (``_`` and punctuation split words).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class SearchHit:
    id: int
    relevance: float  # ``text_relevance``, larger is better; 0 without a query
    value_rank: float  # the memory's ``injection_rank``: importance x recency as a key


def value_from_rank(rank: float, now: datetime) -> float:
    """``value_score`` from a memory's ``injection_rank`` alone: the rank is
    log2(importance) + touched/H (in days), so the value is 2^(rank - now/H). A memory touched
    in the future (clock skew) is clamped at 1, the largest importance, where ``value_score``
    clamps at its own importance."""
    if rank <= NO_VALUE_RANK:
        return 0.0
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    exponent = rank - now.timestamp() / 86_400 / RECENCY_HALF_LIFE_DAYS
    return float(2.0 ** min(exponent, 0.0))


def rank_search_hits(hits: list[SearchHit], *, now: datetime, limit: int) -> list[SearchHit]:
    """The best ``limit`` hits: relevance (scaled to the best hit's) blended with importance x
    recency. Without relevance (a tag-only search) that is importance x recency alone. Ties
    break on id, newer first, so the order is deterministic."""
    best = max((h.relevance for h in hits), default=0.0)

    def score(hit: SearchHit) -> float:
        value = value_from_rank(hit.value_rank, now)
        if best <= 0:
            return value
        return RELEVANCE_WEIGHT * (hit.relevance / best) + (1 - RELEVANCE_WEIGHT) * value

    return sorted(hits, key=lambda h: (-score(h), -h.id))[: max(limit, 0)]


def search_terms(query: str, *, max_terms: int = 16) -> list[str]:
    """The words of a free-text query, deduplicated, in order: letters and digits only, folded
    as a memory's terms are (``memory_terms``), so each is a prefix of the terms it finds."""
    words: dict[str, None] = {}
    for word in _words(query):
        words.setdefault(word, None)
    return list(words)[:max_terms]


# Longer words are cut (a term is at most 80 characters; a tag's term is 21). A search word
# is cut the same way, so it still finds them.
MAX_WORD_CHARS = 64


def _words(text: str) -> list[str]:
    """Lower-cased words without diacritics (``Café`` is ``cafe``)."""
    folded = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return [w[:MAX_WORD_CHARS] for w in _WORD.findall(plain)]


# -- the term index ---------------------------------------------------------------------------
# ``memory_terms`` is an inverted index the application keeps (one row per memory and term):
# the same rows on MariaDB and SQLite, so both match the same memories; the search reads a
# term's postings in ``write_rank`` order, so a common word costs a LIMIT, not all its rows.

# Starts every tag term: never a word's first character (words are letters and digits).
TAG_TERM_PREFIX = "#"
# Saturation of a term's frequency in the relevance (BM25's k1): the 2nd occurrence of a word
# adds less than the first, the 10th almost nothing.
TF_SATURATION = 1.2
# Document frequencies are counted up to this many postings (a bounded index read): a word in
# more memories weighs what a word in this many does.
DF_CAP = 1000


def tag_term(tag: str) -> str:
    """A tag as one exact term (a digest: tags may hold any characters). A digest collision
    only adds a candidate, which the search's SQL tag filter then drops."""
    return TAG_TERM_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:20]


def memory_terms(key: str, value: str, tags: Iterable[str]) -> dict[str, int]:
    """A memory's terms and how often each occurs: every word of the key, the value and the
    tags (folded as ``search_terms`` folds a query), and one term per tag."""
    tags = [str(t) for t in tags]
    counts: dict[str, int] = {}
    for word in [*_words(key), *_words(value), *(w for t in tags for w in _words(t))]:
        counts[word] = counts.get(word, 0) + 1
    for tag in tags:
        counts[tag_term(tag)] = 1
    return counts


def write_rank(importance: float, updated_at: datetime) -> float:
    """The order of a term's postings: importance x recency as of the memory's last write
    (``injection_rank`` without the last use, so marking memories used rewrites no posting)."""
    return injection_rank(importance, updated_at, None)


def prefix_range(prefix: str) -> tuple[str, str]:
    """[low, high): exactly the strings that start with ``prefix`` (non-empty), in code-point
    order (SQLite's BINARY and MariaDB's utf8mb4_bin collations both compare so)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def text_relevance(term_frequencies: Iterable[int], document_frequencies: Iterable[int]) -> float:
    """How well a memory matches the query's words, larger is better (BM25 without length
    normalisation): per word, its rarity among the agent's memories, ln(1 + DF_CAP/df), times
    its saturated frequency in the memory. ``term_frequencies[i]`` is 0 for a word it lacks."""
    score = 0.0
    for tf, df in zip(term_frequencies, document_frequencies, strict=True):
        if tf <= 0:
            continue
        idf = math.log(1 + DF_CAP / min(max(df, 1), DF_CAP))
        score += idf * tf * (TF_SATURATION + 1) / (tf + TF_SATURATION)
    return score
