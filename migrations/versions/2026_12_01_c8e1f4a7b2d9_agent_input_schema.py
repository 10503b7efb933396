"""agents' input schema (JSON Schema 2020-12), a versioned field

Revision ID: c8e1f4a7b2d9
Revises: e2c7a9f4b1d3
Create Date: 2026-12-01 16:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c8e1f4a7b2d9"
down_revision: str | None = "e2c7a9f4b1d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Versions written before this lack the key, which reads as no schema.
    op.add_column("agents", sa.Column("input_schema", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("agents", "input_schema")
