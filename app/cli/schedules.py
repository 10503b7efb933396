"""``enverif schedules tick`` and ``enverif schedules list --workspace W``.

``tick`` fires whatever is due now, exactly as the workers' cron job does (the database
decides: running it beside live workers, or three times at once, fires each fire time once).
It is for operations (fire now after an outage instead of at the next minute) and tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from app.cli import common
from app.graphql.ids import to_global_id


def cmd_tick(args: argparse.Namespace) -> int:
    from app.services import schedule_firing

    settings = common.settings(log=False)

    # The workers' cron job, run by hand: on the workers' terms, so the API's cap on one
    # statement does not abort a tick waiting on another tick's row lock.
    report = asyncio.run(common.with_runtime(settings, schedule_firing.tick, worker=True))
    firings = [
        {
            "schedule_id": to_global_id("Schedule", f.schedule_id),
            "fire_at": common.iso(f.fire_at),
            "outcome": f.outcome.value,
            "missed": f.missed,
            "run_id": None if f.run_id is None else to_global_id("Run", f.run_id),
            "reason": f.reason,
        }
        for f in report.firings
    ]
    if args.json:
        print(json.dumps({"fired": report.fired, "skipped": report.skipped, "firings": firings}))
        return 0
    print(f"{report.fired} fired, {report.skipped} skipped.")
    for f in firings:
        what = f"run {f['run_id']}" if f["run_id"] else f"skipped: {f['reason']}"
        missed = f" ({f['missed']} missed fire times coalesced)" if f["missed"] else ""
        print(f"  {f['schedule_id']} at {f['fire_at']}: {what}{missed}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from sqlalchemy import select
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.db.orm import Agent, Schedule
    from app.db.session import create_sessionmaker

    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> list[dict[str, Any]]:
        async with create_sessionmaker(engine)() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            rows = (
                await session.execute(
                    select(Schedule, Agent.name)
                    .join(Agent, Agent.id == Schedule.agent_id)
                    .where(Schedule.workspace_id == workspace_id)
                    .order_by(Schedule.id)
                )
            ).all()
        return [_describe(schedule, agent) for schedule, agent in rows]

    schedules = asyncio.run(common.with_engine(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, "schedules": schedules}))
        return 0
    columns = ("id", "agent", "cron", "timezone", "enabled", "overlap", "max_concurrent_runs", "budget",
               "next_fire_at", "last_fired_at")  # fmt: skip
    # The budget a schedule tightens its runs' with, as compact JSON (docs/concepts/budgets.md).
    shown = [s | {"budget": json.dumps(s["budget"], separators=(",", ":")) if s["budget"] else None}
             for s in schedules]  # fmt: skip
    common.print_rows(columns, shown, empty=f"Workspace {args.workspace!r} has no schedules.")
    for s in schedules:
        if s["last_skip_reason"]:
            print(f"{s['id']} last skipped {s['last_skipped_at']}: {s['last_skip_reason']}")
    return 0


def _describe(schedule: Any, agent: str) -> dict[str, Any]:

    return {
        "id": to_global_id("Schedule", schedule.id),
        "agent": agent,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "overlap": schedule.overlap_policy,
        # Overlap ALLOW's cap on its runs that have not ended (docs/concepts/budgets.md#quotas).
        "max_concurrent_runs": schedule.max_concurrent_runs,
        "budget": schedule.budget,
        "input": schedule.input,
        "next_fire_at": common.iso(schedule.next_fire_at),
        "last_fired_at": common.iso(schedule.last_fired_at),
        "last_skipped_at": common.iso(schedule.last_skipped_at),
        "last_skip_reason": schedule.last_skip_reason,
    }


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "schedules", "scheduled runs")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = common.add_command(
        sub, "tick", "fire the schedules that are due now (the workers do it every minute)"
    )
    common.add_json(c, '{"fired", "skipped", "firings": [...]}')
    c.set_defaults(handler=cmd_tick)
    c = common.add_command(sub, "list", "list a workspace's schedules")
    common.add_workspace(c)
    common.add_json(c, '{"workspace", "schedules": [...]}')
    c.set_defaults(handler=cmd_list)
