"""``bench/throughput.py`` prints each target beside the figure the run measured for it."""

from __future__ import annotations

import pytest

from bench.throughput import targets_beside


@pytest.mark.parametrize(
    ("measured", "target", "met"),
    [
        (0.45, ">= 0.45", True),
        (0.449, ">= 0.45", False),
        (1.0, "<= 1", True),
        (3.9, "<= 1", False),
        (100, ">= 60 (aim 100)", True),
        (None, ">= 0.40", None),  # the scenario did not measure it
    ],
)
def test_a_target_is_met_or_not_by_its_own_bound(
    measured: float | None, target: str, met: bool | None
) -> None:
    report = {} if measured is None else {"figure": measured}
    assert targets_beside(report, {"figure": target}) == {
        "figure": {"target": target, "measured": measured, "met": met}
    }
