"""approvals decided the way people decide: decision kind, scope, response, deadline; a
step's original arguments and who edited them

Revision ID: c8e2f4a6b913
Revises: 9d4f2b7c1e63
Create Date: 2026-12-01 16:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "c8e2f4a6b913"
down_revision: str | None = "9d4f2b7c1e63"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # Plain ADD COLUMN (nullable, no batch): see 2026_12_01_b4d6e8f0a2c1 for why no table is
    # recreated on SQLite.
    op.add_column("approvals", sa.Column("decision", sa.String(16), nullable=True))
    op.add_column("approvals", sa.Column("scope", sa.String(8), nullable=True))
    op.add_column("approvals", sa.Column("response", sa.JSON(), nullable=True))
    op.add_column("approvals", sa.Column("expires_at", UTC_DATETIME, nullable=True))
    op.create_index("ix_approvals_expires_at", "approvals", ["expires_at"])
    op.add_column("run_steps", sa.Column("original_arguments", sa.JSON(), nullable=True))
    op.add_column("run_steps", sa.Column("edited_by", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_index("ix_approvals_expires_at", table_name="approvals")
    for table, column in [("run_steps", "edited_by"), ("run_steps", "original_arguments"),
                          ("approvals", "expires_at"), ("approvals", "response"), ("approvals", "scope"),
                          ("approvals", "decision")]:  # fmt: skip
        op.drop_column(table, column)
