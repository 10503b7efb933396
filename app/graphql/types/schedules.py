"""Schedule: an agent started on a cron expression; its firings and its runs."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.agents import OverlapPolicy
from app.domain.errors import NotFound
from app.domain.schedules import DEFAULT_MAX_CONCURRENT_RUNS, FiringOutcome, next_fire_at
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types import enums as _enums  # noqa: F401  (registers the GraphQL enums)
from app.graphql.types.agents import Agent
from app.graphql.types.node import NODE_ID, Connection, Node, Paged
from app.services.reads import PageRequest

MAX_NEXT_FIRE_TIMES = 20

if TYPE_CHECKING:
    from app.graphql.types.runs import Run, RunConnection


@strawberry.type(
    name="Schedule", description="Starts runs of an agent on a cron expression: docs/concepts/schedules.md."
)
class Schedule(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    cron: str = strawberry.field(description="The cron expression it fires on, read in `timezone`.")
    timezone: str = strawberry.field(description="IANA name; the cron expression is read in this timezone.")
    input: JSON | None = strawberry.field(description="The input every run it starts gets.")
    enabled: bool = strawberry.field(description="False: it does not fire and starts no run.")
    overlap_policy: OverlapPolicy = strawberry.field(
        description="SKIP: do not start while the previous run of this schedule is still going."
    )
    budget: JSON | None = strawberry.field(
        description="What tightens the agent's budget for every run it starts (docs/concepts/budgets.md)."
    )
    max_concurrent_runs: int = strawberry.field(
        description="Overlap ALLOW: a fire time starts no run while this many of its runs have not ended."
    )
    next_fire_at: datetime | None = strawberry.field(
        description="The next time it fires; null while disabled."
    )
    last_fired_at: datetime | None = strawberry.field(
        description="The last fire time that started a run (missed fire times coalesce into one)."
    )
    last_skipped_at: datetime | None = strawberry.field(
        description="The last fire time that started no run; lastSkipReason says why."
    )
    last_skip_reason: str | None = strawberry.field(
        description="Why the last skipped fire time started no run (lastSkippedAt)."
    )
    created_at: datetime = strawberry.field(description="When it was created.")
    updated_at: datetime = strawberry.field(description="When it was last changed.")
    row: strawberry.Private[orm.Schedule]

    @classmethod
    def from_row(cls, row: orm.Schedule) -> Schedule:
        return cls(
            id=strawberry.ID(to_global_id("Schedule", row.id)),
            cron=row.cron,
            timezone=row.timezone,
            input=row.input,
            enabled=row.enabled,
            overlap_policy=OverlapPolicy(row.overlap_policy),
            budget=row.budget,
            max_concurrent_runs=row.max_concurrent_runs or DEFAULT_MAX_CONCURRENT_RUNS,
            next_fire_at=row.next_fire_at,
            last_fired_at=row.last_fired_at,
            last_skipped_at=row.last_skipped_at,
            last_skip_reason=row.last_skip_reason,
            created_at=row.created_at,
            updated_at=row.updated_at,
            row=row,
        )

    @strawberry.field(description="The agent it starts.")
    async def agent(self, info: Info) -> Agent:
        row = await (await info.context.loaders()).agent.load(self.row.agent_id)
        if row is None:
            raise NotFound("this schedule's agent is gone")
        return Agent.from_row(row)

    @strawberry.field(
        description="The next `count` fire times (at most 20), from nextFireAt on; empty while disabled."
    )
    def next_fire_times(
        self,
        count: Annotated[
            int, strawberry.argument(description="How many fire times to list (clamped to 1..20).")
        ] = 5,
    ) -> list[datetime]:
        if not self.enabled or self.next_fire_at is None:
            return []
        times = [self.next_fire_at]
        while len(times) < max(1, min(count, MAX_NEXT_FIRE_TIMES)):
            times.append(next_fire_at(self.cron, self.timezone, after=times[-1]))
        return times

    @strawberry.field(description="The runs this schedule started, newest first.", extensions=[Paged()])
    async def runs(
        self, info: Info, page: PageRequest
    ) -> Annotated[RunConnection, strawberry.lazy("app.graphql.types.runs")]:
        from app.graphql.types.runs import Run, RunConnection  # circular: Run.schedule

        loaders = await info.context.loaders()
        return await loaders.schedule_runs.connection(RunConnection, self.row.id, page, None, Run.from_row)

    @strawberry.field(
        description="Every fire time served, newest first: the run it started or why it skipped.",
        extensions=[Paged()],
    )
    async def firings(self, info: Info, page: PageRequest) -> ScheduleFiringConnection:
        loaders = await info.context.loaders()
        return await loaders.schedule_firings.connection(
            ScheduleFiringConnection, self.row.id, page, None, ScheduleFiring.from_row
        )


@strawberry.type(name="ScheduleFiring", description="One fire time of a schedule, as a tick served it.")
class ScheduleFiring(Node):
    id: strawberry.ID = strawberry.field(description=NODE_ID)
    fire_at: datetime = strawberry.field(
        description="The fire time served (the latest, when earlier ones were coalesced)."
    )
    missed: int = strawberry.field(
        description="Earlier fire times coalesced into this one (workers were down or late)."
    )
    outcome: FiringOutcome = strawberry.field(
        description="Whether it started a run (FIRED) or not (SKIPPED, with the reason)."
    )
    reason: str | None = strawberry.field(description="Why no run was started (SKIPPED).")
    created_at: datetime = strawberry.field(description="When a scheduler tick served it.")
    row: strawberry.Private[orm.ScheduleFiring]

    @classmethod
    def from_row(cls, row: orm.ScheduleFiring) -> ScheduleFiring:
        return cls(
            id=strawberry.ID(to_global_id("ScheduleFiring", row.id)),
            fire_at=row.fire_at,
            missed=row.missed,
            outcome=FiringOutcome(row.outcome),
            reason=row.reason,
            created_at=row.created_at,
            row=row,
        )

    @strawberry.field(description="The run started (FIRED); null when skipped or since deleted.")
    async def run(self, info: Info) -> Annotated[Run, strawberry.lazy("app.graphql.types.runs")] | None:
        from app.graphql.types.runs import Run  # circular: Run.schedule

        if self.row.run_id is None:
            return None
        row = await (await info.context.loaders()).run.load(self.row.run_id)
        return None if row is None else Run.from_row(row)


@strawberry.type(
    name="ScheduleFiringConnection", description="A page of schedule firings (Relay cursor connection)."
)
class ScheduleFiringConnection(Connection[ScheduleFiring]):
    pass
