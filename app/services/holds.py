"""The workspace-wide emergency stop (docs/concepts/holds.md): ``pause_workspace`` holds every
run of the workspace (queued ones are not claimed, running ones stop at their next step
boundary) and makes schedules skip; ``resume_workspace`` lets them go on."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.clock import db_now
from app.db.orm import Workspace
from app.db.session import retry_deadlocks
from app.domain.agents import Role
from app.domain.errors import InvalidTransition, NotFound
from app.domain.holds import MAX_PAUSE_REASON_CHARS
from app.events.stops import publish_stop
from app.services import audit
from app.services.auth import Principal
from app.services.runtime import Runtime
from app.services.transitions import Released, release_held
from app.services.validation import check_text


async def pause_workspace(rt: Runtime, principal: Principal, *, reason: str) -> Workspace:
    principal.require(Role.ADMIN)
    reason = check_text(reason, field="reason", max_chars=MAX_PAUSE_REASON_CHARS, allow_empty=False)

    async def pause() -> Workspace:
        async with rt.sessionmaker() as session, session.begin():
            workspace = await _locked(session, principal.workspace_id)
            if workspace.paused_at is not None:
                raise InvalidTransition(f"the workspace is already paused: {workspace.paused_reason}")
            workspace.paused_at = await db_now(session)
            workspace.paused_reason = reason
            workspace.paused_by = principal.actor.to_json()
            await audit.append(
                session, workspace_id=workspace.id, actor=principal.actor, action="workspace.pause",
                object_type="Workspace", object_id=workspace.id, summary=f"paused the workspace: {reason}",
                at=workspace.paused_at,
            )  # fmt: skip
        return workspace

    # Lock conflicts retried: a claim near the workspace's quota locks runs, then this row.
    workspace = await retry_deadlocks(pause)
    await publish_stop(rt, workspaces=[principal.workspace_id])
    return workspace


async def resume_workspace(rt: Runtime, principal: Principal) -> Workspace:
    principal.require(Role.ADMIN)

    async def resume() -> tuple[Workspace, Released]:
        async with rt.sessionmaker() as session, session.begin():
            # The held runs before the workspace's row, the order a claim takes them in (runs,
            # then workspace; docs/architecture.md#lock-order). Not paused after all: the
            # transaction rolls back and nothing was released.
            released = await release_held(session, workspace_id=principal.workspace_id)
            workspace = await _locked(session, principal.workspace_id)
            if workspace.paused_at is None:
                raise InvalidTransition("the workspace is not paused")
            workspace.paused_at = None
            workspace.paused_reason = None
            workspace.paused_by = None
            await audit.append(
                session, workspace_id=workspace.id, actor=principal.actor, action="workspace.resume",
                object_type="Workspace", object_id=workspace.id,
                summary=f"resumed the workspace ({len(released.wakeups)} held runs released)",
            )  # fmt: skip
        return workspace, released

    workspace, released = await retry_deadlocks(resume)
    await released.enqueue(rt)
    return workspace


async def _locked(session: AsyncSession, workspace_id: int) -> Workspace:
    workspace = await session.scalar(select(Workspace).where(Workspace.id == workspace_id).with_for_update())
    if workspace is None:
        raise NotFound("no such workspace")
    return workspace
