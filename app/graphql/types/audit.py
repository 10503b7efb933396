"""The audit trail as GraphQL shows it (docs/concepts/audit.md)."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.actors import ActorKind
from app.domain.agents import Role
from app.domain.errors import ValidationFailed
from app.graphql.context import Info
from app.graphql.ids import parse_global_id, to_global_id
from app.graphql.types.node import NODE_ID, Connection, Node, keyset_connection
from app.graphql.types.versions import Actor
from app.services import audit
from app.services.reads import PageRequest

MAX_ACTION_CHARS = 40


@strawberry.type(
    name="AuditEvent", description="One change, who made it, and its place in the workspace's hash chain."
)
class AuditEvent(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    seq: int = strawberry.field(
        description="1, 2, ... per workspace, in the order events were sealed (soon after commit)."
    )
    at: datetime = strawberry.field(description="When the change was made.")
    action: str = strawberry.field(description="Dotted: agent.update, token.revoke, run.cancel, ...")
    object_type: str = strawberry.field(description="The changed object's type: Agent, ApiToken, Run, ...")
    object_id: strawberry.ID | None = strawberry.field(description="The changed object's global id.")
    summary: str = strawberry.field(description="The change in one line, for people.")
    diff: JSON | None = strawberry.field(
        description="{field: {before, after}} of the changed fields, credential-like values redacted."
    )
    hash: str = strawberry.field(
        description="This event's hash over its content and prevHash: docs/concepts/audit.md."
    )
    prev_hash: str = strawberry.field(
        description="The hash of the workspace's previous event, chaining them: a changed or removed event breaks the chain."
    )
    row: strawberry.Private[orm.AuditEvent]

    @classmethod
    def from_row(cls, row: orm.AuditEvent) -> AuditEvent:
        # Only sealed events are listed or served by id (``services.audit``).
        assert row.seq is not None and row.hash is not None and row.prev_hash is not None
        object_id = (
            None if row.object_id is None else strawberry.ID(to_global_id(row.object_type, row.object_id))
        )
        return cls(
            id=strawberry.ID(to_global_id("AuditEvent", row.id)),
            seq=row.seq,
            at=row.at,
            action=row.action,
            object_type=row.object_type,
            object_id=object_id,
            summary=row.summary,
            diff=row.diff,
            hash=row.hash,
            prev_hash=row.prev_hash,
            row=row,
        )

    @strawberry.field(description="Who made the change.")
    async def actor(self, info: Info) -> Actor | None:
        row = self.row
        return await Actor.of(info, {"kind": row.actor_kind, "id": row.actor_id, "name": row.actor_name})


@strawberry.type(name="AuditEventConnection", description="A page of audit events (Relay cursor connection).")
class AuditEventConnection(Connection[AuditEvent]):
    pass


async def audit_connection(
    info: Info,
    *,
    page: PageRequest,
    action: str | None,
    object_id: strawberry.ID | None,
    actor_kind: ActorKind | None,
    since: datetime | None,
) -> AuditEventConnection:
    principal = await info.context.principal()
    principal.require(Role.OPERATOR)
    if action is not None and len(action) > MAX_ACTION_CHARS:
        raise ValidationFailed(f"action is longer than {MAX_ACTION_CHARS} characters", field="action")
    object_type = object_pk = None
    if object_id is not None:
        parsed = parse_global_id(object_id)
        if parsed is None:
            raise ValidationFailed("objectId is not an id this API gave out", field="objectId")
        object_type, object_pk = parsed
    if since is not None and since.tzinfo is None:
        raise ValidationFailed("since needs a time zone (e.g. ...Z)", field="since")
    found = audit.AuditFilter(
        action=action, object_type=object_type, object_id=object_pk, actor_kind=actor_kind, since=since
    )
    runtime = info.context.runtime
    await audit.seal(runtime.sessionmaker, workspace_id=principal.workspace_id)
    stmt = audit.events_query(principal.workspace_id, found)
    # Read after the seal's commit, in a session of its own: the request's snapshot
    # (docs/graphql/guide.md#one-snapshot-per-query) may have been taken before it.
    return await keyset_connection(
        info, AuditEventConnection, stmt, page, AuditEvent.from_row, id_column=orm.AuditEvent.id,
        sessions=runtime.read_sessionmaker,
    )  # fmt: skip
