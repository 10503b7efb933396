"""Parsed and validated documents, cached by their text: most requests repeat a few queries.

graphql-core parses and validates every document from scratch; for a small query that is
about half of the request's CPU. A ``DocumentCache`` belongs to one schema (so one set of
validation rules), and remembers, for a query text,

* its parsed document, which passed validation: the next request with the same text skips
  parsing and validating.

Only what succeeded is remembered: a document that does not parse or validate is parsed and
validated again each time and refused each time, with the same errors (and costs nothing
to keep: a cache filled with refused documents would be garbage for every collection). Documents are not
mutated by execution, so one can serve any number of requests. The cache is an LRU bounded
in entries and in characters of query text (documents are capped at ``MAX_QUERY_CHARS``),
so clients sending ever-new texts cost only the cache's fixed size, and a miss.

Everything that depends on the request rather than the text — variables, the argument caps,
the query cost, the caller's settings — is still checked on every request, at execution.
The validation rules and shape limits must be the same on every request for the cached
"valid" to hold: ``build_schema`` fixes both once per schema.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from graphql import DocumentNode
from strawberry.extensions import SchemaExtension

DEFAULT_MAX_ENTRIES = 1_000
DEFAULT_MAX_CHARS = 2_000_000


@dataclass
class _Entry:
    document: DocumentNode


@dataclass
class DocumentCache:
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_chars: int = DEFAULT_MAX_CHARS
    _entries: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    _chars: int = 0
    hits: int = 0
    misses: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, query: str) -> _Entry | None:
        entry = self._entries.get(query)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(query)
        return entry

    def put(self, query: str, document: DocumentNode) -> _Entry:
        entry = _Entry(document)
        if len(query) > self.max_chars:
            return entry  # served, never kept
        old = self._entries.pop(query, None)
        if old is not None:
            self._chars -= len(query)
        self._entries[query] = entry
        self._chars += len(query)
        while len(self._entries) > self.max_entries or self._chars > self.max_chars:
            evicted, _ = self._entries.popitem(last=False)
            self._chars -= len(evicted)
        return entry

    def extension(self) -> SchemaExtension:
        """A per-operation extension bound to this cache (strawberry wants a factory)."""
        return CachedDocuments(self)


class CachedDocuments(SchemaExtension):
    """Serves a cached document (skipping the parse and the validation); remembers what the
    parser and the validator accepted."""

    def __init__(self, cache: DocumentCache) -> None:
        self.cache = cache
        self._entry: _Entry | None = None

    def on_parse(self) -> Iterator[None]:
        ec = self.execution_context
        query = ec.query
        if query is not None and ec.graphql_document is None:
            self._entry = self.cache.get(query)
            if self._entry is not None:
                # strawberry parses only when no document is set yet.
                ec.graphql_document = self._entry.document
        yield

    def on_validate(self) -> Iterator[None]:
        ec = self.execution_context
        entry = self._entry
        known_valid = entry is not None and ec.graphql_document is entry.document
        if known_valid and ec.pre_execution_errors is None:
            # strawberry validates only when no errors (not even an empty list) are set yet.
            ec.pre_execution_errors = []
        yield
        query = ec.query
        if not known_valid and query is not None and ec.graphql_document is not None:
            if ec.pre_execution_errors == []:
                # Only valid documents are kept: a parsed document is ~1,000 objects per KB of
                # text, and a cache full of refused ones (a fresh comment each time) would be
                # a million objects for every full garbage collection to walk.
                self.cache.put(query, ec.graphql_document)
