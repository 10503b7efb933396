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
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("budget", sa.JSON(), nullable=True))
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("budget", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("usage", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tree_usage", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("error_code", sa.String(64), nullable=True))
    with op.batch_alter_table("run_steps") as batch:
        batch.add_column(sa.Column("usage", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("error_code", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_steps") as batch:
        batch.drop_column("error_code")
        batch.drop_column("usage")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("error_code")
        batch.drop_column("tree_usage")
        batch.drop_column("usage")
        batch.drop_column("budget")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("budget")
