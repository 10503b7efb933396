"""schedule quotas: a schedule's budget and, under overlap ALLOW, its maxConcurrentRuns

Revision ID: c8e1f4a6b2d9
Revises: c8e2f4a6b913
Create Date: 2026-12-01 16:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c8e1f4a6b2d9"
down_revision: str | None = "c8e2f4a6b913"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable, no batch): SQLite's "move and copy" would recreate the table.
    op.add_column("schedules", sa.Column("budget", sa.JSON(), nullable=True))
    op.add_column("schedules", sa.Column("max_concurrent_runs", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("schedules", "max_concurrent_runs")
    op.drop_column("schedules", "budget")
