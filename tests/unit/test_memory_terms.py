"""The term index's pure logic: a memory's terms, prefix ranges, text relevance."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.memory import (
    DF_CAP,
    NO_VALUE_RANK,
    TAG_TERM_PREFIX,
    MemoryCandidate,
    injection_rank,
    memory_terms,
    prefix_range,
    search_terms,
    tag_term,
    text_relevance,
    value_from_rank,
    value_score,
    write_rank,
)


@pytest.mark.parametrize(
    ("key", "value", "tags", "terms"),
    [
        ("venue", "Café Müller in Berlin", [], {"venue": 1, "cafe": 1, "muller": 1, "in": 1, "berlin": 1}),
        ("icp_decision", "mid-market, mid", [], {"icp": 1, "decision": 1, "mid": 2, "market": 1}),
        ("k", "lead lead Lead", [], {"k": 1, "lead": 3}),
        ("k", "", ["Q3 list"], {"k": 1, "q3": 1, "list": 1, tag_term("Q3 list"): 1}),
        (
            "k",
            "x",
            ["vip", "vip2"],
            {"k": 1, "x": 1, "vip": 1, "vip2": 1, tag_term("vip"): 1, tag_term("vip2"): 1},
        ),
        ("k", "a" * 70, [], {"k": 1, "a" * 64: 1}),  # cut as a query word is cut
        ("-", "!!", [], {}),
    ],
)
def test_memory_terms(key: str, value: str, tags: list[str], terms: dict[str, int]) -> None:
    assert memory_terms(key, value, tags) == terms


@given(st.text(max_size=40), st.lists(st.text(max_size=10), max_size=4))
def test_every_query_word_of_a_memorys_text_is_one_of_its_terms(value: str, tags: list[str]) -> None:
    """What a search folds from a query is what the index folds from the memory."""
    terms = memory_terms("k", value, tags)
    assert all(word in terms for word in search_terms(value, max_terms=100))
    assert all(tag_term(t) in terms for t in tags)
    # No word is ever taken for a tag: words never start with the tag prefix.
    assert all(not w.startswith(TAG_TERM_PREFIX) for w in search_terms(value, max_terms=100))


def test_a_tag_term_is_exact_and_of_one_length() -> None:
    assert tag_term("vip") != tag_term("VIP") != tag_term("vip ")
    assert len({len(tag_term(t)) for t in ("", "a", "Q3 list", "x" * 64)}) == 1


_WORDISH = st.text(alphabet=st.characters(categories=["Ll", "Lo", "Nd"]), min_size=1, max_size=6)


@given(_WORDISH, st.lists(_WORDISH, max_size=20))
def test_a_prefix_range_holds_exactly_the_strings_that_start_with_the_prefix(
    prefix: str, terms: list[str]
) -> None:
    low, high = prefix_range(prefix)
    for term in [*terms, prefix, prefix + "a", prefix + "\uffff", prefix[:-1]]:
        assert (low <= term < high) == term.startswith(prefix)
    # Tag terms (a prefix of their own fixed length) hold only themselves.
    low, high = prefix_range(tag_term("vip"))
    assert [t for t in (tag_term("vip"), tag_term("vipp"), tag_term("vi")) if low <= t < high] == [
        tag_term("vip")
    ]


IDF_RARE = math.log(1 + DF_CAP)


@pytest.mark.parametrize(
    ("tfs", "dfs", "expected"),
    [
        ([0], [5], 0.0),  # a word the memory lacks adds nothing
        ([1], [1], IDF_RARE),  # once: tf part (1 x 2.2 / 2.2) = 1
        ([1], [DF_CAP], math.log(2)),  # a word in DF_CAP memories or more weighs ln 2
        ([1], [DF_CAP * 50], math.log(2)),
        ([1, 1], [1, DF_CAP], IDF_RARE + math.log(2)),
        ([1], [0], IDF_RARE),  # a count of 0 (a stale read) counts as 1
    ],
)
def test_text_relevance(tfs: list[int], dfs: list[int], expected: float) -> None:
    assert text_relevance(tfs, dfs) == pytest.approx(expected)


def test_text_relevance_orders_as_a_search_should() -> None:
    # More occurrences help, with diminishing returns.
    assert text_relevance([1], [10]) < text_relevance([2], [10]) < text_relevance([3], [10])
    assert text_relevance([3], [10]) - text_relevance([2], [10]) < text_relevance([2], [10]) - text_relevance(
        [1], [10]
    )
    assert text_relevance([50], [10]) < 2.2 * text_relevance([1], [10])  # saturates at (k1 + 1) x idf
    # A rare word outweighs a common one; both words outweigh either.
    assert text_relevance([1, 0], [3, 900]) > text_relevance([0, 1], [3, 900])
    assert text_relevance([1, 1], [3, 900]) > text_relevance([1, 0], [3, 900])


def test_the_write_rank_is_the_injection_rank_without_the_last_use() -> None:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    assert write_rank(0.5, at) == injection_rank(0.5, at, None)
    assert write_rank(0.5, at) == injection_rank(0.5, at, datetime(2025, 1, 1, tzinfo=UTC))


@given(
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=3_000),
    st.one_of(st.none(), st.integers(min_value=0, max_value=3_000)),
)
def test_the_value_from_a_rank_is_the_value_score(importance: float, age: int, used: int | None) -> None:
    """What search ranks by (the stored rank) is importance x recency, for any memory touched
    before now."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    updated = now - timedelta(hours=age)
    last_used = None if used is None else now - timedelta(hours=used)
    memory = MemoryCandidate(1, "k", "v", importance, updated, last_used)
    rank = injection_rank(importance, updated, last_used)
    assert value_from_rank(rank, now) == pytest.approx(value_score(memory, now), rel=1e-9, abs=1e-12)


def test_a_memory_touched_in_the_future_is_clamped() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    # Ahead by 3 days (a tenth of a half-life): a little above its importance, never above 1.
    assert value_from_rank(injection_rank(0.5, now + timedelta(days=3), None), now) == pytest.approx(
        0.5 * 2**0.1
    )
    assert value_from_rank(injection_rank(1.0, now + timedelta(days=3), None), now) == 1.0
    assert value_from_rank(NO_VALUE_RANK, now) == 0.0
