"""When ``enverif runs watch`` tries again after losing its stream, and when it gives up
(``app.cli.watch.reconnect``): pure, so tables of attempts and properties over any sequence
of them. The command itself rides out real outages in tests/integration/test_runs_watch.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.cli.watch.reconnect import MAX_DELAY_S, MAX_RETRY_AFTER_S, Reconnects


def middle() -> float:
    """The jitter's draw that gives the nominal delay."""
    return 0.5


def lowest() -> float:
    return 0.0


@pytest.mark.parametrize(
    ("attempts", "delays"),
    [
        # A stream that was going well and broke: the first try comes quickly.
        ([True], [0.25]),
        # Tries that get nowhere double the wait, up to the cap.
        ([True, False, False, False, False, False], [0.25, 0.5, 1.0, 2.0, 4.0, 5.0]),
        # A try that got through starts over: a long watch never runs out of tries.
        ([True, False, False, True, False], [0.25, 0.5, 1.0, 0.25, 0.5]),
        ([True] * 40, [0.25] * 40),
    ],
    ids=["first-loss", "backoff-to-the-cap", "success-resets", "forty-good-reconnects"],
)
def test_the_wait_after_each_attempt(attempts: list[bool], delays: list[float]) -> None:
    policy = Reconnects(max_failures=30)
    got = [policy.next_delay(progressed=p, draw=middle) for p in attempts]
    assert got == delays


def test_it_gives_up_after_max_failures_in_a_row_only() -> None:
    policy = Reconnects(max_failures=3)
    assert policy.next_delay(progressed=True, draw=middle) is not None
    assert policy.next_delay(progressed=False, draw=middle) is not None  # 1 of 3
    assert policy.next_delay(progressed=False, draw=middle) is not None  # 2 of 3
    assert policy.next_delay(progressed=True, draw=middle) is not None  # got through: 0 again
    assert [policy.next_delay(progressed=False, draw=middle) for _ in range(3)] == [0.5, 1.0, None]
    assert policy.failures == 3


@pytest.mark.parametrize(
    ("delivered", "subscribed_s", "progressed"),
    [(0, 0.0, False), (0, 9.9, False), (0, 10.0, True), (1, 0.0, True), (5, 0.1, True)],
)
def test_an_attempt_counts_as_progress_when_it_delivered_or_stayed_up(
    delivered: int, subscribed_s: float, progressed: bool
) -> None:
    assert Reconnects().progressed(delivered=delivered, subscribed_s=subscribed_s) is progressed


def test_jitter_stays_within_a_fifth_and_the_servers_retry_after_is_a_floor() -> None:
    policy = Reconnects()
    assert policy.next_delay(progressed=False, draw=lowest) == pytest.approx(0.4)  # 0.5 - 20 %
    assert policy.next_delay(progressed=False, draw=lowest, retry_after_s=2) == 2
    assert policy.next_delay(progressed=False, draw=lowest, retry_after_s=10_000) == MAX_RETRY_AFTER_S


def test_max_failures_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="1 or more"):
        Reconnects(max_failures=0)


@given(
    max_failures=st.integers(min_value=1, max_value=10**9),
    attempts=st.lists(st.booleans(), max_size=300),
    retry_after_s=st.floats(min_value=0, max_value=1e6),
)
def test_any_sequence_of_attempts(max_failures: int, attempts: list[bool], retry_after_s: float) -> None:
    """Delays stay within bounds, the count is the failures since the last progress, and it
    gives up exactly when that count reaches max_failures."""
    policy = Reconnects(max_failures=max_failures)
    in_a_row = 0
    for progressed in attempts:
        in_a_row = 0 if progressed else in_a_row + 1
        delay = policy.next_delay(progressed=progressed, retry_after_s=retry_after_s)
        assert policy.failures == in_a_row
        if in_a_row >= max_failures:
            assert delay is None
            return
        assert delay is not None
        assert 0 < delay <= max(MAX_DELAY_S * 1.2, min(retry_after_s, MAX_RETRY_AFTER_S))
        assert delay >= min(retry_after_s, MAX_RETRY_AFTER_S)
