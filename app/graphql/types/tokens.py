"""API tokens as an admin sees them: never the secret, except once in ``CreatedApiToken``."""

from __future__ import annotations

from datetime import datetime

import strawberry

from app.db import orm
from app.domain.errors import ValidationFailed
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.enums import Role
from app.graphql.types.node import NODE_ID, Connection, Node, keyset_connection
from app.services import auth
from app.services.reads import PageRequest


@strawberry.type(name="ApiToken", description="An API token of your workspace (admins only).")
class ApiToken(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    name: str = strawberry.field(description="Unique in the workspace.")
    role: str = strawberry.field(
        description="viewer, operator or admin.",
        deprecation_reason="Use `access`, the same role as the Role enum.",
    )
    access: Role = strawberry.field(description="The token's role.")
    created_at: datetime = strawberry.field(description="When it was created.")
    expires_at: datetime | None = strawberry.field(description="Null: never expires.")
    last_used_at: datetime | None = strawberry.field(
        description="When it last authenticated a request, to within about a minute."
    )
    revoked_at: datetime | None = strawberry.field(
        description="When it was revoked (it no longer authenticates); null while it is not."
    )

    @classmethod
    def from_row(cls, row: orm.ApiToken) -> ApiToken:
        return cls(
            id=strawberry.ID(to_global_id("ApiToken", row.id)),
            name=row.name,
            role=row.role,
            access=Role(row.role),
            created_at=row.created_at,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


@strawberry.type(
    name="CreatedApiToken",
    description="What createApiToken returns: the new token, with its secret this once.",
)
class CreatedApiToken:
    token: str = strawberry.field(description="The token itself. Shown only this once; store it now.")
    api_token: ApiToken = strawberry.field(
        description="The new token as listed from now on (without the secret)."
    )


@strawberry.input(
    name="CreateApiTokenInput", description="A new API token: its name, role and optional expiry."
)
class CreateApiTokenInput:
    access: Role | None = strawberry.field(
        default=None, description="The token's role (or the older `role`)."
    )
    role: str | None = strawberry.field(
        default=None,
        description="viewer, operator or admin.",
        deprecation_reason="Use `access`, the same role as the Role enum.",
    )
    name: str = strawberry.field(description="Unique in the workspace.")
    expires_at: datetime | None = strawberry.field(
        default=None, description="When the token stops working; must be in the future."
    )

    def chosen_role(self) -> Role:
        """``access``, or the deprecated ``role`` string; one of them, and the same if both."""
        if self.access is None and self.role is None:
            raise ValidationFailed(
                "give the token a role: access (VIEWER, OPERATOR or ADMIN)", field="access"
            )
        parsed = None if self.role is None else auth.parse_role(self.role)
        if self.access is not None and parsed is not None and parsed is not self.access:
            raise ValidationFailed("access and role name different roles; give access only", field="access")
        return self.access or parsed  # type: ignore[return-value]


@strawberry.type(name="ApiTokenConnection", description="A page of API tokens (Relay cursor connection).")
class ApiTokenConnection(Connection[ApiToken]):
    pass


async def api_token_connection(info: Info, *, page: PageRequest) -> ApiTokenConnection:
    principal = await info.context.principal()
    principal.require(Role.ADMIN)
    stmt = auth.tokens_query(principal.workspace_id)
    return await keyset_connection(
        info, ApiTokenConnection, stmt, page, ApiToken.from_row, id_column=orm.ApiToken.id
    )


async def api_token_node(info: Info, pk: int) -> ApiToken:
    principal = await info.context.principal()
    async with info.context.session() as session:
        row = await auth.get_token(session, principal, token_id=pk)
    return ApiToken.from_row(row)
