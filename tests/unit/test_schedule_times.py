"""Fire times: cron read in the schedule's timezone, DST as croniter says, missed times coalesce."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.agents import OverlapPolicy
from app.domain.schedules import MAX_MISSED_COUNTED, Due, due, next_fire_at, skip_reason


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "tz", "after", "expected"),
    [
        # Plain UTC.
        ("0 9 * * *", "UTC", "2026-06-01T08:59:59", "2026-06-01T09:00:00"),
        ("0 9 * * *", "UTC", "2026-06-01T09:00:00", "2026-06-02T09:00:00"),  # strictly after
        ("*/15 * * * *", "UTC", "2026-06-01T10:07:00", "2026-06-01T10:15:00"),
        # 9:00 in Berlin is 07:00 UTC in summer (CEST) and 08:00 UTC in winter (CET).
        ("0 9 * * *", "Europe/Berlin", "2026-07-01T00:00:00", "2026-07-01T07:00:00"),
        ("0 9 * * *", "Europe/Berlin", "2026-01-15T00:00:00", "2026-01-15T08:00:00"),
        # The day after the spring-forward switch (Sun 29 March 2026) is already summer time.
        ("0 9 * * *", "Europe/Berlin", "2026-03-28T12:00:00", "2026-03-29T07:00:00"),
        ("0 9 * * *", "Europe/Berlin", "2026-10-24T12:00:00", "2026-10-25T08:00:00"),
        # Spring forward: 02:30 does not exist in Berlin on 29 March; croniter fires at the
        # first instant after the gap, 03:00 CEST = 01:00 UTC.
        ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00", "2026-03-29T01:00:00"),
        ("30 2 * * *", "Europe/Berlin", "2026-03-29T01:00:00", "2026-03-30T00:30:00"),
        # Fall back: 02:30 exists twice on 25 October (CEST, then CET); croniter fires at both.
        ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00", "2026-10-25T00:30:00"),
        ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00", "2026-10-25T01:30:00"),
        ("30 2 * * *", "Europe/Berlin", "2026-10-25T01:30:00", "2026-10-26T01:30:00"),
        # An interval schedule keeps its real-time rhythm through the repeated hour.
        ("*/30 * * * *", "Europe/Berlin", "2026-10-25T00:30:00", "2026-10-25T01:00:00"),
        ("*/30 * * * *", "Europe/Berlin", "2026-10-25T01:00:00", "2026-10-25T01:30:00"),
        # New York switches on other dates (8 March, 1 November 2026).
        ("0 9 * * *", "America/New_York", "2026-03-07T15:00:00", "2026-03-08T13:00:00"),
        ("0 9 * * *", "America/New_York", "2026-11-01T00:00:00", "2026-11-01T14:00:00"),
        # A half-hour offset and no DST.
        ("0 9 * * *", "Asia/Kolkata", "2026-06-01T00:00:00", "2026-06-01T03:30:00"),
        # Day-of-month in the local calendar: 00:30 on the 1st in Tokyo is still the 31st in UTC.
        ("30 0 1 * *", "Asia/Tokyo", "2026-05-15T00:00:00", "2026-05-31T15:30:00"),
        ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00", "2028-02-29T00:00:00"),
    ],
)
def test_next_fire_time(cron: str, tz: str, after: str, expected: str) -> None:
    assert next_fire_at(cron, tz, after=utc(after)) == utc(expected)


def test_not_due_before_its_time() -> None:
    assert due("0 9 * * *", "UTC", next_at=utc("2026-06-01T09:00:00"), now=utc("2026-06-01T08:59:59")) is None


def test_due_on_time_serves_that_fire_time() -> None:
    now = utc("2026-06-01T09:00:00.250000")
    assert due("0 9 * * *", "UTC", next_at=utc("2026-06-01T09:00:00"), now=now) == Due(
        fire_at=utc("2026-06-01T09:00:00"), missed=0, next_at=utc("2026-06-02T09:00:00")
    )


def test_missed_fire_times_coalesce_into_the_latest() -> None:
    # Workers were down from 09:00 to 12:20: one firing, for 12:00, counting 09:00-11:00.
    got = due("0 * * * *", "UTC", next_at=utc("2026-06-01T09:00:00"), now=utc("2026-06-01T12:20:00"))
    assert got == Due(fire_at=utc("2026-06-01T12:00:00"), missed=3, next_at=utc("2026-06-01T13:00:00"))


def test_missed_fire_times_coalesce_across_a_dst_switch() -> None:
    got = due(
        "0 9 * * *", "Europe/Berlin", next_at=utc("2026-03-27T08:00:00"), now=utc("2026-03-30T12:00:00")
    )
    assert got == Due(fire_at=utc("2026-03-30T07:00:00"), missed=3, next_at=utc("2026-03-31T07:00:00"))


def test_a_very_long_outage_stops_counting_but_still_serves_the_latest() -> None:
    next_at = utc("2026-01-01T00:00:00")
    now = next_at + timedelta(minutes=MAX_MISSED_COUNTED * 3, seconds=30)
    got = due("* * * * *", "UTC", next_at=next_at, now=now)
    assert got is not None
    assert got.fire_at == now.replace(second=0)
    assert got.next_at == got.fire_at + timedelta(minutes=1)
    assert got.missed > MAX_MISSED_COUNTED


@pytest.mark.parametrize(
    ("status", "overlap", "unfinished", "expected"),
    [
        ("ACTIVE", OverlapPolicy.SKIP, [], None),
        ("ACTIVE", OverlapPolicy.ALLOW, ["RUNNING"], None),
        ("ACTIVE", OverlapPolicy.SKIP, ["WAITING_APPROVAL"], "still WAITING_APPROVAL"),
        ("ACTIVE", OverlapPolicy.SKIP, ["QUEUED"], "still QUEUED"),
        ("PAUSED", OverlapPolicy.ALLOW, [], "is PAUSED"),
        ("ARCHIVED", OverlapPolicy.SKIP, ["RUNNING"], "is ARCHIVED"),
        # ALLOW: at most DEFAULT_MAX_CONCURRENT_RUNS (3) unfinished runs of the schedule.
        ("ACTIVE", OverlapPolicy.ALLOW, ["RUNNING", "QUEUED"], None),
        (
            "ACTIVE",
            OverlapPolicy.ALLOW,
            ["RUNNING", "QUEUED", "WAITING_CHILD"],
            "overlap ALLOW: 3 runs of the schedule have not ended (maxConcurrentRuns 3)",
        ),
    ],
)
def test_skip_reason(
    status: str, overlap: OverlapPolicy, unfinished: list[str], expected: str | None
) -> None:
    reason = skip_reason(agent_name="a", agent_status=status, overlap=overlap, unfinished=unfinished)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason


@pytest.mark.parametrize(
    ("unfinished", "cap", "skips"), [(0, 1, False), (1, 1, True), (4, 5, False), (5, 5, True)]
)
def test_allow_is_held_to_max_concurrent_runs(unfinished: int, cap: int, skips: bool) -> None:
    reason = skip_reason(agent_name="a", agent_status="ACTIVE", overlap=OverlapPolicy.ALLOW,
                         unfinished=["RUNNING"] * unfinished, max_concurrent_runs=cap)  # fmt: skip
    assert (reason is not None) is skips
    if skips:
        assert (
            reason
            == f"overlap ALLOW: {unfinished} runs of the schedule have not ended (maxConcurrentRuns {cap})"
        )


ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
]
CRONS = st.sampled_from(
    ["* * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * 1-5", "15 */3 * * *", "0 0 1 * *", "45 1,2,3 * * 0"]
)
INSTANTS = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)


@given(cron=CRONS, tz=st.sampled_from(ZONES), after=INSTANTS, fraction=st.floats(0, 1, exclude_max=True))
def test_next_fire_time_is_the_first_one_after(cron: str, tz: str, after: datetime, fraction: float) -> None:
    """The next fire time is after ``after``, and asking again from any instant in between
    gives the same answer: no fire time is skipped, none invented in the gap."""
    fire = next_fire_at(cron, tz, after=after)
    assert fire > after
    # timedelta arithmetic rounds to the microsecond: a fraction just under 1 can land on
    # the fire time itself, which is no longer "in between".
    between = min(after + (fire - after) * fraction, fire - timedelta(microseconds=1))
    assert next_fire_at(cron, tz, after=between) == fire
    # And a tick at the fire time serves exactly it, and moves on.
    served = due(cron, tz, next_at=fire, now=fire)
    assert served is not None
    assert (served.fire_at, served.missed) == (fire, 0)
    assert served.next_at == next_fire_at(cron, tz, after=fire) > fire


@given(cron=CRONS, tz=st.sampled_from(ZONES), start=INSTANTS, late_s=st.integers(0, 3 * 86_400))
def test_a_late_tick_serves_the_latest_fire_time_and_counts_the_rest(
    cron: str, tz: str, start: datetime, late_s: int
) -> None:
    first = next_fire_at(cron, tz, after=start)
    now = first + timedelta(seconds=late_s)
    served = due(cron, tz, next_at=first, now=now)
    assert served is not None
    assert first <= served.fire_at <= now < served.next_at
    assert served.next_at == next_fire_at(cron, tz, after=now)
    walked, count = first, 0
    while (following := next_fire_at(cron, tz, after=walked)) <= now:
        walked, count = following, count + 1
    assert (served.fire_at, served.missed) == (walked, count)
    assert served.fire_at.astimezone(ZoneInfo(tz)).second == 0
