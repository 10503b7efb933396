"""Approval: a tool call paused until an operator decides."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.errors import NotFound
from app.domain.global_ids import object_id
from app.domain.runs import ApprovalStatus
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.enums import ApprovalDecision, ApprovalEventType, ApprovalScope, NotificationStatus
from app.graphql.types.node import NODE_ID, Connection, Node, keyset_connection
from app.graphql.types.runs import Run, RunStep
from app.services import reads
from app.services.reads import PageRequest

if TYPE_CHECKING:
    from app.graphql.types.versions import Actor


@strawberry.type(name="ApprovalNotification", description="One POST of an approval to the approvalWebhook.")
class ApprovalNotification:
    id: strawberry.ID = strawberry.field(description="Also sent as the X-Enverif-Delivery header.")
    at: datetime = strawberry.field(description="Its last attempt (when it was queued, before any).")
    status: NotificationStatus = strawberry.field(
        description="Whether it was delivered, is to be retried, or failed for good."
    )
    attempts: int = strawberry.field(description="How many times it has been POSTed so far.")
    last_error: str | None = strawberry.field(description="Why the last attempt failed (HTTP 500, ...).")
    next_at: datetime | None = strawberry.field(description="PENDING: when it is sent again.")

    @classmethod
    def from_row(cls, row: orm.ApprovalNotification) -> ApprovalNotification:
        return cls(
            id=strawberry.ID(object_id("ApprovalNotification", row.id)),
            at=row.last_attempt_at or row.created_at,
            status=NotificationStatus(row.status),
            attempts=row.attempts,
            last_error=row.last_error,
            next_at=row.next_at if row.status == NotificationStatus.PENDING else None,
        )


@strawberry.type(
    name="Approval",
    description="A tool call paused until an operator decides it (decideApproval): docs/concepts/approvals.md.",
)
class Approval(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    tool: str = strawberry.field(description="The tool the call is for.")
    arguments: JSON | None = strawberry.field(description="The arguments the model asked to call it with.")
    status: ApprovalStatus = strawberry.field(
        description="PENDING until decided or expired; see ApprovalStatus."
    )
    reason: str | None = strawberry.field(description="The operator's reason for the decision.")
    decision: ApprovalDecision | None = strawberry.field(
        description="How it was decided; null while pending, expired, or closed by its run's end."
    )
    scope: ApprovalScope | None = strawberry.field(
        description="What an approval covers: this call, or the tool's later calls in the run too; null while undecided."
    )
    response: JSON | None = strawberry.field(description="RESPOND: what the model received as {response}.")
    requested_at: datetime = strawberry.field(description="When the call asked for it.")
    decided_at: datetime | None = strawberry.field(
        description="When it was decided (or expired); null while pending."
    )
    expires_at: datetime | None = strawberry.field(
        description="When it expires undecided (the call is then rejected); null: never."
    )
    row: strawberry.Private[orm.Approval]

    @classmethod
    def from_row(cls, row: orm.Approval) -> Approval:
        return cls(
            id=strawberry.ID(to_global_id("Approval", row.id)),
            tool=row.tool,
            arguments=row.arguments,
            status=ApprovalStatus(row.status),
            reason=row.reason,
            decision=None if row.decision is None else ApprovalDecision(row.decision),
            scope=None if row.scope is None else ApprovalScope(row.scope),
            response=row.response,
            requested_at=row.requested_at,
            decided_at=row.decided_at,
            expires_at=row.expires_at,
            row=row,
        )

    @strawberry.field(
        description="Who decided it: a token or the CLI; null while pending or when its run ended."
    )
    async def decided_by(
        self, info: Info
    ) -> Annotated[Actor, strawberry.lazy("app.graphql.types.versions")] | None:
        from app.graphql.types.versions import Actor  # circular: versions import agents

        raw = self.row.decided_by
        if raw is None and self.row.decided_by_token_id is not None:  # decided before actors were kept
            raw = {"kind": "TOKEN", "id": self.row.decided_by_token_id}
        return await Actor.of(info, raw)

    @strawberry.field(
        description="Its approvalWebhook deliveries (docs/concepts/approvals.md), oldest first; "
        "empty when the workspace has no webhook."
    )
    async def notifications(self, info: Info) -> list[ApprovalNotification]:
        rows = await (await info.context.loaders()).approval_notifications.load(self.row.id)
        return [ApprovalNotification.from_row(r) for r in rows]

    @strawberry.field(description="The run whose call waits for it.")
    async def run(self, info: Info) -> Run:
        row = await (await info.context.loaders()).run.load(self.row.run_id)
        if row is None:
            raise NotFound("this approval's run is gone")
        return Run.from_row(row)

    @strawberry.field(description="The step (tool call) it is for.")
    async def step(self, info: Info) -> RunStep:
        row = await (await info.context.loaders()).step.load(self.row.step_id)
        if row is None:
            raise NotFound("this approval's step is gone")
        return RunStep.from_row(row)


@strawberry.type(
    name="ApprovalEvent", description="An approval requested, decided or expired (approvalEvents)."
)
class ApprovalEvent:
    type: ApprovalEventType = strawberry.field(
        description="Whether the approval was requested, decided or expired."
    )
    at: datetime = strawberry.field(description="When it happened.")
    approval: Approval = strawberry.field(
        description="The approval as it is now (it may have moved on since)."
    )


@strawberry.type(name="ApprovalConnection", description="A page of approvals (Relay cursor connection).")
class ApprovalConnection(Connection[Approval]):
    pass


async def approval_connection(
    info: Info,
    *,
    page: PageRequest,
    status: ApprovalStatus | None,
    run_id: int | None = None,
    agent_id: int | None = None,
) -> ApprovalConnection:
    principal = await info.context.principal()
    stmt = reads.approvals_query(principal.workspace_id, status=status, run_id=run_id, agent_id=agent_id)
    return await keyset_connection(
        info, ApprovalConnection, stmt, page, Approval.from_row, id_column=orm.Approval.id
    )
