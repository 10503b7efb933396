"""The parsed/validated document cache (app.graphql.documents): hits for repeated texts,
bounded size, and every refusal still a refusal on every request."""

from __future__ import annotations

import asyncio

from graphql import parse

from app.graphql.documents import DocumentCache
from app.graphql.schema import DEFAULT_MAX_QUERY_DEPTH, MAX_ALIASES, build_schema


def test_lru_is_bounded_in_entries_and_characters() -> None:
    cache = DocumentCache(max_entries=2, max_chars=40)
    for text in ("{ a }", "{ b }", "{ c }"):
        cache.put(text, parse(text))
    assert len(cache) == 2 and cache.get("{ a }") is None and cache.get("{ c }") is not None
    cache.put("{ " + "x " * 30 + "}", parse("{ " + "x " * 30 + "}"))  # over the character budget
    assert len(cache) <= 2
    assert cache._chars <= 40


def test_a_repeated_query_is_parsed_and_validated_once() -> None:
    schema = build_schema(DEFAULT_MAX_QUERY_DEPTH + 1)  # its own cache
    cache = _cache_of(schema)
    for _ in range(3):
        result = asyncio.run(schema.execute("{ __typename }"))
        assert result.errors is None and result.data == {"__typename": "Query"}
    assert (cache.misses, cache.hits) == (1, 2)


def test_refused_documents_are_refused_every_time_and_never_kept_as_valid() -> None:
    schema = build_schema(3)
    cache = _cache_of(schema)
    too_deep = "{ viewer { workspace { agents { edges { node { id } } } } } }"
    aliases = "{ " + " ".join(f"a{i}: __typename" for i in range(MAX_ALIASES + 1)) + " }"
    for query in (too_deep, aliases, "{ nope }", "{ unclosed"):
        for _ in range(2):
            result = asyncio.run(schema.execute(query))
            assert result.errors, query
    assert len(cache) == 0  # not kept at all: refused texts would only crowd the cache


def _cache_of(schema: object) -> DocumentCache:
    for factory in schema.extensions:  # type: ignore[attr-defined]
        owner = getattr(factory, "__self__", None)
        if isinstance(owner, DocumentCache):
            return owner
    raise AssertionError("the schema has no document cache")
