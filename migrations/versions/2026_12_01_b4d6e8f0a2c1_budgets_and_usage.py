"""budgets and usage: agents' budget, runs' own limits, usage, subtree usage, error codes

Revision ID: b4d6e8f0a2c1
Revises: 7a1b53d7de74
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b4d6e8f0a2c1"
down_revision: str | None = "7a1b53d7de74"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN on both databases (nullable columns, no batch): on SQLite a batch
    # "move and copy" would drop and recreate ``agents``, and the drop's ON DELETE CASCADE
    # would take every agent's memories with it.
    op.add_column("agents", sa.Column("budget", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("budget", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("usage", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("tree_usage", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("error_code", sa.String(64), nullable=True))
    op.add_column("run_steps", sa.Column("usage", sa.JSON(), nullable=True))
    op.add_column("run_steps", sa.Column("error_code", sa.String(64), nullable=True))


def downgrade() -> None:
    # DROP COLUMN (SQLite >= 3.35 has it natively): no table is recreated, for the same reason.
    for table, column in [("run_steps", "error_code"), ("run_steps", "usage"), ("agent_runs", "error_code"),
                          ("agent_runs", "tree_usage"), ("agent_runs", "usage"), ("agent_runs", "budget"),
                          ("agents", "budget")]:  # fmt: skip
        op.drop_column(table, column)
