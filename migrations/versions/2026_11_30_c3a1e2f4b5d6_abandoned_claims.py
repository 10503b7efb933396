"""runs count abandoned claims (ENVERIF_MAX_ATTEMPTS), not every claim

Revision ID: c3a1e2f4b5d6
Revises: 8bbd93a7046c
Create Date: 2026-11-30 09:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c3a1e2f4b5d6"
down_revision: str | None = "8bbd93a7046c"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("abandoned_claims", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("abandoned_claims")
