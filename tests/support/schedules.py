"""Schedule helpers: create through GraphQL, let time pass, tick through the real CLI."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.orm import Schedule, ScheduleFiring
from app.domain.schedules import next_fire_at
from app.settings import Settings
from tests.support.cli import run_enverif
from tests.support.graphql import pk
from tests.support.workers import ENVERIF, worker_env

SCHEDULE_FIELDS = """id cron timezone input enabled overlapPolicy nextFireAt lastFiredAt
  lastSkippedAt lastSkipReason"""
CREATE_SCHEDULE = f"""mutation($agentId: ID!, $input: ScheduleInput!) {{
  createSchedule(agentId: $agentId, input: $input) {{ {SCHEDULE_FIELDS} }} }}"""
SCHEDULE = f"""query($id: ID!) {{ node(id: $id) {{ ... on Schedule {{ {SCHEDULE_FIELDS}
  runs(first: 20) {{ edges {{ node {{ id status trigger input }} }} }}
  firings(first: 20) {{ edges {{ node {{ fireAt missed outcome reason run {{ id }} }} }} }}
}} }} }}"""


async def create_schedule(gql: Any, token: str, agent_id: str, **fields: Any) -> dict[str, Any]:
    data = await gql.ok(CREATE_SCHEDULE, {"agentId": agent_id, "input": fields}, token=token)
    schedule: dict[str, Any] = data["createSchedule"]
    return schedule


async def get_schedule(gql: Any, token: str, schedule_id: str) -> dict[str, Any]:
    node: dict[str, Any] = (await gql.ok(SCHEDULE, {"id": schedule_id}, token=token))["node"]
    node["runs"] = [e["node"] for e in node["runs"]["edges"]]
    node["firings"] = [e["node"] for e in node["firings"]["edges"]]
    return node


async def make_due(
    sessionmaker: async_sessionmaker[AsyncSession], schedule: dict[str, Any], *, ago: timedelta
) -> datetime:
    """Let time pass: move the schedule's next fire time to the first one after ``ago`` ago,
    as if the clock had moved on since it was computed. Returns that fire time.

    The fire times it already served move a week back with it (their firing rows), so that
    a schedule served a moment ago can be due again without waiting for its next fire time:
    a tick serves the latest fire time before now, which would otherwise be the same one."""
    fire = next_fire_at(schedule["cron"], schedule["timezone"], after=datetime.now(UTC) - ago)
    assert fire <= datetime.now(UTC), "pick an `ago` longer than the cron's period"
    schedule_id = pk(schedule["id"])
    async with sessionmaker() as session, session.begin():
        served = select(ScheduleFiring).where(ScheduleFiring.schedule_id == schedule_id)
        for firing in await session.scalars(served):
            firing.fire_at -= timedelta(weeks=1)
        await session.execute(update(Schedule).where(Schedule.id == schedule_id).values(next_fire_at=fire))
    return fire


def tick_command(settings: Settings) -> tuple[list[str], dict[str, str]]:
    return [ENVERIF, "schedules", "tick", "--json"], worker_env(settings)


async def tick_cli(settings: Settings) -> dict[str, Any]:
    """``enverif schedules tick --json`` in its own process."""
    (result,) = await tick_many(settings, 1)
    return result


async def tick_many(settings: Settings, n: int) -> list[dict[str, Any]]:
    """``n`` tick processes started together (from the CLI fork server); each one's JSON report."""
    argv, env = tick_command(settings)
    procs = await asyncio.gather(
        *(asyncio.to_thread(run_enverif, *argv[1:], env=env, cwd=Path.cwd(), timeout_s=90) for _ in range(n))
    )
    reports = []
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
    return reports
