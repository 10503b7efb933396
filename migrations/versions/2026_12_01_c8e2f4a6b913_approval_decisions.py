"""approvals decided the way people decide: decision kind, scope, response, deadline; a
step's original arguments and who edited them; approval webhooks and their deliveries

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

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
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
    op.add_column("workspaces", sa.Column("approval_webhook", sa.JSON(), nullable=True))
    op.create_table(
        "approval_notifications",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("approval_id", ID, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret_env", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("next_at", UTC_DATETIME, nullable=True),
        sa.Column("last_attempt_at", UTC_DATETIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"],
            name=op.f("fk_approval_notifications_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["approval_id"], ["approvals.id"],
            name=op.f("fk_approval_notifications_approval_id_approvals"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
    )  # fmt: skip
    op.create_index(op.f("ix_approval_notifications_approval_id"), "approval_notifications", ["approval_id"])
    op.create_index("ix_approval_notifications_status_next_at", "approval_notifications", ["status", "next_at"])


def downgrade() -> None:
    op.drop_table("approval_notifications")
    op.drop_column("workspaces", "approval_webhook")
    op.drop_index("ix_approvals_expires_at", table_name="approvals")
    for table, column in [("run_steps", "edited_by"), ("run_steps", "original_arguments"),
                          ("approvals", "expires_at"), ("approvals", "response"), ("approvals", "scope"),
                          ("approvals", "decision")]:  # fmt: skip
        op.drop_column(table, column)
