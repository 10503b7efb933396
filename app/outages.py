"""Telling an outage from a bug.

An outage is the database or Redis not answering: connection refused, lost or timed out,
the server restarting, our connection killed. The request was fine and the same request
will work once the service is back, so clients get ``UNAVAILABLE`` with a retry hint and
workers back off and carry on. Anything else (a SQL error, a constraint violation, a type
error) is a bug and stays ``INTERNAL``: recognising outages precisely is what keeps real
bugs from hiding behind "try again later".
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

# MySQL/MariaDB client and server error numbers that mean "the server is not reachable or
# dropped us", as opposed to "the statement was wrong".
MYSQL_OUTAGE_ERRNOS = frozenset(
    {
        1040,  # too many connections
        1053,  # server shutdown in progress
        1927,  # connection was killed (MariaDB ER_CONNECTION_KILLED)
        2002,  # can't connect through socket
        2003,  # can't connect to server
        2006,  # server has gone away
        2013,  # lost connection during query
        2055,  # lost connection at '...', system error
    }
)
SQLITE_OUTAGE_MESSAGES = ("unable to open database file",)
# asyncmy connecting to a server that accepted the connection and dropped it at once (a proxy
# or load balancer with no database behind it): the transport is gone before asyncmy sets
# its socket options, and it says so with a plain RuntimeError that SQLAlchemy passes on.
ASYNCMY_DROPPED_AT_CONNECT = "Transport does not expose socket instance"
# One warning per kind of message in this long, however many runs an outage interrupts.
OUTAGE_WARNING_INTERVAL_S = 30.0


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says a service is unreachable."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_outage_here(current):
            return True
        if isinstance(current, DBAPIError) and current.orig is not None:
            current = current.orig
        else:
            current = current.__cause__ or current.__context__
    return False


def _is_outage_here(exc: BaseException) -> bool:
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | PoolTimeoutError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, ConnectionError | TimeoutError | asyncio.TimeoutError):
        # OSError subclasses: refused, reset, aborted, broken pipe; and socket timeouts.
        return True
    if isinstance(exc, RuntimeError) and str(exc) == ASYNCMY_DROPPED_AT_CONNECT:
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return any(m in str(exc) for m in SQLITE_OUTAGE_MESSAGES)
    if type(exc).__module__.startswith("asyncmy") or type(exc).__module__.startswith("pymysql"):
        args: tuple[object, ...] = tuple(getattr(exc, "args", ()))
        return bool(args) and isinstance(args[0], int) and args[0] in MYSQL_OUTAGE_ERRNOS
    return False


def outage_of(exc: BaseException) -> str:
    """Which service an outage error (``is_outage``) is about, for a log line."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RedisConnectionError | RedisTimeoutError):
            return "Redis"
        current = current.__cause__ or current.__context__
    return "the database"


class OutageWarnings:
    """Rate-limited warnings for an expected outage: the first occurrence of each message is
    logged at once, the next ones at most every ``interval_s`` with how many were folded in.
    During a database outage every run in flight breaks off and every lease renewal fails;
    that is one situation, not a traceback per run (a bug still logs each one, with its
    traceback)."""

    def __init__(
        self, interval_s: float = OUTAGE_WARNING_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ):
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}  # message -> (logged at, folded since)

    def warn(self, logger: logging.Logger, message: str, *args: object) -> bool:
        """Log ``message % args`` unless the same message was logged less than ``interval_s``
        ago; True if it was logged."""
        now = self._clock()
        last = self._last.get(message)
        if last is not None and now - last[0] < self.interval_s:
            self._last[message] = (last[0], last[1] + 1)
            return False
        folded = last[1] if last is not None else 0
        suffix = f" (and {folded} more like it in the last {now - last[0]:.0f}s)" if last and folded else ""
        logger.warning(message + suffix, *args)
        self._last[message] = (now, 0)
        return True


# The process's one: each worker process warns once per interval, whatever it runs.
OUTAGE_WARNINGS = OutageWarnings()


class SendOutage:
    """After-commit sends to Redis during an outage (``app.services.transitions.outbox``):
    one warning when the first send fails, then only counting, and one warning with the
    counts when a send works again. Each transaction of every run sends after its commit,
    so an outage of a few seconds would otherwise log hundreds of lines saying the same.
    Not thread-safe, and not meant to be: one per runtime, used from its event loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.since: float | None = None  # the clock when the first send of this outage failed
        self.failed_sends = 0
        self.lost_messages = 0
        self.lost_wakeups = 0

    def failed(self, *, messages: int, wakeups: int) -> bool:
        """Count a failed send; True for the first of an outage (the one to log)."""
        first = self.since is None
        if first:
            self.since = self._clock()
        self.failed_sends += 1
        self.lost_messages += messages
        self.lost_wakeups += wakeups
        return first

    def recovered(self) -> str | None:
        """After a send worked: the line to log when it ended an outage, else None."""
        if self.since is None:
            return None
        line = (
            f"Redis answers again after {self._clock() - self.since:.1f}s: {self.failed_sends} "
            f"after-commit send(s) failed meanwhile ({self.lost_messages} event message(s) not "
            f"published, {self.lost_wakeups} wake-up(s) not enqueued; subscribers re-read the "
            "events, the sweeper re-enqueues the runs)"
        )
        self.since = None
        self.failed_sends = self.lost_messages = self.lost_wakeups = 0
        return line
