"""audit: an event is inserted unsealed (no seq, no hashes) by the change's transaction and
chained afterwards by the sealer, so an append is one INSERT and appends never queue on the
workspace's chain head (docs/concepts/audit.md)

Revision ID: e2c7a9f4b1d3
Revises: c8e1f4a6b2d9
Create Date: 2026-12-01 16:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e2c7a9f4b1d3"
down_revision: str | None = "c8e1f4a6b2d9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column("seq", existing_type=sa.Integer(), nullable=True)
        batch.alter_column("prev_hash", existing_type=sa.String(length=64), nullable=True)
        batch.alter_column("hash", existing_type=sa.String(length=64), nullable=True)
    # The sealer finds unsealed events (seq IS NULL) of any workspace through this index.
    op.create_index("ix_audit_events_seq", "audit_events", ["seq"], unique=False)


def downgrade() -> None:
    # Before this revision every event is chained. `enverif migrate --downgrade` seals the
    # pending ones first; anything left unsealed is refused here rather than dropped.
    pending = op.get_bind().scalar(sa.text("SELECT COUNT(*) FROM audit_events WHERE seq IS NULL"))
    if pending:
        raise RuntimeError(
            f"{pending} audit events are not chained yet: downgrade with `enverif migrate "
            "--downgrade`, which chains them first"
        )
    op.drop_index("ix_audit_events_seq", table_name="audit_events")
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column("hash", existing_type=sa.String(length=64), nullable=False)
        batch.alter_column("prev_hash", existing_type=sa.String(length=64), nullable=False)
        batch.alter_column("seq", existing_type=sa.Integer(), nullable=False)
