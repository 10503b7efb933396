"""When a schedule fires: cron arithmetic in the schedule's own timezone, pure.

A cron expression is read in the schedule's IANA timezone ("9 every morning" stays 9:00
local across daylight saving time) and every instant leaves here in UTC. Across DST
transitions we do what croniter (7.x) does with a zone-aware start, pinned by the unit tests:
a wall time the spring-forward gap skips fires at the first instant after the gap (02:30 in
Berlin on the last Sunday of March fires at 03:00 CEST), and a wall time the fall-back hour
repeats fires at both instants (02:30 CEST and 02:30 CET).

Missed fire times coalesce: a tick that finds several fire times in the past (the workers
were down, or the tick came late) fires once, for the latest of them, and counts the rest.

croniter is a pure computation over dates (no I/O, no clock): it is allowed here, unlike
anything that talks to the outside. ``now`` is always passed in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from app.domain.agents import AgentStatus, OverlapPolicy

# Under overlap ALLOW, unfinished runs of one schedule at most, unless it says otherwise.
DEFAULT_MAX_CONCURRENT_RUNS = 3
# How many missed fire times a tick walks through one by one. Past this (a per-minute
# schedule after days of downtime) it jumps straight to now instead of counting.
MAX_MISSED_COUNTED = 10_000


@dataclass(frozen=True, slots=True)
class Due:
    """What one tick does about a schedule whose next fire time has come."""

    fire_at: datetime  # the fire time served: the latest one not after now
    missed: int  # earlier fire times folded into this one (0: none); a lower bound when capped
    next_at: datetime  # the first fire time after now


def next_fire_at(cron: str, timezone: str, *, after: datetime) -> datetime:
    """The first fire time strictly after ``after``, in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    fire: datetime = croniter(cron, local).get_next(datetime)
    return fire.astimezone(UTC)


def due(cron: str, timezone: str, *, next_at: datetime, now: datetime) -> Due | None:
    """None while ``next_at`` is still in the future; else the fire time to serve now, how
    many earlier ones it coalesces, and the next fire time after now."""
    if next_at > now:
        return None
    fire_at, missed = next_at, 0
    times = croniter(cron, next_at.astimezone(ZoneInfo(timezone)))
    upcoming: datetime = times.get_next(datetime).astimezone(UTC)
    while upcoming <= now:
        if missed >= MAX_MISSED_COUNTED:
            # Stop counting; serve the latest fire time before now, found from the far end.
            upcoming = next_fire_at(cron, timezone, after=now)
            latest: datetime = croniter(cron, upcoming.astimezone(ZoneInfo(timezone))).get_prev(datetime)
            return Due(fire_at=max(latest.astimezone(UTC), fire_at), missed=missed + 1, next_at=upcoming)
        fire_at, missed = upcoming, missed + 1
        upcoming = times.get_next(datetime).astimezone(UTC)
    return Due(fire_at=fire_at, missed=missed, next_at=upcoming)


class FiringOutcome(enum.StrEnum):
    FIRED = "FIRED"  # a run was started
    SKIPPED = "SKIPPED"  # the fire time passed without a run; the reason says why


def skip_reason(
    *,
    agent_name: str,
    agent_status: str,
    overlap: OverlapPolicy,
    unfinished: list[str],
    workspace_paused_reason: str | None = None,
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS,
) -> str | None:
    """Why this fire time starts no run, or None to start one. ``unfinished``: the statuses
    of the schedule's earlier runs that have not ended, oldest first (at least
    ``max_concurrent_runs`` of them when there are that many)."""
    if workspace_paused_reason is not None:
        return f"workspace paused: {workspace_paused_reason}"
    if agent_status != AgentStatus.ACTIVE:
        return f"agent {agent_name!r} is {agent_status}; only ACTIVE agents run"
    if overlap == OverlapPolicy.SKIP and unfinished:
        return f"overlap SKIP: the schedule's previous run is still {unfinished[0]}"
    if overlap == OverlapPolicy.ALLOW and len(unfinished) >= max_concurrent_runs:
        return f"overlap ALLOW: {len(unfinished)} runs of the schedule have not ended (maxConcurrentRuns {max_concurrent_runs})"
    return None
