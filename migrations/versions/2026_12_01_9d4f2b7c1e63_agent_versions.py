"""governance: agent versions (runs pinned to one), memories pinned as injected, who started
and cancelled a run, held runs and paused workspaces, the audit trail

Revision ID: 9d4f2b7c1e63
Revises: b4d6e8f0a2c1
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "9d4f2b7c1e63"
down_revision: str | None = "b4d6e8f0a2c1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
MEMORY_KEY = sa.String(255).with_variant(mysql.VARCHAR(255, collation="utf8mb4_bin"), "mysql", "mariadb")
# The configuration a version holds (app.domain.agent_versions.VERSIONED_FIELDS, as of now).
VERSIONED = ("instructions", "model", "tools", "policy", "memory_max_items", "memory_max_chars")


def upgrade() -> None:
    op.create_table(
        "agent_versions",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("agent_id", ID, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.JSON(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_agent_versions_agent_id_agents"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"],
            name=op.f("fk_agent_versions_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("agent_id", "version", name=op.f("uq_agent_versions_agent_id_version")),
        sqlite_autoincrement=True,
    )  # fmt: skip
    op.create_index(op.f("ix_agent_versions_workspace_id"), "agent_versions", ["workspace_id"])
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent_version", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("injected_memories", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("started_by", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("cancelled_by", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("held_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("memory_revisions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("old_key", MEMORY_KEY, nullable=True))
        batch_op.add_column(sa.Column("old_tags", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("new_tags", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("old_importance", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("new_importance", sa.Float(), nullable=True))
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("decided_by", sa.JSON(), nullable=True))
    with op.batch_alter_table("workspaces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("paused_at", UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column("paused_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("paused_by", sa.JSON(), nullable=True))
    _version_existing_agents()
    op.create_table(
        "audit_heads",
        sa.Column("workspace_id", ID, autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_audit_heads_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workspace_id"),
        sqlite_autoincrement=True,
    )  # fmt: skip
    op.create_table(
        "audit_events",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("actor_kind", sa.String(length=16), nullable=False),
        sa.Column("actor_id", ID, nullable=True),
        sa.Column("actor_name", sa.String(length=200), nullable=True),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("object_type", sa.String(length=40), nullable=False),
        sa.Column("object_id", ID, nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("diff", sa.JSON(), nullable=True),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"], name=op.f("fk_audit_events_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workspace_id", "seq", name=op.f("uq_audit_events_workspace_id_seq")),
        sqlite_autoincrement=True,
    )  # fmt: skip
    op.create_index(
        "ix_audit_events_workspace_id_object_id", "audit_events", ["workspace_id", "object_id"], unique=False
    )


def _version_existing_agents() -> None:
    """Every agent's configuration as it is now becomes its version 1, written by the server;
    its runs (all pinned to 1 by the column's default) run with that from now on."""
    agents = sa.table(
        "agents", sa.column("id", ID), sa.column("workspace_id", ID),
        sa.column("instructions", sa.Text()), sa.column("model", sa.JSON()), sa.column("tools", sa.JSON()),
        sa.column("policy", sa.JSON()), sa.column("memory_max_items", sa.Integer()),
        sa.column("memory_max_chars", sa.Integer()),
    )  # fmt: skip
    versions = sa.table(
        "agent_versions", sa.column("workspace_id", ID), sa.column("agent_id", ID),
        sa.column("version", sa.Integer()), sa.column("config", sa.JSON()),
        sa.column("created_by", sa.JSON()), sa.column("created_at", UTC_DATETIME),
    )  # fmt: skip
    bind = op.get_bind()
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = [
        {
            "workspace_id": row.workspace_id,
            "agent_id": row.id,
            "version": 1,
            "config": {name: getattr(row, name) for name in VERSIONED},
            "created_by": {"kind": "SYSTEM", "id": None, "name": "migration"},
            "created_at": now,
        }
        for row in bind.execute(sa.select(agents))
    ]
    if rows:
        bind.execute(sa.insert(versions), rows)


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("audit_heads")
    # Plain DROP COLUMN (SQLite >= 3.35), never a batch table copy: recreating ``agents`` on
    # SQLite drops the old table, and its ON DELETE CASCADE would take every memory with it.
    op.drop_column("approvals", "decided_by")
    for column in ("new_importance", "old_importance", "new_tags", "old_tags", "old_key"):
        op.drop_column("memory_revisions", column)
    for column in ("paused_by", "paused_reason", "paused_at"):
        op.drop_column("workspaces", column)
    for column in ("held_reason", "cancelled_by", "started_by", "injected_memories", "agent_version"):
        op.drop_column("agent_runs", column)
    op.drop_column("agents", "version")
    op.drop_table("agent_versions")
