"""schedules: firings (one row per schedule and fire time) and the last skip on the schedule

Revision ID: e5b8c2d41f07
Revises: e5b8c2d47a19
Create Date: 2026-11-30 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "e5b8c2d41f07"
down_revision: str | None = "e5b8c2d47a19"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "schedule_firings",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("schedule_id", ID, nullable=False),
        sa.Column("fire_at", UTC_DATETIME, nullable=False),
        sa.Column("missed", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"], ["schedules.id"],
            name=op.f("fk_schedule_firings_schedule_id_schedules"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"],
            name=op.f("fk_schedule_firings_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("schedule_id", "fire_at", name=op.f("uq_schedule_firings_schedule_id_fire_at")),
        sqlite_autoincrement=True,
    )  # fmt: skip
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_skipped_at", UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column("last_skip_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("last_skip_reason")
        batch_op.drop_column("last_skipped_at")
    op.drop_table("schedule_firings")
