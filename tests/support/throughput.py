"""Throughput around an outage, read from a webhook sink's deliveries: how long after a
service answered again the workers were back to their normal pace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
