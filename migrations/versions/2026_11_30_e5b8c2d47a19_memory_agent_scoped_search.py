"""memories: agent-scoped full-text tokens and a stored injection rank

- ``memories.search_text`` is rewritten as the agent's own tokens (``a42xberlin``; one
  ``a42y<digest>`` token per tag): a search reads only its agent's postings, and a tag filter
  is a required term of the match (see ``app.domain.memory.search_document``).
- ``memories.injection_rank`` (DOUBLE): importance x recency as a key that does not age
  (``app.domain.memory.injection_rank``), with one index (agent_id, injection_rank) replacing
  revision 7a4e1c9b3f21's three: injection reads the head of that index.

Both are derived here with a frozen copy of the application's functions (a migration must
not change when the application does); the ORM keeps them in step on every later write.
No table rebuild: on SQLite that would drop the FTS5 triggers of revision 5d7c0e2a91b4,
which keep ``memories_fts`` in step with the rewritten ``search_text`` here.

Revision ID: e5b8c2d47a19
Revises: 7a4e1c9b3f21
Create Date: 2026-11-30 12:50:00
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "e5b8c2d47a19"
down_revision: str | None = "7a4e1c9b3f21"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_INDEXES = {
    "ix_memories_agent_id_importance": ["agent_id", "importance"],
    "ix_memories_agent_id_updated_at": ["agent_id", "updated_at"],
    "ix_memories_agent_id_last_used_at": ["agent_id", "last_used_at"],
}
NEW_INDEX = "ix_memories_agent_id_injection_rank"
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
    sa.column("last_used_at", sa.DateTime),
    sa.column("search_text", sa.Text),
    sa.column("injection_rank", sa.Float),
)

# -- frozen copy of app.domain.memory as of this revision --------------------------------------
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


def _injection_rank(importance: float, updated_at: datetime, last_used_at: datetime | None) -> float:
    if importance <= 0:
        return -1e12
    touched = max(updated_at, last_used_at or updated_at).replace(tzinfo=UTC)
    return math.log2(importance) + touched.timestamp() / 86_400 / 30.0


def _old_search_text(row: Any) -> dict[str, Any]:
    words = [row.key or "", row.value or "", *(str(t) for t in row.tags or [])]
    return {"search_text": " ".join(w for w in words if w)}


def _new_columns(row: Any) -> dict[str, Any]:
    return {
        "search_text": _search_document(row.agent_id, row.key, row.value, row.tags or []),
        "injection_rank": _injection_rank(row.importance, row.updated_at, row.last_used_at),
    }


def _rewrite(derive: Callable[[Any], dict[str, Any]], columns: list[str]) -> None:
    """Every memory's derived columns: one UPDATE per batch of ids (a CASE per column), not a
    round trip per row. The full-text index stays and follows the updates: on MariaDB 10.11
    a FULLTEXT index dropped and re-created over rows written meanwhile matched none of them
    (seen on 500,000 rows; fine on a few)."""
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            sa.select(MEMORIES).where(MEMORIES.c.id > after).order_by(MEMORIES.c.id).limit(BATCH)
        ).all()
        if not rows:
            break
        derived = {r.id: derive(r) for r in rows}
        values = {c: sa.case({i: d[c] for i, d in derived.items()}, value=MEMORIES.c.id) for c in columns}
        bind.execute(MEMORIES.update().where(MEMORIES.c.id.in_(list(derived))).values(values))
        after = rows[-1].id


def upgrade() -> None:
    op.add_column(
        "memories", sa.Column("injection_rank", sa.Double(), nullable=False, server_default="0")
    )
    _rewrite(_new_columns, ["search_text", "injection_rank"])
    op.create_index(NEW_INDEX, "memories", ["agent_id", "injection_rank"])
    for name in OLD_INDEXES:
        op.drop_index(name, table_name="memories")


def downgrade() -> None:
    for name, columns in OLD_INDEXES.items():
        op.create_index(name, "memories", columns)
    op.drop_index(NEW_INDEX, table_name="memories")
    _rewrite(_old_search_text, ["search_text"])
    # Plain ALTER TABLE (SQLite >= 3.35 has DROP COLUMN): a batch rebuild would drop the
    # FTS5 triggers.
    op.execute("ALTER TABLE memories DROP COLUMN injection_rank")
