"""Firing due schedules (docs/concepts/schedules.md): the worker's cron job and ``enverif schedules tick``.

One tick reads the schedules whose ``next_fire_at`` has come (one indexed query: that is all
it costs when nothing is due), then serves each in its own transaction:

1. lock the schedule row and check that ``next_fire_at`` is still what the tick read. This is
   the compare-and-set that makes a fire time fire once: concurrent ticks (any number of
   workers, the CLI) queue on the row lock — SQLite's ``BEGIN IMMEDIATE`` serialises them
   the same way — and every one but the first finds the time moved and does nothing;
2. work out the fire time to serve (missed ones coalesce into the latest, ``domain.schedules``)
   and whether it starts a run: not for an agent that is not ACTIVE, not under overlap
   ``SKIP`` while an earlier run of the schedule has not ended, nor under ``ALLOW`` while
   ``maxConcurrentRuns`` of them have not (docs/concepts/budgets.md#quotas), nor when the
   schedule's budget or input no longer fits the agent's current version (its budget, its
   ``inputSchema``: both were checked when the schedule was written, but the agent may have
   changed since — docs/concepts/schedules.md);
3. in the same transaction: the run (``transitions.NewTree``, the path every run takes:
   policy chain snapshot, RUN_CREATED event; memories are injected when a worker claims it),
   the firing row (unique per schedule and fire time: the database's backstop), and the
   schedule moved to its next fire time; then publish and enqueue after commit.

"Now" is the database's clock, as for leases: ticks on hosts whose clocks disagree still
agree on what is due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select, true
from sqlalchemy.exc import IntegrityError, OperationalError

from app.db.clock import db_now
from app.db.orm import Agent, Run, Schedule, ScheduleFiring, Workspace
from app.domain import input_schema
from app.domain.actors import Actor, ActorKind
from app.domain.agents import OverlapPolicy
from app.domain.errors import ValidationFailed
from app.domain.runs import TERMINAL_RUN, RunTrigger
from app.domain.schedules import DEFAULT_MAX_CONCURRENT_RUNS, FiringOutcome, due, skip_reason
from app.outages import is_outage
from app.services import audit
from app.services.runtime import Runtime
from app.services.transitions import NewRun, new_tree_tx
from app.services.transitions.usage import check_budget

log = logging.getLogger(__name__)

# Schedules served per query; a tick keeps going while whole batches come back.
BATCH = 200
_TERMINAL = [s.value for s in TERMINAL_RUN]


@dataclass(frozen=True, slots=True)
class Firing:
    schedule_id: int
    fire_at: datetime
    outcome: FiringOutcome
    missed: int
    run_id: int | None = None
    reason: str | None = None


@dataclass
class TickReport:
    firings: list[Firing] = field(default_factory=list)
    failed: int = 0  # schedules left for the next tick after a database error

    @property
    def fired(self) -> int:
        return sum(1 for f in self.firings if f.outcome == FiringOutcome.FIRED)

    @property
    def skipped(self) -> int:
        return sum(1 for f in self.firings if f.outcome == FiringOutcome.SKIPPED)


async def tick(rt: Runtime, *, batch: int = BATCH) -> TickReport:
    """Fire every schedule that is due now. Safe to run anywhere, any number of times at once."""
    report = TickReport()
    seen: set[int] = set()
    while True:
        async with rt.sessionmaker() as session:
            now = await db_now(session)
            rows = (
                await session.execute(
                    select(Schedule.id, Schedule.next_fire_at)
                    .where(
                        Schedule.next_fire_at <= now,
                        Schedule.enabled.is_(True),
                        Schedule.id.not_in(seen) if seen else true(),
                    )
                    .order_by(Schedule.next_fire_at, Schedule.id)
                    .limit(batch)
                )
            ).all()
        for schedule_id, expected in rows:
            assert expected is not None  # the column is nullable, but NULL <= now is never true
            seen.add(schedule_id)
            try:
                firing = await fire(rt, schedule_id, expected=expected)
            except OperationalError as exc:
                if is_outage(exc):
                    raise
                # A deadlock or lock wait timeout: nothing was written; the next tick retries.
                log.warning("schedule %s: not fired this tick (%s)", schedule_id, type(exc).__name__)
                report.failed += 1
                continue
            if firing is not None:
                report.firings.append(firing)
        if len(rows) < batch:
            return report


def _budget_refusal(rt: Runtime, agent: Agent, budget: dict[str, float]) -> str | None:
    """Why the schedule's budget no longer fits its agent's (changed since the schedule was
    written: it would loosen a limit, or limit the cost of an unpriced model), or None."""
    try:
        check_budget(rt.settings, agent_name=agent.name, agent_budget=agent.budget or {}, model=agent.model,
                     tighter=budget, tighter_by="the schedule")  # fmt: skip
    except ValidationFailed as exc:
        return f"the schedule's budget: {exc}"
    return None


def _input_refusal(agent: Agent, run_input: object) -> str | None:
    """Why the schedule's input no longer matches its agent's ``inputSchema`` (a version
    written since the schedule was: ``startRun`` would refuse the same input), or None. The
    reason ends with the path and the error, as ``startRun``'s VALIDATION_FAILED words them."""
    try:
        input_schema.check_input(agent.input_schema, run_input)
    except ValidationFailed as exc:
        return (
            f"the schedule's input no longer matches agent {agent.name!r}'s inputSchema "
            f"(version {agent.version}): {exc.message}"
        )
    return None


