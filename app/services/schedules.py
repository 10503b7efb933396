"""Schedule CRUD (operators). Firing is the worker's job; here we keep ``next_fire_at``
right: computed from the cron expression in the schedule's own timezone (so "9 every
morning" follows daylight saving time) and stored in UTC. A disabled schedule has no next
fire time; enabling it computes one from now, so a paused schedule never fires a backlog.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import orm
from app.db.session import retry_deadlocks
from app.domain import input_schema
from app.domain.agents import AgentStatus, OverlapPolicy, Role
from app.domain.audit import diff as audit_diff
from app.domain.budgets import parse_budget
from app.domain.errors import ValidationFailed
from app.domain.schedules import next_fire_at
from app.services import audit
from app.services.auth import Principal
from app.services.reads import get_owned
from app.services.runtime import Runtime
from app.services.transitions.usage import check_budget
from app.services.validation import KEEP, Keep, check_json_size

MAX_CRON_CHARS = 100
DEFAULT_TIMEZONE = "UTC"
MAX_CONCURRENT_RUNS = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleDraft:
    cron: str
    timezone: str | None = None
    input: Any = None
    enabled: bool | None = None
    overlap_policy: OverlapPolicy | None = None
    budget: Any = None  # tightens the agent's for each run (docs/concepts/budgets.md)
    max_concurrent_runs: int | None = None  # overlap ALLOW: unfinished runs at most


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulePatch:
    cron: str | Keep = KEEP
    timezone: str | Keep = KEEP
    input: Any = KEEP
    enabled: bool | Keep = KEEP
    overlap_policy: OverlapPolicy | Keep = KEEP
    budget: Any = KEEP  # None clears it
    max_concurrent_runs: int | Keep | None = KEEP  # None: the default


def check_max_concurrent_runs(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= MAX_CONCURRENT_RUNS:
        raise ValidationFailed(
            f"maxConcurrentRuns must be between 1 and {MAX_CONCURRENT_RUNS}", field="maxConcurrentRuns"
        )
    return value


def check_schedule_budget(rt: Runtime, agent: orm.Agent, budget: Any) -> dict[str, float] | None:
    """A schedule's budget: valid, and tighter than its agent's (``VALIDATION_FAILED`` naming
    ``budget.<key>`` otherwise). Checked again when it fires: the agent may have changed."""
    if budget is None:
        return None
    checked = parse_budget(budget)
    check_budget(rt.settings, agent_name=agent.name, agent_budget=agent.budget or {}, model=agent.model,
                 tighter=checked, tighter_by="the schedule")  # fmt: skip
    return checked


def check_cron(expr: str) -> str:
    expr = expr.strip()
    # Five fields (minute precision) or a nickname like @hourly. croniter would also take a
    # sixth (seconds) field; a per-second schedule is a denial of service on the queue.
    fields = expr.split()
    if len(expr) > MAX_CRON_CHARS or not (len(fields) == 5 or (len(fields) == 1 and expr.startswith("@"))):
        raise ValidationFailed(
            "cron must be a 5-field cron expression (or @hourly, @daily, ...)", field="cron"
        )
    if not croniter.is_valid(expr):
        raise ValidationFailed(f"{expr!r} is not a valid cron expression", field="cron")
    # Valid syntax can still name a date that never comes (``0 0 30 2 *``: February 30th);
    # croniter only finds out when asked for the next time, and that must not happen first
    # inside a write transaction (or on an enabled schedule, as an internal error).
    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise ValidationFailed(f"{expr!r} never fires: no date matches it", field="cron") from None
    return expr


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(
            f"unknown timezone {name!r}; use an IANA name like Europe/Berlin", field="timezone"
        ) from None
    return name


def check_input(value: Any, *, max_chars: int, max_depth: int) -> Any:
    """The run input of every firing: a JSON object (or null for none)."""
    if value is not None and not isinstance(value, dict):
        raise ValidationFailed("input must be a JSON object (or null)", field="input")
    return check_json_size(value, field="input", max_chars=max_chars, max_depth=max_depth)


async def create_schedule(
    rt: Runtime, principal: Principal, *, agent_id: int, draft: ScheduleDraft
) -> orm.Schedule:
    principal.require(Role.OPERATOR)
    cron = check_cron(draft.cron)
    timezone = check_timezone(draft.timezone or DEFAULT_TIMEZONE)
    run_input = check_input(
        draft.input, max_chars=rt.settings.max_text_chars, max_depth=rt.settings.max_json_depth
    )
    enabled = True if draft.enabled is None else draft.enabled
    max_concurrent = check_max_concurrent_runs(draft.max_concurrent_runs)
    now = utcnow()

    async def write() -> orm.Schedule:
        async with rt.sessionmaker() as session, session.begin():
            # Locked: two creates at the same moment cannot both take the agent's last schedule.
            agent = await get_owned(
                session, orm.Agent, workspace_id=principal.workspace_id, pk=agent_id, lock=True
            )
            if agent.status == AgentStatus.ARCHIVED:
                raise ValidationFailed(
                    f"agent {agent.name!r} is ARCHIVED: it cannot be scheduled", field="agentId"
                )
            budget = check_schedule_budget(rt, agent, draft.budget)
            cap = rt.settings.max_schedules_per_agent
            count = await session.scalar(
                select(func.count()).select_from(orm.Schedule).where(orm.Schedule.agent_id == agent.id)
            )
            if (count or 0) >= cap:
                raise ValidationFailed(
                    f"agent {agent.name!r} already has {count} schedules (ENVERIF_MAX_SCHEDULES_PER_AGENT {cap})",
                    field="agentId",
                )
            input_schema.check_input(agent.input_schema, run_input)
            row = orm.Schedule(
                workspace_id=principal.workspace_id,
                agent_id=agent.id,
                cron=cron,
                timezone=timezone,
                input=run_input,
                enabled=enabled,
                overlap_policy=(draft.overlap_policy or OverlapPolicy.SKIP).value,
                budget=budget,
                max_concurrent_runs=max_concurrent,
                next_fire_at=next_fire_at(cron, timezone, after=now) if enabled else None,
                last_fired_at=None,
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            await session.flush()
            await _audit(
                session, principal, row, "schedule.create", {}, f"scheduled agent {agent.name!r}", at=now
            )
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


async def update_schedule(
    rt: Runtime, principal: Principal, *, schedule_id: int, patch: SchedulePatch
) -> orm.Schedule:
    principal.require(Role.OPERATOR)
    cron = None if isinstance(patch.cron, Keep) else check_cron(patch.cron)
    timezone = None if isinstance(patch.timezone, Keep) else check_timezone(patch.timezone)
    if patch.input is not KEEP:
        check_input(patch.input, max_chars=rt.settings.max_text_chars, max_depth=rt.settings.max_json_depth)
    if not isinstance(patch.max_concurrent_runs, Keep):
        check_max_concurrent_runs(patch.max_concurrent_runs)
    now = utcnow()

    async def write() -> orm.Schedule:
        async with rt.sessionmaker() as session, session.begin():
            row = await get_owned(session, orm.Schedule, workspace_id=principal.workspace_id, pk=schedule_id)
            before = _audited(row)
            timing_changed = False
            if cron is not None and cron != row.cron:
                row.cron, timing_changed = cron, True
            if timezone is not None and timezone != row.timezone:
                row.timezone, timing_changed = timezone, True
            if not isinstance(patch.enabled, Keep) and patch.enabled != row.enabled:
                row.enabled, timing_changed = patch.enabled, True
            if patch.input is not KEEP:
                agent = await get_owned(
                    session, orm.Agent, workspace_id=principal.workspace_id, pk=row.agent_id
                )
                input_schema.check_input(agent.input_schema, patch.input)
                row.input = patch.input
            if not isinstance(patch.overlap_policy, Keep):
                row.overlap_policy = patch.overlap_policy.value
            if patch.budget is not KEEP:
                agent = await session.get_one(orm.Agent, row.agent_id)
                row.budget = check_schedule_budget(rt, agent, patch.budget)
            if not isinstance(patch.max_concurrent_runs, Keep):
                row.max_concurrent_runs = patch.max_concurrent_runs
            if timing_changed:
                row.next_fire_at = next_fire_at(row.cron, row.timezone, after=now) if row.enabled else None
            row.updated_at = now
            await _audit(
                session, principal, row, "schedule.update", before, f"updated schedule {row.id}", at=now
            )
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


async def delete_schedule(rt: Runtime, principal: Principal, *, schedule_id: int) -> orm.Schedule:
    """Deletes the schedule; returns the row as it was (its ``agent_id`` for the answer)."""
    principal.require(Role.OPERATOR)

    async def write() -> orm.Schedule:
        async with rt.sessionmaker() as session, session.begin():
            row = await get_owned(session, orm.Schedule, workspace_id=principal.workspace_id, pk=schedule_id)
            before = _audited(row)
            await session.delete(row)
            await audit.append(
                session, workspace_id=principal.workspace_id, actor=principal.actor, action="schedule.delete",
                object_type="Schedule", object_id=schedule_id, summary=f"deleted schedule {schedule_id}",
                diff=audit_diff(before, {}),
            )  # fmt: skip
        return row

    # Lock conflicts retried (docs/architecture.md#lock-order): nothing is sent before commit.
    return await retry_deadlocks(write)


def _audited(row: orm.Schedule) -> dict[str, Any]:
    return {"agent_id": row.agent_id, "cron": row.cron, "timezone": row.timezone, "input": row.input,
            "enabled": row.enabled, "overlap_policy": row.overlap_policy, "budget": row.budget,
            "max_concurrent_runs": row.max_concurrent_runs}  # fmt: skip


async def _audit(
    session: AsyncSession, principal: Principal, row: orm.Schedule, action: str, before: dict[str, Any],
    summary: str, *, at: datetime,
) -> None:  # fmt: skip
    await audit.append(
        session, workspace_id=row.workspace_id, actor=principal.actor, action=action, object_type="Schedule",
        object_id=row.id, summary=summary, diff=audit_diff(before, _audited(row)), at=at,
    )  # fmt: skip
