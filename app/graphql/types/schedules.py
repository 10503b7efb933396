"""Schedule: an agent started on a cron expression."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from app.db import orm
from app.domain.agents import OverlapPolicy
from app.domain.errors import NotFound
from app.graphql.context import Info
from app.graphql.ids import to_global_id
from app.graphql.types.agents import Agent
from app.graphql.types.node import Node


@strawberry.type(name="Schedule")
class Schedule(Node):
    id: strawberry.ID
    cron: str
    timezone: str = strawberry.field(description="IANA name; the cron expression is read in this timezone.")
    input: JSON | None
    enabled: bool
    overlap_policy: OverlapPolicy = strawberry.field(
        description="SKIP: do not start while the previous run of this schedule is still going."
    )
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    created_at: datetime
    updated_at: datetime
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
            next_fire_at=row.next_fire_at,
            last_fired_at=row.last_fired_at,
            created_at=row.created_at,
            updated_at=row.updated_at,
            row=row,
        )

    @strawberry.field
    async def agent(self, info: Info) -> Agent:
        row = await (await info.context.loaders()).agent.load(self.row.agent_id)
        if row is None:
            raise NotFound("this schedule's agent is gone")
        return Agent.from_row(row)
