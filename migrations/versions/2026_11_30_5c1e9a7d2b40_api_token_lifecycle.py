"""api token lifecycle: expiry, and a name unique within the workspace

Revision ID: 5c1e9a7d2b40
Revises: c3a1e2f4b5d6
Create Date: 2026-11-30 09:40:00

Existing tokens keep working. Every one gets a name that is unique in its workspace: a token
without one is named ``token-<id>``, and a later token whose name (compared without case, as
MariaDB's collation does) repeats an earlier one becomes ``<name>-<id>``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# Frozen copy of the column type in app/db/orm.py, so this revision never changes with the app.
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
NAME_MAX = 100

revision: str = "5c1e9a7d2b40"
down_revision: str | None = "c3a1e2f4b5d6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_tokens = sa.table(
    "api_tokens",
    sa.column("id", sa.BigInteger()),
    sa.column("workspace_id", sa.BigInteger()),
    sa.column("name", sa.String(NAME_MAX)),
)


def _unique_names() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(_tokens.c.id, _tokens.c.workspace_id, _tokens.c.name).order_by(_tokens.c.id)
    ).all()
    renames: dict[int, str] = {}
    seen: dict[int, set[str]] = {}
    # First pass: the earliest holder of each name keeps it.
    for row in rows:
        names = seen.setdefault(row.workspace_id, set())
        if row.name and row.name.lower() not in names:
            names.add(row.name.lower())
        else:
            renames[row.id] = row.name or ""
    # Second pass: fresh names that collide with nothing kept or generated.
    for row in rows:
        if row.id not in renames:
            continue
        names = seen[row.workspace_id]
        base = f"{renames[row.id]}-{row.id}" if renames[row.id] else f"token-{row.id}"
        candidate, n = base[:NAME_MAX], 1
        while candidate.lower() in names:
            n += 1
            suffix = f"-{n}"
            candidate = base[: NAME_MAX - len(suffix)] + suffix
        names.add(candidate.lower())
        bind.execute(sa.update(_tokens).where(_tokens.c.id == row.id).values(name=candidate))


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", UTC_DATETIME, nullable=True))
    _unique_names()
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.alter_column("name", existing_type=sa.String(length=NAME_MAX), nullable=False)
        batch_op.create_unique_constraint(
            batch_op.f("uq_api_tokens_workspace_id_name"), ["workspace_id", "name"]
        )


def downgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_api_tokens_workspace_id_name"), type_="unique")
        batch_op.alter_column("name", existing_type=sa.String(length=NAME_MAX), nullable=True)
        batch_op.drop_column("expires_at")
