"""memories: drop the full-text index that search no longer reads

Search reads ``memory_terms`` (revision f3a9d6c1b8e2) since that revision, yet every memory
write still derived ``memories.search_text`` and paid for its index: the FULLTEXT index
``ix_memories_search_text`` on MariaDB/MySQL, the FTS5 table ``memories_fts`` and its three
triggers on SQLite (revisions 5d7c0e2a91b4 and e5b8c2d47a19). All of them go.

The downgrade restores them as revision e5b8c2d47a19 left them: the column holds each
memory's agent-scoped search document (a frozen copy of the application's function as of
that revision: a migration must not change when the application does), the FULLTEXT index
on MariaDB/MySQL, the FTS5 table with its triggers, rebuilt, on SQLite. Two differences, both
invisible to the application of that revision, which writes the column on every insert:
- on MariaDB the column is added NOT NULL (every row '') and the index created over it while
  it is empty; the documents are then written by UPDATEs the index follows. A FULLTEXT index
  MariaDB 10.11 once built over 500,000 existing rows matched none of them (not reproduced
  on 300,000: a re-created index found them all); built this way, its MATCH found every one
  of 300,000 seeded memories.
- on SQLite the column has a DEFAULT '': SQLite adds a NOT NULL column only with a default,
  and rebuilding ``memories`` instead would empty ``memory_terms`` (dropping the old table
  cascades to it).

Revision ID: 7a1b53d7de74
Revises: f3a9d6c1b8e2
Create Date: 2026-11-30 18:20:00
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "7a1b53d7de74"
down_revision: str | None = "f3a9d6c1b8e2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FULLTEXT_INDEX = "ix_memories_search_text"
BATCH = 1_000

MEMORIES = sa.table(
    "memories",
    sa.column("id", sa.Integer),
    sa.column("agent_id", sa.Integer),
    sa.column("key", sa.String),
    sa.column("value", sa.Text),
    sa.column("tags", sa.JSON),
    sa.column("search_text", sa.Text),
)

# As revision 5d7c0e2a91b4 created them.
SQLITE_FTS = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5("
    "search_text, content='memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER memories_fts_au AFTER UPDATE OF search_text ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); "
    "INSERT INTO memories_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]
SQLITE_FTS_DROP = [
    "DROP TRIGGER IF EXISTS memories_fts_ai",
    "DROP TRIGGER IF EXISTS memories_fts_ad",
    "DROP TRIGGER IF EXISTS memories_fts_au",
    "DROP TABLE IF EXISTS memories_fts",
]

# -- frozen copy of app.domain.memory.search_document as of revision e5b8c2d47a19 --------------
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return [w[:64] for w in _WORD.findall(plain)]


def _search_document(agent_id: int, key: str, value: str, tags: list[Any]) -> str:
    names = [str(t) for t in tags]
    words = [*_words(key), *_words(value), *(w for t in names for w in _words(t))]
    tag_tokens = [f"a{agent_id}y{hashlib.sha256(t.encode()).hexdigest()[:20]}" for t in names]
    return " ".join([*(f"a{agent_id}x{w}" for w in words), *tag_tokens])


def _is_mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if _is_mysql():
        op.execute(f"DROP INDEX {FULLTEXT_INDEX} ON memories")
    else:
        # The triggers name the column: SQLite refuses to drop it while they exist.
        for statement in SQLITE_FTS_DROP:
            op.execute(statement)
    # Plain ALTER TABLE (SQLite >= 3.35 has DROP COLUMN): a batch rebuild of ``memories``
    # would cascade to ``memory_terms`` and empty it.
    op.execute("ALTER TABLE memories DROP COLUMN search_text")


def _write_search_documents() -> None:
    """Every memory's search document: one UPDATE per batch of ids (a CASE), not a round trip
    per row."""
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            sa.select(MEMORIES.c.id, MEMORIES.c.agent_id, MEMORIES.c.key, MEMORIES.c.value, MEMORIES.c.tags)
            .where(MEMORIES.c.id > after)
            .order_by(MEMORIES.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        documents = {r.id: _search_document(r.agent_id, r.key, r.value, r.tags or []) for r in rows}
        bind.execute(
            MEMORIES.update()
            .where(MEMORIES.c.id.in_(list(documents)))
            .values(search_text=sa.case(documents, value=MEMORIES.c.id))
        )
        after = rows[-1].id


def downgrade() -> None:
    if _is_mysql():
        # Existing rows get LONGTEXT's implicit default, '': the index is built over nothing
        # and then follows the documents' UPDATEs.
        op.execute("ALTER TABLE memories ADD COLUMN search_text LONGTEXT NOT NULL")
        op.execute(f"CREATE FULLTEXT INDEX {FULLTEXT_INDEX} ON memories (search_text)")
        _write_search_documents()
    else:
        op.execute("ALTER TABLE memories ADD COLUMN search_text TEXT NOT NULL DEFAULT ''")
        _write_search_documents()
        for statement in SQLITE_FTS:
            op.execute(statement)
