"""The reconnect backoff every Redis loop follows (app.events.subscriber): pure arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.events.subscriber import RECONNECT, Backoff, BackoffPolicy


@pytest.mark.parametrize(
    ("attempt", "draw", "expected_s"),
    [
        (0, 0.5, 0.05),  # the first retry comes almost at once
        (1, 0.5, 0.1),
        (4, 0.5, 0.8),
        (6, 0.5, 3.2),
        (7, 0.5, 5.0),  # capped
        (1_000, 0.5, 5.0),  # no overflow however long the outage
        (0, 0.0, 0.04),  # jitter: -20 %
        (7, 0.999999, 6.0),  # +20 % of the cap at most
    ],
)
def test_delays(attempt: int, draw: float, expected_s: float) -> None:
    assert RECONNECT.delay_s(attempt, draw) == pytest.approx(expected_s, rel=1e-5)


@given(st.integers(min_value=0, max_value=10_000), st.floats(min_value=0, max_value=1, exclude_max=True))
def test_every_delay_lies_within_the_jittered_bounds(attempt: int, draw: float) -> None:
    policy = BackoffPolicy(first_s=0.2, max_s=5.0, jitter=0.2)
    delay = policy.delay_s(attempt, draw)
    assert 0.2 * 0.8 <= delay <= 5.0 * 1.2


def test_a_loop_climbs_resets_and_can_be_capped() -> None:
    backoff = Backoff(RECONNECT, draw=lambda: 0.5)
    assert [round(backoff.next_delay_s(), 3) for _ in range(4)] == [0.05, 0.1, 0.2, 0.4]
    assert backoff.next_delay_s(cap_s=0.01) == 0.01  # a cap bounds the wait, the climb goes on
    backoff.reset()
    assert backoff.next_delay_s() == pytest.approx(0.05)
