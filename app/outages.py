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
import sqlite3

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
