"""memories: indexes for choosing injection candidates without sorting an agent's memories

Revision ID: 7a4e1c9b3f21
Revises: 5d7c0e2a91b4
Create Date: 2026-11-30 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "7a4e1c9b3f21"
down_revision: str | None = "5d7c0e2a91b4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_memories_agent_id_importance": ["agent_id", "importance"],
    "ix_memories_agent_id_updated_at": ["agent_id", "updated_at"],
    "ix_memories_agent_id_last_used_at": ["agent_id", "last_used_at"],
}


def upgrade() -> None:
    # Plain CREATE INDEX (no batch rebuild): on SQLite a rebuilt memories table would lose
    # the FTS5 triggers of the previous revision.
    for name, columns in INDEXES.items():
        op.create_index(name, "memories", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="memories")
