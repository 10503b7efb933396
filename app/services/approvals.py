"""Operators decide paused tool calls (docs/concepts/approvals.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import jsonschema
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.orm import Approval, Run
from app.db.session import retry_deadlocks
from app.domain.actors import SYSTEM, Actor
from app.domain.agents import Role
from app.domain.approvals import (
    ApprovalDecision,
    ApprovalEventType,
    ApprovalScope,
    DecisionAsk,
    approval_event_type,
    expiry_reason,
)
from app.domain.errors import CredentialRejected, InvalidTransition, NotFound, ValidationFailed
from app.domain.jsonvalue import NotStorable, strict_json
from app.domain.model_errors import ModelErrorCode, error_code
from app.domain.planner import Action, Call, Limits, ToolInfo, plan_call
from app.domain.policy import RiskClass, live_chain, parse_chain
from app.domain.runs import TERMINAL_RUN, ApprovalStatus, RunStatus
from app.events.hub import HubStopped, Resync, Subscription
from app.services import audit, tool_catalog
from app.services.auth import Principal
from app.services.memory_injection import current_policies
from app.services.runtime import Runtime
from app.services.transitions import TreeTx, tree_tx


async def decide_approval(
    rt: Runtime, principal: Principal, *, approval_id: int, ask: DecisionAsk
) -> Approval:
    """Decide a pending approval (``app.domain.approvals`` says what each decision does).
    Deciding twice, or after the run ended, is an INVALID_TRANSITION; an EDIT whose arguments
    do not validate, or that the policy would now DENY, is a VALIDATION_FAILED (a secret in a
    ``memory.remember`` edit: CREDENTIAL_REJECTED), and nothing is decided."""
    principal.require(Role.OPERATOR)
    async with rt.sessionmaker() as session:
        found = await session.scalar(
            select(Approval.run_id).where(
                Approval.id == approval_id, Approval.workspace_id == principal.workspace_id
            )
        )
    if found is None:
        raise NotFound("approval not found", field="id")
    initial = ask.read()

    async def decide_once() -> Approval:
        request = initial
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
            if request.decision is ApprovalDecision.EDIT:
                checked = await _checked_edit(rt, tx.session, run, approval.tool, request.arguments)
                request = dataclasses.replace(request, arguments=checked)
            elif request.decision is ApprovalDecision.RESPOND:
                request = dataclasses.replace(request, response=_checked_response(rt, request.response))
            original = approval.arguments
            await tx.decide_approval(run, approval, request, actor=principal.actor)
            also = await _approve_rest_of_run(tx, run, approval) if request.scope is ApprovalScope.RUN else []
            await tx.wake_if_unblocked(run)
            diff: dict[str, Any] = {
                "status": {"before": "PENDING", "after": approval.status},
                "decision": {"before": None, "after": request.decision.value},
                "scope": {"before": None, "after": request.scope.value},
                "reason": {"before": None, "after": request.reason},
            }
            if request.decision is ApprovalDecision.EDIT:
                diff["arguments"] = {"before": original, "after": request.arguments}
            if request.decision is ApprovalDecision.RESPOND:
                diff["response"] = {"before": None, "after": request.response}
            await _audit(tx, run, approval, principal.actor, diff)
            for other in also:
                await audit_approved_for_run(tx, run, other)
        return approval

    # Lock conflicts retried (docs/architecture.md#lock-order): the decision's events and
    # the run's wake-up go out after commit.
    return await retry_deadlocks(decide_once)


async def _checked_edit(rt: Runtime, session: AsyncSession, run: Run, tool: str, arguments: Any) -> Any:
    """The edited arguments as they will be stored, after the checks the model's own call
    went through: storable JSON, the tool's schema, the credential guard, and the policy
    decided again on the run's live chain (a tightening since the request counts)."""
    specs = await tool_catalog.registered_specs(rt)
    spec = specs.get(tool)
    chain = live_chain(parse_chain(run.policy_chain), await current_policies(session, run.policy_chain))
    settings = rt.settings
    plan = plan_call(
        Call(tool, arguments),
        tools={
            tool: ToolInfo(risk=spec.risk if spec is not None else RiskClass.EXTERNAL_WRITE, offered=True)
        },
        chain=chain,
        limits=Limits(
            max_turns=1, max_value_bytes=settings.max_result_bytes, max_json_depth=settings.max_json_depth
        ),
    )
    if plan.action is Action.REFUSE:
        if error_code(plan.result) == ModelErrorCode.CREDENTIAL_REJECTED:
            raise CredentialRejected(f"the edited arguments: {plan.reason}", field="arguments")
        raise ValidationFailed(f"the edited arguments: {plan.reason}", field="arguments")
    if plan.action is Action.DENY:
        raise ValidationFailed(f"the policy denies this call now: {plan.reason}", field="arguments")
    if spec is not None:
        validator = jsonschema.validators.validator_for(spec.parameters)(spec.parameters)
        error = jsonschema.exceptions.best_match(validator.iter_errors(plan.args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            raise ValidationFailed(
                f"the edited arguments: {where}: {error.message}"[:1_000], field="arguments"
            )
    return plan.args


def _checked_response(rt: Runtime, response: Any) -> Any:
    """A RESPOND's response becomes the step's result: held to a tool result's limits."""
    settings = rt.settings
    try:
        return strict_json(
            {"response": response}, max_bytes=settings.max_result_bytes,
            max_depth=settings.max_json_depth, what="the response",
        )["response"]  # fmt: skip
    except NotStorable as exc:
        raise ValidationFailed(exc.message, field="response") from None


async def _approve_rest_of_run(tx: TreeTx, run: Run, standing: Approval) -> list[Approval]:
    """``scope: RUN``: the run's other pending calls of the same tool are approved too (its
    later ones are, when they are asked: ``TreeTx.request_approval``). This run's only."""
    others = list(
        await tx.session.scalars(
            select(Approval)
            .where(Approval.run_id == run.id, Approval.tool == standing.tool,
                   Approval.status == ApprovalStatus.PENDING.value, Approval.id != standing.id)
            .order_by(Approval.id)
            .with_for_update()
        )
    )  # fmt: skip
    for other in others:
        await tx.approve_for_run(run, other, standing)
    return others


async def audit_approved_for_run(tx: TreeTx, run: Run, approval: Approval) -> None:
    """The audit event of a call approved by a standing ``scope: RUN`` decision, with the
    actor who made that decision."""
    actor = Actor.from_json(approval.decided_by) or SYSTEM
    diff = {"status": {"before": "PENDING", "after": approval.status}, "decision": {"before": None, "after": "APPROVE"},
            "scope": {"before": None, "after": "RUN"}, "reason": {"before": None, "after": approval.reason}}  # fmt: skip
    await _audit(tx, run, approval, actor, diff)


async def _audit(tx: TreeTx, run: Run, approval: Approval, actor: Actor, diff: dict[str, Any]) -> None:
    verb = (approval.decision or approval.status).lower()
    await audit.append(
        tx.session, workspace_id=run.workspace_id, actor=actor, action="approval.decide",
        object_type="Approval", object_id=approval.id, summary=f"{verb} {approval.tool} of run {run.id}",
        diff=diff, at=tx.now,
    )  # fmt: skip


async def expire_overdue(rt: Runtime, approval_ids: list[int]) -> int:
    """Approvals past their deadline (found by the sweeper) become EXPIRED, each call
    rejected with that reason; re-checked under the tree's lock."""
    expired = 0
    for approval_id, run_id in await _runs_of(rt, approval_ids):
        async with tree_tx(rt, run_id) as tx:
            run = await tx.run(run_id)
            approval = await tx.session.scalar(
                select(Approval).where(Approval.id == approval_id).with_for_update()
            )
            if approval is None or approval.status != ApprovalStatus.PENDING or approval.expires_at is None:
                continue
            if approval.expires_at > tx.now or RunStatus(run.status) in TERMINAL_RUN:
                continue
            await tx.expire_approval(
                run, approval, reason=expiry_reason(approval.requested_at, approval.expires_at)
            )
            await tx.wake_if_unblocked(run)
            diff = {"status": {"before": "PENDING", "after": approval.status},
                    "reason": {"before": None, "after": approval.reason}}  # fmt: skip
            await _audit(tx, run, approval, SYSTEM, diff)
            expired += 1
    return expired


async def _runs_of(rt: Runtime, approval_ids: list[int]) -> list[tuple[int, int]]:
    if not approval_ids:
        return []
    async with rt.read_sessionmaker() as session:
        rows = await session.execute(
            select(Approval.id, Approval.run_id).where(Approval.id.in_(approval_ids)).order_by(Approval.id)
        )
        return [(a, r) for a, r in rows]


# -- approvalEvents ---------------------------------------------------------------------

# After a hole in live delivery at most this many pending approvals are sent again.
RESYNC_PENDING_MAX = 500


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalNews:
    type: ApprovalEventType
    at: datetime
    approval: Approval


async def approval_news(
    read_sessionmaker: async_sessionmaker[AsyncSession], live: Subscription, *, workspace_id: int
) -> AsyncIterator[ApprovalNews]:
    """The workspace's approval events as they happen (docs/concepts/approvals.md), each with
    the approval as it is now. Live only, no replay: after a hole in delivery (Redis lost and
    regained) every approval still pending is sent again as REQUESTED, so an inbox that
    missed some is whole again. Ends when the hub stops; ``SubscriberTooSlow`` goes through."""
    while True:
        try:
            item = await live.get()
        except HubStopped:
            return
        if item is None:
            continue
        if isinstance(item, Resync):
            async with read_sessionmaker() as session:
                pending = await session.scalars(
                    select(Approval)
                    .where(
                        Approval.workspace_id == workspace_id, Approval.status == ApprovalStatus.PENDING.value
                    )
                    .order_by(Approval.id)
                    .limit(RESYNC_PENDING_MAX)
                )
                rows = list(pending)
            for row in rows:
                yield ApprovalNews(ApprovalEventType.REQUESTED, row.requested_at, row)
            continue
        payload = item.payload if isinstance(item.payload, dict) else {}
        kind = approval_event_type(item.type, payload.get("status"))
        if kind is None or item.step_id is None:
            continue
        async with read_sessionmaker() as session:
            found = await session.scalar(
                select(Approval).where(
                    Approval.workspace_id == workspace_id, Approval.step_id == item.step_id
                )
            )
        if found is not None:
            if item.payload_omitted and kind is not ApprovalEventType.REQUESTED:
                kind = approval_event_type(item.type, found.status) or kind
            yield ApprovalNews(kind, item.at, found)
