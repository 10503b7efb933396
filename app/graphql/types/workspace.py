"""Workspace (the tenant) and Viewer (who is calling)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.db import orm
from app.graphql.ids import to_global_id
from app.graphql.types.node import Node


@strawberry.type(name="Workspace")
class Workspace(Node):
    id: strawberry.ID
    name: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: orm.Workspace) -> Workspace:
        return cls(
            id=strawberry.ID(to_global_id("Workspace", row.id)), name=row.name, created_at=row.created_at
        )


@strawberry.type(name="Viewer", description="The caller: the token's workspace and role.")
class Viewer:
    workspace: Workspace
    role: str = strawberry.field(description="viewer, operator or admin.")
