"""Throughput around an outage, read from a webhook sink's deliveries: how long after a
service answered again the workers were back to their normal pace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# "Back to normal": a window this long with at least this share of the pace measured before
# the outage. Long enough that a burst of jobs taken at one restart of a stalled poll loop
# (max_jobs of them at once, then nothing for seconds) does not count as normal.
WINDOW_S = 3.0
NORMAL_SHARE = 0.6


@dataclass(frozen=True)
class Recovery:
    baseline_per_s: float  # calls started per second before the first outage
    recovered_after_s: list[float | None]  # per outage: None if the pace never came back

    def worst_s(self) -> float:
        return max((r if r is not None else float("inf")) for r in self.recovered_after_s)


def pace(arrivals: Sequence[float], start: float, end: float) -> float:
    return sum(1 for a in arrivals if start <= a < end) / (end - start)


def recovery(
    arrivals: Sequence[float], *, baseline: tuple[float, float], back_at: Sequence[float], horizon_s: float
) -> Recovery:
    """For each time a service answered again (``back_at``, wall clock), the seconds until the
    first call start from which a ``WINDOW_S`` window runs at ``NORMAL_SHARE`` of the pace
    measured over ``baseline`` (None when that does not happen within ``horizon_s``)."""
    normal = pace(arrivals, *baseline)
    assert normal > 0, "no calls started before the outage"
    ordered = sorted(arrivals)
    found: list[float | None] = []
    for back in back_at:
        after: float | None = None
        for start in (a for a in ordered if back <= a <= back + horizon_s):
            if pace(ordered, start, start + WINDOW_S) >= NORMAL_SHARE * normal:
                after = round(start - back, 2)
                break
        found.append(after)
    return Recovery(baseline_per_s=round(normal, 2), recovered_after_s=found)


def lost_s(arrivals: Sequence[float], *, normal_per_s: float, start: float, end: float) -> float:
    """Throughput lost between ``start`` and ``end``, in seconds of the normal pace: the sum
    over 1 s buckets of the share of ``normal_per_s`` that did not happen."""
    lost, t = 0.0, start
    while t < end:
        width = min(1.0, end - t)
        lost += max(0.0, 1.0 - pace(arrivals, t, t + width) / normal_per_s) * width
        t += width
    return round(lost, 1)


@dataclass(frozen=True)
class Load:
    """Runs of two 0.3 s webhook calls offered at ``runs_per_s`` to ``workers`` worker
    processes of ``max_jobs`` each, while a private Redis is SIGKILLed ``outages`` times for
    ``outage_s``, ``gap_s`` apart."""

    workers: int = 1
    max_jobs: int = 4
    runs_per_s: float = 10.0
    outages: int = 2
    outage_s: float = 2.0
    gap_s: float = 6.0
    warmup_s: float = 3.0


@dataclass(frozen=True)
class Measured:
    recovery: Recovery
    lost_s: list[float]  # per outage: normal-pace seconds lost from Redis answering to gap_s later
    runs: int


async def redis_outage_recovery(
    load: Load, *, settings: Any, workspace: Any, sessionmaker: Any, processes: list[Any], tmp_path: Any
) -> Measured:
    """Offer ``load``, kill Redis under it, and read the workers' pace from the receiver.
    Also checks that every run succeeded and no recorded call was sent again."""
    import asyncio
    import time

    from tests.integration.test_faults import ALLOW_WEBHOOK
    from tests.integration.test_resilience import (
        api,
        assert_no_recorded_step_repeated,
        changed,
        redis_server,
        wait_all,
        webhook_agent_steps,
    )
    from tests.support.runs import create_agent, start_run
    from tests.support.servers import sink_server
    from tests.support.workers import exited, spawn_worker

    with redis_server(tmp_path) as (port, stop_redis, start_redis):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        async with sink_server(delay_s=0.3) as (sink, url), api(mine) as gql:
            agent = await create_agent(
                gql, workspace.admin, steps=webhook_agent_steps(url, 2), policy=ALLOW_WEBHOOK
            )
            workers = [spawn_worker(mine, lease_s=3.0, max_jobs=load.max_jobs) for _ in range(load.workers)]
            processes.extend(workers)
            started = 0
            offering = asyncio.Event()

            async def offer() -> None:
                nonlocal started
                while not offering.is_set():
                    await start_run(gql, workspace.operator, agent)
                    started += 1
                    await asyncio.sleep(1 / load.runs_per_s)

            producer = asyncio.create_task(offer())
            deadline = time.monotonic() + 60
            while len(sink.deliveries) < 4:
                assert time.monotonic() < deadline, "no call started"
                await asyncio.sleep(0.05)
            steady_from = time.time()
            await asyncio.sleep(load.warmup_s)
            baseline = (steady_from, time.time())
            back_at: list[float] = []
            for _ in range(load.outages):
                stop_redis()
                await asyncio.sleep(load.outage_s)
                start_redis()  # returns once the port accepts connections
                back_at.append(time.time())
                await asyncio.sleep(load.gap_s)
            offering.set()
            await producer

            arrivals = [d.arrived_at for d in sink.deliveries]
            measured = recovery(arrivals, baseline=baseline, back_at=back_at, horizon_s=load.gap_s - WINDOW_S)
            lost = [
                lost_s(arrivals, normal_per_s=measured.baseline_per_s, start=b, end=b + load.gap_s)
                for b in back_at
            ]
            rows = await wait_all(sessionmaker, workspace.id, started, timeout_s=180)
            assert [s for _, s in rows] == ["SUCCEEDED"] * started
            await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 2 * started)
            assert not exited(workers), exited(workers)
    return Measured(recovery=measured, lost_s=lost, runs=started)


def describe(load: Load, measured: Measured) -> str:
    return (
        f"redis outage recovery ({load.workers} worker(s) x {load.max_jobs} jobs, {load.outages} x "
        f"{load.outage_s:.0f} s SIGKILL, {measured.runs} runs): {measured.recovery.baseline_per_s} calls/s "
        f"before; back to {NORMAL_SHARE:.0%} of that pace {measured.recovery.recovered_after_s} s after Redis "
        f"answered; throughput lost {measured.lost_s} s (of normal pace) in the {load.gap_s:.0f} s after each"
    )


async def assert_back_to_pace(load: Load, *, bound_s: float, **fixtures: Any) -> Measured:
    """``redis_outage_recovery``, printed, and held to ``bound_s`` after every outage."""
    measured = await redis_outage_recovery(load, **fixtures)
    print("\n" + describe(load, measured))
    assert measured.recovery.worst_s() < bound_s, measured
    return measured