async def fire(rt: Runtime, schedule_id: int, *, expected: datetime) -> Firing | None:
    """Serve the schedule's due fire time if ``next_fire_at`` is still ``expected``; None when
    another tick served it first, or it is no longer due (disabled, rescheduled, deleted)."""
    try:
        async with new_tree_tx(rt) as tree:
            session = tree.session
            schedule = await session.scalar(
                select(Schedule).where(Schedule.id == schedule_id).with_for_update()
            )
            if schedule is None or not schedule.enabled or schedule.next_fire_at is None:
                return None
            if schedule.next_fire_at != expected:
                return None  # served by another tick meanwhile, or changed by an operator
            now = await tree.clock()
            when = due(schedule.cron, schedule.timezone, next_at=schedule.next_fire_at, now=now)
            if when is None:
                return None
            agent = await session.get_one(Agent, schedule.agent_id)
            paused = await session.scalar(
                select(Workspace.paused_reason).where(Workspace.id == schedule.workspace_id)
            )
            max_concurrent = schedule.max_concurrent_runs or DEFAULT_MAX_CONCURRENT_RUNS
            unfinished = list(
                await session.scalars(
                    select(Run.status)
                    .where(Run.schedule_id == schedule.id, Run.status.not_in(_TERMINAL))
                    .order_by(Run.id)
                    .limit(max_concurrent)
                )
            )
            reason = skip_reason(
                agent_name=agent.name,
                agent_status=agent.status,
                overlap=OverlapPolicy(schedule.overlap_policy),
                unfinished=unfinished,
                workspace_paused_reason=paused,
                max_concurrent_runs=max_concurrent,
            )
            budget = schedule.budget or None
            if reason is None and budget is not None:
                reason = _budget_refusal(rt, agent, budget)
            if reason is None:
                reason = _input_refusal(agent, schedule.input)
            run = None
            if reason is None:
                new = NewRun(agent=agent, trigger=RunTrigger.SCHEDULE, input=schedule.input,
                             schedule_id=schedule.id, budget=budget, budget_by=f"schedule {schedule.id}")  # fmt: skip
                run = await tree.create_run(new)
                schedule.last_fired_at = when.fire_at
            else:
                schedule.last_skipped_at = when.fire_at
                schedule.last_skip_reason = reason
            outcome = FiringOutcome.FIRED if run is not None else FiringOutcome.SKIPPED
            session.add(
                ScheduleFiring(
                    workspace_id=schedule.workspace_id,
                    schedule_id=schedule.id,
                    fire_at=when.fire_at,
                    missed=when.missed,
                    outcome=outcome.value,
                    reason=reason,
                    run_id=None if run is None else run.id,
                    created_at=now,
                )
            )
            schedule.next_fire_at = when.next_at
            await session.flush()
            what = f"started run {run.id}" if run is not None else f"skipped: {reason}"
            await audit.append(
                session, workspace_id=schedule.workspace_id, actor=Actor(ActorKind.SCHEDULE, schedule.id),
                action="schedule.fire", object_type="Schedule", object_id=schedule.id, at=now,
                summary=f"fire time {when.fire_at.isoformat()}: {what}",
            )  # fmt: skip
    except IntegrityError:
        # The (schedule, fire time) pair was served already: only reachable if the row lock
        # above were bypassed, and then this is what keeps the fire time from firing twice.
        log.info("schedule %s: fire time already served", schedule_id)
        return None
    if when.missed:
        log.info(
            "schedule %s: %d missed fire times coalesced into %s", schedule_id, when.missed, when.fire_at
        )
    return Firing(
        schedule_id=schedule_id,
        fire_at=when.fire_at,
        outcome=outcome,
        missed=when.missed,
        run_id=None if run is None else run.id,
        reason=reason,
    )
