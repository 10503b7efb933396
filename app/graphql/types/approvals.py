"""Approval: a tool call paused until an operator decides."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.errors import NotFound
from app.domain.runs import ApprovalStatus
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.node import Connection, Node, keyset_connection
from app.graphql.types.runs import Run, RunStep
from app.services import reads
from app.services.reads import PageRequest

if TYPE_CHECKING:
    from app.graphql.types.versions import Actor


@strawberry.type(name="Approval")
class Approval(Node):
    id: strawberry.ID
    tool: str
    arguments: JSON | None
    status: ApprovalStatus
    reason: str | None = strawberry.field(description="The operator's reason for the decision.")
    requested_at: datetime
    decided_at: datetime | None
    row: strawberry.Private[orm.Approval]

    @classmethod
    def from_row(cls, row: orm.Approval) -> Approval:
        return cls(
            id=strawberry.ID(to_global_id("Approval", row.id)),
            tool=row.tool,
            arguments=row.arguments,
            status=ApprovalStatus(row.status),
            reason=row.reason,
            requested_at=row.requested_at,
            decided_at=row.decided_at,
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

    @strawberry.field
    async def run(self, info: Info) -> Run:
        row = await (await info.context.loaders()).run.load(self.row.run_id)
        if row is None:
            raise NotFound("this approval's run is gone")
        return Run.from_row(row)

    @strawberry.field
    async def step(self, info: Info) -> RunStep:
        row = await (await info.context.loaders()).step.load(self.row.step_id)
        if row is None:
            raise NotFound("this approval's step is gone")
        return RunStep.from_row(row)


@strawberry.type(name="ApprovalConnection")
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
