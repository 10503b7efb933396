"""Operators decide paused tool calls."""

from __future__ import annotations

from sqlalchemy import select

from app.db.orm import Approval, RunStep
from app.domain.agents import Role
from app.domain.errors import InvalidTransition, NotFound, ValidationFailed
from app.domain.events import EventType
from app.domain.runs import TERMINAL_RUN, ApprovalStatus, RunStatus, StepStatus, check_step_transition
from app.services.auth import Principal
from app.services.runtime import Runtime
from app.services.transitions import tree_tx


def rejection_result(reason: str | None) -> dict[str, object]:
    return {"error": {"code": "REJECTED", "message": reason or "rejected by an operator"}}


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
        step = await tx.session.get_one(RunStep, approval.step_id, with_for_update=True)
        approval.status = (ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED).value
        approval.reason = reason
        approval.decided_at = tx.now
        approval.decided_by_token_id = principal.token_id
        tx.emit(
            run,
            EventType.APPROVAL_DECIDED,
            step_id=step.id,
            payload={"approvalId": approval.id, "status": approval.status, "reason": reason},
        )
        if approve:
            check_step_transition(StepStatus(step.status), StepStatus.PENDING)
            step.status = StepStatus.PENDING.value
        else:
            await tx.finish_step(run, step, StepStatus.REJECTED, result=rejection_result(reason))
        await tx.wake_if_unblocked(run)
    return approval
