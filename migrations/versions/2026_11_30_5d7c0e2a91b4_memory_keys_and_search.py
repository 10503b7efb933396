"""memory keys (255, exact) and full-text search

- ``memories.key`` (and the revisions' copy) grows to 255 characters and, on MariaDB/MySQL,
  compares byte for byte (``utf8mb4_bin``), so ``Plan`` and ``plan`` are two keys on both
  databases (SQLite's default BINARY collation already behaves so).
- ``memories.search_text``: key, value and tags in one column, written by the ORM
  (``orm.Memory``) whenever one of them changes. One column because MariaDB refuses a
  FULLTEXT index over columns of different collations (the binary key and the value).
- MariaDB/MySQL: a FULLTEXT index on it (queried in boolean mode).
- SQLite: an FTS5 table over it (external content: ``memories`` itself) kept in step by
  triggers. NOTE: a later batch migration that rebuilds ``memories`` on SQLite drops these
  triggers with the old table; such a migration must drop and re-create them (and rebuild).

Revision ID: 5d7c0e2a91b4
Revises: 5c1e9a7d2b40
Create Date: 2026-11-30 09:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
KEY = sa.String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
OLD_KEY = sa.String(200)

revision: str = "5d7c0e2a91b4"
down_revision: str | None = "5c1e9a7d2b40"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite batch mode rebuilds the table from reflection, which does not see AUTOINCREMENT;
# without it a deleted newest row's id would be handed to the next memory.
_KEEP_AUTOINCREMENT = {"sqlite_autoincrement": True}

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


def _is_mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    mysql_like = _is_mysql()
    with op.batch_alter_table("memories", schema=None, table_kwargs=_KEEP_AUTOINCREMENT) as batch_op:
        batch_op.alter_column("key", existing_type=OLD_KEY, type_=KEY, existing_nullable=False)
        batch_op.add_column(sa.Column("search_text", LONG_TEXT, nullable=True))
    with op.batch_alter_table("memory_revisions", schema=None, table_kwargs=_KEEP_AUTOINCREMENT) as batch_op:
        batch_op.alter_column("key", existing_type=OLD_KEY, type_=KEY, existing_nullable=False)

    # Existing rows: key and value (their tags join on their next write).
    concat = "CONCAT(`key`, ' ', `value`)" if mysql_like else '"key" || \' \' || "value"'
    op.execute(f"UPDATE memories SET search_text = {concat}")
    with op.batch_alter_table("memories", schema=None, table_kwargs=_KEEP_AUTOINCREMENT) as batch_op:
        batch_op.alter_column("search_text", existing_type=LONG_TEXT, nullable=False)

    if mysql_like:
        op.execute("CREATE FULLTEXT INDEX ix_memories_search_text ON memories (search_text)")
    else:
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    if _is_mysql():
        op.execute("DROP INDEX ix_memories_search_text ON memories")
    else:
        for statement in SQLITE_FTS_DROP:
            op.execute(statement)
    with op.batch_alter_table("memory_revisions", schema=None, table_kwargs=_KEEP_AUTOINCREMENT) as batch_op:
        batch_op.alter_column("key", existing_type=KEY, type_=OLD_KEY, existing_nullable=False)
    with op.batch_alter_table("memories", schema=None, table_kwargs=_KEEP_AUTOINCREMENT) as batch_op:
        batch_op.drop_column("search_text")
        batch_op.alter_column("key", existing_type=KEY, type_=OLD_KEY, existing_nullable=False)
