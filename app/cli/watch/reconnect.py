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

The delays are the backoff every reconnect loop of Enverif follows
(``app.events.subscriber.BackoffPolicy``: doubling up to a cap, each within ±20 %, so that
watchers that lost the same server do not all come back in the same instant), starting at
``FIRST_DELAY_S``: a person is watching, and a restarted server is back within a second or
two. A server's ``retryAfter`` is a floor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from app.events.subscriber import BackoffPolicy

DEFAULT_MAX_FAILURES = 30
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0
BACKOFF = BackoffPolicy(first_s=FIRST_DELAY_S, max_s=MAX_DELAY_S)
# How long a connection must stay subscribed, delivering nothing, to count as a success: a
# quiet tree (a run waiting for an approval) behind a proxy that drops idle connections
# would otherwise use up its tries without anything going wrong.
STABLE_S = 10.0
# A server asking for more than this is not waited for longer; the next try asks again.
MAX_RETRY_AFTER_S = 60.0


@dataclass
class Reconnects:
    max_failures: int = DEFAULT_MAX_FAILURES
    backoff: BackoffPolicy = field(default=BACKOFF)
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
        self, *, progressed: bool, retry_after_s: float = 0.0, draw: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait before the next attempt, after one that ended; None: give up.
        ``draw`` is uniform in [0, 1) (the jitter)."""
        if progressed:
            self.failures = 0
        else:
            self.failures += 1
            if self.failures >= self.max_failures:
                return None
        delay_s = self.backoff.delay_s(self.failures, draw())
        return max(delay_s, min(retry_after_s, MAX_RETRY_AFTER_S))
