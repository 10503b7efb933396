"""Operators decide paused tool calls."""

from __future__ import annotations

from sqlalchemy import select

from app.db.orm import Approval
from app.domain.agents import Role
from app.domain.errors import InvalidTransition, NotFound, ValidationFailed
from app.domain.runs import TERMINAL_RUN, ApprovalStatus, RunStatus
from app.services import audit
from app.services.auth import Principal
from app.services.runtime import Runtime
from app.services.transitions import tree_tx


async def decide_approval(
    rt: Runtime, principal: Principal, *, approval_id: int, approve: bool, reason: str | None
) -> Approval:
    """Approve: the step goes back to PENDING and the run is requeued to execute it.
    Reject: the step is REJECTED and the model sees the rejection as the call's result.
    Deciding twice, or after the run ended, is an INVALID_TRANSITION."""
    principal.require(Role.OPERATOR)
    if reason is not None and len(reason) > 2_000:
        raise ValidationFailed("reason is longer than 2000 characters", field="reason")
    async with rt.sessionmaker() as session:
        found = await session.scalar(
            select(Approval.run_id).where(
                Approval.id == approval_id, Approval.workspace_id == principal.workspace_id
            )
        )
    if found is None:
        raise NotFound("approval not found", field="id")
    async with tree_tx(rt, found) as tx:
        run = await tx.run(found)
        approval = await tx.session.scalar(
            select(Approval).where(Approval.id == approval_id).with_for_update()
        )
        assert approval is not None
        if approval.status != ApprovalStatus.PENDING:
            raise InvalidTransition(f"approval is already {approval.status}")
        if RunStatus(run.status) in TERMINAL_RUN:
            raise InvalidTransition(f"run is {run.status}; its approvals can no longer be decided")
        await tx.decide_approval(run, approval, approve=approve, reason=reason, actor=principal.actor)
        await tx.wake_if_unblocked(run)
        verdict = "approved" if approve else "rejected"
        await audit.append(
            tx.session, workspace_id=principal.workspace_id, actor=principal.actor, action="approval.decide",
            object_type="Approval", object_id=approval.id, summary=f"{verdict} {approval.tool} of run {run.id}",
            diff={"status": {"before": "PENDING", "after": approval.status}, "reason": {"before": None, "after": reason}},
            at=tx.now,
        )  # fmt: skip
    return approval
