"""Pure memory ranking: what a run starts with, and how search hits are ordered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.memory import (
    NO_VALUE_RANK,
    RECENCY_HALF_LIFE_DAYS,
    MemoryCandidate,
    SearchHit,
    injection_rank,
    injection_size,
    rank_search_hits,
    search_terms,
    select_for_injection,
    value_score,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def mem(
    id: int, importance: float, *, age_days: float = 0, used_days: float | None = None, size: int = 10
) -> MemoryCandidate:
    updated = NOW - timedelta(days=age_days)
    used = None if used_days is None else NOW - timedelta(days=used_days)
    return MemoryCandidate(id, f"k{id}", "v" * (size - len(f"k{id}")), importance, updated, used)


@pytest.mark.parametrize(
    ("memory", "score"),
    [
        (mem(1, 1.0), 1.0),
        (mem(1, 0.5), 0.5),
        (mem(1, 1.0, age_days=RECENCY_HALF_LIFE_DAYS), 0.5),
        (mem(1, 1.0, age_days=2 * RECENCY_HALF_LIFE_DAYS), 0.25),
        (mem(1, 1.0, age_days=90, used_days=0), 1.0),  # being used keeps a memory fresh
        (mem(1, 0.0), 0.0),
    ],
)
def test_value_score(memory: MemoryCandidate, score: float) -> None:
    assert value_score(memory, NOW) == pytest.approx(score)


@pytest.mark.parametrize(
    ("candidates", "max_items", "max_chars", "chosen"),
    [
        ([mem(1, 0.2), mem(2, 0.9), mem(3, 0.5)], 2, 1000, [2, 3]),
        ([mem(1, 0.9, age_days=120), mem(2, 0.5)], 1, 1000, [2]),  # 0.9/16 < 0.5
        ([mem(1, 1.0, size=500), mem(2, 0.5), mem(3, 0.4)], 5, 100, [2, 3]),  # too big is skipped
        ([mem(1, 0.5), mem(2, 0.5)], 1, 1000, [2]),  # ties: newer id first
        ([mem(1, 0.5)], 0, 1000, []),
        ([], 5, 1000, []),
    ],
)
def test_select_for_injection(
    candidates: list[MemoryCandidate], max_items: int, max_chars: int, chosen: list[int]
) -> None:
    picked = select_for_injection(candidates, now=NOW, max_items=max_items, max_chars=max_chars)
    assert [m.id for m in picked] == chosen


@given(
    st.lists(
        st.builds(
            mem,
            st.integers(1, 10_000),
            st.floats(0, 1),
            age_days=st.floats(0, 1000),
            size=st.integers(3, 300),
        ),
        unique_by=lambda m: m.id,
        max_size=40,
    ),
    st.integers(0, 25),
    st.integers(0, 2000),
)
def test_injection_never_exceeds_the_budget(
    candidates: list[MemoryCandidate], max_items: int, max_chars: int
) -> None:
    picked = select_for_injection(candidates, now=NOW, max_items=max_items, max_chars=max_chars)
    assert len(picked) <= max_items
    assert sum(injection_size(m) for m in picked) <= max_chars
    # Nothing better was left out while it still fitted.
    scores = [value_score(m, NOW) for m in picked]
    assert scores == sorted(scores, reverse=True)


def hit(id: int, relevance: float, importance: float = 0.5, age_days: float = 0) -> SearchHit:
    return SearchHit(id, relevance, injection_rank(importance, NOW - timedelta(days=age_days), None))


@pytest.mark.parametrize(
    ("hits", "limit", "order"),
    [
        ([hit(1, 1.0), hit(2, 3.0), hit(3, 2.0)], 10, [2, 3, 1]),  # relevance first
        ([hit(1, 2.0, 0.1), hit(2, 2.0, 0.9)], 10, [2, 1]),  # equal text: importance
        ([hit(1, 2.0, 0.9, age_days=300), hit(2, 2.0, 0.9)], 10, [2, 1]),  # then recency
        ([hit(1, 10.0, 0.0), hit(2, 1.0, 1.0)], 10, [1, 2]),  # a far better match wins
        ([hit(1, 0.0, 0.2), hit(2, 0.0, 0.8)], 10, [2, 1]),  # no query: importance x recency
        ([hit(1, 1.0), hit(2, 1.0), hit(3, 1.0)], 2, [3, 2]),  # the limit; ties newer first
        ([hit(1, 1.0)], 0, []),
    ],
)
def test_rank_search_hits(hits: list[SearchHit], limit: int, order: list[int]) -> None:
    assert [h.id for h in rank_search_hits(hits, now=NOW, limit=limit)] == order


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("Churn report", ["churn", "report"]),
        ('berlin" OR "x', ["berlin", "or", "x"]),  # operators become plain words
        ("+must -not <more ~less (group) *star", ["must", "not", "more", "less", "group", "star"]),
        ("icp_decision", ["icp", "decision"]),
        ("%_%", []),
        ("Straße straße", ["straße"]),
        ("a a a", ["a"]),
        ("Café MÜLLER", ["cafe", "muller"]),  # folded as memory terms are
        ("x" * 100, ["x" * 64]),  # cut as memory terms are
    ],
)
def test_search_terms(query: str, terms: list[str]) -> None:
    assert search_terms(query) == terms


@given(st.text(max_size=200))
def test_search_terms_are_plain_words(query: str) -> None:
    terms = search_terms(query)
    assert len(terms) <= 16
    assert all(t and all(c.isalnum() for c in t) for t in terms)


# -- the stored injection rank ----------------------------------------------------------------

_moments = st.floats(min_value=0, max_value=3 * 365, allow_nan=False)


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), _moments, st.one_of(st.none(), _moments)),
        min_size=2,
        max_size=12,
    ),
    st.floats(min_value=0, max_value=365),
)
def test_injection_rank_orders_as_value_score_at_any_later_now(
    memories: list[tuple[float, float, float | None]], later_days: float
) -> None:
    """Whenever ``now`` is, the stored rank sorts memories as importance x recency does."""
    start = NOW - timedelta(days=4 * 365)
    rows = [
        MemoryCandidate(
            i,
            "k",
            "v",
            imp,
            start + timedelta(days=upd),
            None if used is None else start + timedelta(days=used),
        )
        for i, (imp, upd, used) in enumerate(memories)
    ]
    now = start + timedelta(days=3 * 365 + later_days)
    for a in rows:
        for b in rows:
            sa, sb = value_score(a, now), value_score(b, now)
            if abs(sa - sb) > 1e-9 * max(sa, sb):
                ra = injection_rank(a.importance, a.updated_at, a.last_used_at)
                rb = injection_rank(b.importance, b.updated_at, b.last_used_at)
                assert (ra > rb) == (sa > sb)


def test_injection_rank_does_not_age() -> None:
    a = injection_rank(0.5, NOW, None)
    assert injection_rank(0.5, NOW - timedelta(days=RECENCY_HALF_LIFE_DAYS), None) == pytest.approx(a - 1)
    assert injection_rank(1.0, NOW - timedelta(days=RECENCY_HALF_LIFE_DAYS), None) == pytest.approx(a)
    assert injection_rank(0.5, NOW - timedelta(days=9), NOW) == pytest.approx(a)  # used now is fresh
    assert (
        injection_rank(0.0, NOW, NOW)
        == NO_VALUE_RANK
        < injection_rank(1e-9, NOW - timedelta(days=3650), None)
    )
