"""mcp servers: a workspace's MCP servers and the tools each listed at its last sync

Revision ID: a7c3e91d5f20
Revises: 7a1b53d7de74
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "a7c3e91d5f20"
down_revision: str | None = "7a1b53d7de74"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("transport", sa.String(length=16), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("command", sa.JSON(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("tool_risk", sa.JSON(), nullable=False),
        sa.Column("last_synced_at", UTC_DATETIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"],
            name=op.f("fk_mcp_servers_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("workspace_id", "name", name=op.f("uq_mcp_servers_workspace_id_name")),
    )  # fmt: skip
    op.create_index(op.f("ix_mcp_servers_workspace_id"), "mcp_servers", ["workspace_id"], unique=False)
    op.create_table(
        "mcp_tools",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("workspace_id", ID, nullable=False),
        sa.Column("server_id", ID, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("annotations", sa.JSON(), nullable=True),
        sa.Column("input_schema", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["server_id"], ["mcp_servers.id"],
            name=op.f("fk_mcp_tools_server_id_mcp_servers"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workspace_id"], ["workspaces.id"],
            name=op.f("fk_mcp_tools_workspace_id_workspaces"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("server_id", "name", name=op.f("uq_mcp_tools_server_id_name")),
    )  # fmt: skip
    op.create_index(op.f("ix_mcp_tools_workspace_id"), "mcp_tools", ["workspace_id"], unique=False)


def downgrade() -> None:
    # The tables' indexes go with them (MariaDB refuses to drop an index a foreign key uses).
    op.drop_table("mcp_tools")
    op.drop_table("mcp_servers")
