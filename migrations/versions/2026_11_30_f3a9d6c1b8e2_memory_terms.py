"""memory_terms: the search index the application keeps

One row per memory and term (a folded word of its key, value or tags, or a tag's digest),
with the memory's agent, how often the term occurs, the memory's ``write_rank``
(importance x recency as of its last write) and a copy of its ``injection_rank``
(``value_rank``). Clustered by the primary key (agent_id, term, write_rank, memory_id; WITHOUT
ROWID on SQLite): a search reads a term's best postings in order and together, so a word in
half of an agent's memories costs a LIMIT instead of scoring every match (MariaDB's FULLTEXT
scores them all). The same rows on MariaDB and SQLite: both match the same memories.

Existing memories are indexed here with a frozen copy of the application's functions (a
migration must not change when the application does); the ORM keeps the rows in step on
every later write, and the foreign key drops them with their memory.

Revision ID: f3a9d6c1b8e2
Revises: e5b8c2d41f07
Create Date: 2026-11-30 15:50:00
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "f3a9d6c1b8e2"
down_revision: str | None = "e5b8c2d41f07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TERM = sa.String(80).with_variant(mysql.VARCHAR(80, collation="utf8mb4_bin"), "mysql", "mariadb")
INDEX = "ix_memory_terms_memory_id"
BATCH = 1_000

MEMORIES = sa.table(
    "memories",
    sa.column("id", sa.Integer),
    sa.column("agent_id", sa.Integer),
    sa.column("key", sa.String),
    sa.column("value", sa.Text),
    sa.column("tags", sa.JSON),
    sa.column("importance", sa.Float),
    sa.column("updated_at", sa.DateTime),
    sa.column("injection_rank", sa.Float),
)
TERMS = sa.table(
    "memory_terms",
    sa.column("memory_id", sa.Integer),
    sa.column("term", sa.String),
    sa.column("agent_id", sa.Integer),
    sa.column("write_rank", sa.Float),
    sa.column("frequency", sa.Integer),
    sa.column("value_rank", sa.Float),
)

# -- frozen copy of app.domain.memory as of this revision --------------------------------------
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return [w[:64] for w in _WORD.findall(plain)]


def _terms(key: str, value: str, tags: list[Any]) -> dict[str, int]:
    names = [str(t) for t in tags]
    counts: dict[str, int] = {}
    for word in [*_words(key), *_words(value), *(w for t in names for w in _words(t))]:
        counts[word] = counts.get(word, 0) + 1
    for tag in names:
        counts["#" + hashlib.sha256(tag.encode()).hexdigest()[:20]] = 1
    return counts


def _write_rank(importance: float, updated_at: datetime) -> float:
    if importance <= 0:
        return -1e12
    return math.log2(importance) + updated_at.replace(tzinfo=UTC).timestamp() / 86_400 / 30.0


def upgrade() -> None:
    op.create_table(
        "memory_terms",
        sa.Column("agent_id", ID, autoincrement=False, nullable=False),
        sa.Column("term", TERM, nullable=False),
        sa.Column("write_rank", sa.Double(), nullable=False),
        sa.Column("memory_id", ID, autoincrement=False, nullable=False),
        sa.Column("frequency", sa.Integer(), nullable=False),
        sa.Column("value_rank", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["memory_id"], ["memories.id"], name=op.f("fk_memory_terms_memory_id_memories"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("agent_id", "term", "write_rank", "memory_id"),
        sqlite_with_rowid=False,
    )
    op.create_index(INDEX, "memory_terms", ["memory_id"])
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            sa.select(MEMORIES).where(MEMORIES.c.id > after).order_by(MEMORIES.c.id).limit(BATCH)
        ).all()
        if not rows:
            break
        postings = [
            {
                "memory_id": r.id,
                "term": term,
                "agent_id": r.agent_id,
                "write_rank": _write_rank(r.importance, r.updated_at),
                "frequency": n,
                "value_rank": r.injection_rank,
            }
            for r in rows
            for term, n in _terms(r.key, r.value, r.tags or []).items()
        ]
        if postings:
            bind.execute(TERMS.insert(), postings)
        after = rows[-1].id


def downgrade() -> None:
    op.drop_table("memory_terms")
