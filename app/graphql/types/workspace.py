"""Workspace (the tenant) and Viewer (who is calling)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.db import orm
from app.domain.errors import NotFound
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.enums import Role
from app.graphql.types.node import NODE_ID, Node


@strawberry.type(name="ApprovalWebhook", description="A workspace's approval notifications.")
class ApprovalWebhook:
    url: str = strawberry.field(description="The URL every requested approval is POSTed to.")
    secret_env: str = strawberry.field(
        description="The environment variable (on the workers) holding the HMAC secret; never the secret."
    )


@strawberry.type(
    name="Workspace",
    description="The tenant: every agent, run, memory, schedule and token belongs to one workspace.",
)
class Workspace(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    name: str = strawberry.field(description="The workspace's name.")
    created_at: datetime = strawberry.field(description="When the workspace was created.")
    paused_at: datetime | None = strawberry.field(
        description="Set while the workspace is paused (pauseWorkspace): no run of it goes on."
    )
    paused_reason: str | None = strawberry.field(
        description="Why it is paused, as given to pauseWorkspace; null while it is not."
    )

    row: strawberry.Private[orm.Workspace]

    @classmethod
    def from_row(cls, row: orm.Workspace) -> Workspace:
        return cls(
            id=strawberry.ID(to_global_id("Workspace", row.id)),
            name=row.name,
            created_at=row.created_at,
            paused_at=row.paused_at,
            paused_reason=row.paused_reason,
            row=row,
        )

    @strawberry.field(
        description="Where every requested approval is POSTed, signed (docs/concepts/approvals.md); "
        "admins only."
    )
    async def approval_webhook(self, info: Info) -> ApprovalWebhook | None:
        principal = await info.context.principal()
        principal.require(Role.ADMIN)
        hook = self.row.approval_webhook
        if not isinstance(hook, dict):
            return None
        return ApprovalWebhook(url=str(hook.get("url")), secret_env=str(hook.get("secretEnv")))


async def _viewer_workspace(root: Viewer, info: strawberry.Info) -> Workspace:
    row = await (await info.context.loaders()).workspace.load(root.workspace_id)
    if row is None:
        raise NotFound("this token's workspace is gone")
    return Workspace.from_row(row)


@strawberry.type(name="Viewer", description="The caller: the token's workspace and role.")
class Viewer:
    # Loaded only when asked for: `viewer { role }` needs no database read.
    workspace: Workspace = strawberry.field(
        resolver=_viewer_workspace, description="The workspace the token belongs to."
    )
    role: str = strawberry.field(
        description="viewer, operator or admin.",
        deprecation_reason="Use `access`, the same role as the Role enum.",
    )
    access: Role = strawberry.field(description="The token's role.")
    workspace_id: strawberry.Private[int]
