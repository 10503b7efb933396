"""Workspace (the tenant) and Viewer (who is calling)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.db import orm
from app.domain.errors import NotFound
from app.graphql.ids import to_global_id
from app.graphql.types.enums import Role
from app.graphql.types.node import Node


@strawberry.type(name="Workspace")
class Workspace(Node):
    id: strawberry.ID
    name: str
    created_at: datetime
    paused_at: datetime | None = strawberry.field(
        description="Set while the workspace is paused (pauseWorkspace): no run of it goes on."
    )
    paused_reason: str | None

    @classmethod
    def from_row(cls, row: orm.Workspace) -> Workspace:
        return cls(
            id=strawberry.ID(to_global_id("Workspace", row.id)),
            name=row.name,
            created_at=row.created_at,
            paused_at=row.paused_at,
            paused_reason=row.paused_reason,
        )


async def _viewer_workspace(root: Viewer, info: strawberry.Info) -> Workspace:
    row = await (await info.context.loaders()).workspace.load(root.workspace_id)
    if row is None:
        raise NotFound("this token's workspace is gone")
    return Workspace.from_row(row)


@strawberry.type(name="Viewer", description="The caller: the token's workspace and role.")
class Viewer:
    # Loaded only when asked for: `viewer { role }` needs no database read.
    workspace: Workspace = strawberry.field(resolver=_viewer_workspace)
    role: str = strawberry.field(
        description="viewer, operator or admin.",
        deprecation_reason="Use `access`, the same role as the Role enum.",
    )
    access: Role = strawberry.field(description="The token's role.")
    workspace_id: strawberry.Private[int]
