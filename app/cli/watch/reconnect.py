"""When ``runs watch`` tries again after losing its stream, and when it gives up: pure (the
randomness is passed in), so the policy is tested with tables of attempts.

A stream is lost when the server answers ``UNAVAILABLE`` (its database or Redis does not
answer: the documented answer is to resubscribe with ``afterSeq``), when the connection
drops (a server restart, a proxy's idle timeout, a network blip) or when the server is not
listening yet. Each try resumes after the last seq the watcher printed, so a lost stream
costs time, never an event.

Only failures in a row count: an attempt that delivered an event, or stayed subscribed for
``stable_s``, was a success, and the next loss starts counting from zero. A watch that lives
for days through many restarts therefore never runs out of tries; ``max_failures`` attempts
in a row that get nowhere end it with a message.

The delay doubles from ``first_s`` up to ``max_s``, each one drawn from its upper half
("equal jitter"): watchers that lost the same server do not all come back in the same
instant, and none waits less than half its step. A server's ``retryAfter`` is a floor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_FAILURES = 30
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0
# How long a connection must stay subscribed, delivering nothing, to count as a success: a
# quiet tree (a run waiting for an approval) behind a proxy that drops idle connections
# would otherwise use up its tries without anything going wrong.
STABLE_S = 10.0
# A server asking for more than this is not waited for longer; the next try asks again.
MAX_RETRY_AFTER_S = 60.0

Uniform = Callable[[float, float], float]


@dataclass
class Reconnects:
    max_failures: int = DEFAULT_MAX_FAILURES
    first_s: float = FIRST_DELAY_S
    max_s: float = MAX_DELAY_S
    stable_s: float = STABLE_S
    # Attempts in a row that got nowhere.
    failures: int = 0

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ValueError("max_failures must be 1 or more")

    def progressed(self, *, delivered: int, subscribed_s: float) -> bool:
        """Whether an attempt that ended counts as a success."""
        return delivered > 0 or subscribed_s >= self.stable_s

    def next_delay(
        self, *, progressed: bool, retry_after_s: float = 0.0, uniform: Uniform = random.uniform
    ) -> float | None:
        """Seconds to wait before the next attempt, after one that ended; None: give up."""
        if progressed:
            self.failures = 0
            step = 0
        else:
            self.failures += 1
            if self.failures >= self.max_failures:
                return None
            step = self.failures
        # Capped before the power: a huge --max-retries must not overflow a float.
        base_s = min(self.max_s, self.first_s * 2 ** min(step, 32))
        delay_s = uniform(base_s / 2, base_s)
        return max(delay_s, min(retry_after_s, MAX_RETRY_AFTER_S))
