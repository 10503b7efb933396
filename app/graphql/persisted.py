"""Automatic persisted queries (Apollo's APQ): a client sends the sha256 of its document
instead of the document, and the document only when the server does not know it yet.

The protocol (``extensions.persistedQuery = {"version": 1, "sha256Hash": ...}``):

* hash alone, known here: the stored document runs;
* hash alone, unknown: ``PERSISTED_QUERY_NOT_FOUND`` (status 200), and the client sends the
  hash again with the document;
* hash and document: the hash must be the document's sha256 (else ``VALIDATION_FAILED``),
  then the document is stored and runs.

The store is this process's, bounded in entries and characters (an LRU, like the document
cache): with several API processes a client may meet a miss once per process, which the
protocol's retry absorbs. Documents are public text (the schema is), so nothing secret is
kept; variables are never stored.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from typing import Final

from app.domain.errors import ValidationFailed

# The answer to an unknown hash. Apollo Client retries with the document when it reads this
# message or this code.
NOT_FOUND_BODY: Final = {
    "errors": [{"message": "PersistedQueryNotFound", "extensions": {"code": "PERSISTED_QUERY_NOT_FOUND"}}]
}
_SHA256 = re.compile(r"[0-9a-f]{64}")


class PersistedQueryNotFound(Exception):
    """The client sent a hash this process does not know: it should send the document."""


def requested_hash(extensions: object) -> str | None:
    """The sha256 named by ``extensions.persistedQuery``, None when the request has none;
    VALIDATION_FAILED for a malformed one."""
    if not isinstance(extensions, dict) or "persistedQuery" not in extensions:
        return None
    persisted = extensions["persistedQuery"]
    if (
        not isinstance(persisted, dict)
        or persisted.get("version") != 1
        or not isinstance(persisted.get("sha256Hash"), str)
        or not _SHA256.fullmatch(persisted["sha256Hash"])
    ):
        raise ValidationFailed(
            "extensions.persistedQuery must be {version: 1, sha256Hash: <64 lowercase hex digits>}",
            field="extensions",
        )
    return str(persisted["sha256Hash"])


class PersistedQueries:
    def __init__(self, *, max_entries: int = 1_000, max_chars: int = 2_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._documents: OrderedDict[str, str] = OrderedDict()
        self._chars = 0

    def resolve(self, sha256: str, query: str | None) -> str:
        """The document to run for a request that names ``sha256`` (and maybe sends ``query``)."""
        if query is None:
            known = self._documents.get(sha256)
            if known is None:
                raise PersistedQueryNotFound
            self._documents.move_to_end(sha256)
            return known
        if hashlib.sha256(query.encode()).hexdigest() != sha256:
            raise ValidationFailed(
                "extensions.persistedQuery.sha256Hash is not the query's sha256", field="extensions"
            )
        self._remember(sha256, query)
        return query

    def _remember(self, sha256: str, query: str) -> None:
        if sha256 in self._documents or len(query) > self.max_chars:
            return
        self._documents[sha256] = query
        self._chars += len(query)
        while len(self._documents) > self.max_entries or self._chars > self.max_chars:
            _, dropped = self._documents.popitem(last=False)
            self._chars -= len(dropped)
