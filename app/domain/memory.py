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
# A search word: letters and digits (``_`` splits words, as FTS5's tokenizer does).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class SearchHit:
    id: int
    relevance: float  # the database's full-text score, larger is better; 0 without a query
    importance: float
    updated_at: datetime
    last_used_at: datetime | None


def rank_search_hits(hits: list[SearchHit], *, now: datetime, limit: int) -> list[SearchHit]:
    """The best ``limit`` hits: relevance (scaled to the best hit's) blended with importance x
    recency. Without relevance (a tag-only search) that is importance x recency alone. Ties
    break on id, newer first, so the order is deterministic."""
    best = max((h.relevance for h in hits), default=0.0)

    def score(hit: SearchHit) -> float:
        value = _importance_x_recency(hit.importance, hit.updated_at, hit.last_used_at, now)
        if best <= 0:
            return value
        return RELEVANCE_WEIGHT * (hit.relevance / best) + (1 - RELEVANCE_WEIGHT) * value

    return sorted(hits, key=lambda h: (-score(h), -h.id))[: max(limit, 0)]


def search_terms(query: str, *, max_terms: int = 16) -> list[str]:
    """The words of a free-text query, deduplicated, in order: letters and digits only, so no
    user input ever reaches a full-text engine's operator syntax (MariaDB boolean mode's
    ``+-<>()~*"``, FTS5's ``AND OR NOT NEAR``, quotes, column filters)."""
    words: dict[str, None] = {}
    for word in _words(query):
        words.setdefault(word, None)
    return list(words)[:max_terms]


# -- the full-text document -------------------------------------------------------------------

# Longer words are cut: MariaDB does not index tokens over 84 characters, and the agent
# prefix takes up to 20 of them (an 18-digit id). A search word is cut the same way, so it
# still finds them.
MAX_WORD_CHARS = 64


def _words(text: str) -> list[str]:
    """Lower-cased words without diacritics (``Café`` is ``cafe``), as both engines see them."""
    folded = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return [w[:MAX_WORD_CHARS] for w in _WORD.findall(plain)]


def word_token(agent_id: int, word: str) -> str:
    """A word as the full-text index stores it: scoped to its agent (``a42xberlin``), so a
    search reads only that agent's postings instead of the whole workspace's, and the term
    statistics behind relevance are the agent's own. ``x`` ends the id: no agent's token is a
    prefix of another agent's."""
    return f"a{agent_id}x{word}"


def tag_token(agent_id: int, tag: str) -> str:
    """A tag as one exact token (a digest: tags may hold any characters): a tag filter becomes
    a required term of the full-text match. A digest collision only adds a candidate, which
    the SQL tag filter then drops."""
    return f"a{agent_id}y{hashlib.sha256(tag.encode()).hexdigest()[:20]}"


def search_document(agent_id: int, key: str, value: str, tags: Iterable[str]) -> str:
    """What ``memories.search_text`` holds: the agent's tokens for every word of the key, the
    value and the tags (repeats kept: term frequency counts), and one token per tag."""
    tags = [str(t) for t in tags]
    words = [*_words(key), *_words(value), *(w for t in tags for w in _words(t))]
    return " ".join([*(word_token(agent_id, w) for w in words), *(tag_token(agent_id, t) for t in tags)])
