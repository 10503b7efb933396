"""budgets and usage: agents' budget, runs' own limits, usage, subtree usage, error codes

Revision ID: b4d6e8f0a2c1
Revises: a7c3e91d5f20
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "b4d6e8f0a2c1"
down_revision: str | None = "a7c3e91d5f20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # Plain ADD COLUMN on both databases (nullable columns, no batch): on SQLite a batch
    # "move and copy" would drop and recreate ``agents``, and the drop's ON DELETE CASCADE
    # would take every agent's memories with it.
    op.add_column("agents", sa.Column("budget", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("budget", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("usage", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("tree_usage", sa.JSON(), nullable=True))
    op.add_column("agent_runs", sa.Column("error_code", sa.String(64), nullable=True))
    op.add_column("agent_runs", sa.Column("deadline_at", UTC_DATETIME, nullable=True))
    op.create_index("ix_agent_runs_deadline_at", "agent_runs", ["deadline_at"])
    op.add_column("run_steps", sa.Column("usage", sa.JSON(), nullable=True))
    op.add_column("run_steps", sa.Column("error_code", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_index("ix_agent_runs_deadline_at", table_name="agent_runs")
    # DROP COLUMN (SQLite >= 3.35 has it natively): no table is recreated, for the same reason.
    for table, column in [("run_steps", "error_code"), ("run_steps", "usage"), ("agent_runs", "error_code"), ("agent_runs", "deadline_at"),
                          ("agent_runs", "tree_usage"), ("agent_runs", "usage"), ("agent_runs", "budget"),
                          ("agents", "budget")]:  # fmt: skip
        op.drop_column(table, column)
