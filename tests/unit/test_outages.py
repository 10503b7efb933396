"""Telling an outage (UNAVAILABLE, retry) from a bug (INTERNAL): a table of real exception
shapes, as the drivers and SQLAlchemy raise them."""

from __future__ import annotations

import sqlite3

import pytest
from asyncmy.errors import InternalError as MyInternalError
from asyncmy.errors import OperationalError as MyOperationalError
from asyncmy.errors import ProgrammingError as MyProgrammingError
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from app.db.session import DEADLOCK_ATTEMPTS, is_lock_conflict, retry_deadlocks
from app.domain.errors import Unavailable
from app.outages import MYSQL_OUTAGE_ERRNOS, SendOutage, is_outage


def wrapped(orig: BaseException, cls: type = OperationalError, *, invalidated: bool = False) -> BaseException:
    """What SQLAlchemy raises around a driver error."""
    return cls("SELECT 1", {}, orig, connection_invalidated=invalidated)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        # MariaDB / MySQL through asyncmy
        (wrapped(MyOperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'")), True),
        (wrapped(MyOperationalError(2006, "MySQL server has gone away")), True),
        (wrapped(MyOperationalError(2013, "Lost connection to MySQL server during query")), True),
        (wrapped(MyInternalError(1927, "Connection was killed")), True),
        (wrapped(MyOperationalError(1054, "Unknown column 'x'")), False),
        (wrapped(MyProgrammingError(1064, "You have an error in your SQL syntax")), False),
        (wrapped(MyOperationalError(1205, "Lock wait timeout exceeded")), False),
        (wrapped(Exception("anything"), invalidated=True), True),
        # a server (a proxy in front of it) that accepts and drops the connection at once
        (RuntimeError("Transport does not expose socket instance"), True),
        (RuntimeError("Transport does not expose socket instance, really"), False),
        (wrapped(Exception("gone away")), False),
        (IntegrityError("INSERT", {}, Exception("Duplicate entry")), False),
        (ProgrammingError("SELECT", {}, Exception("syntax")), False),
        # SQLite
        (wrapped(sqlite3.OperationalError("unable to open database file")), True),
        (wrapped(sqlite3.OperationalError("no such table: api_tokens")), False),
        (wrapped(sqlite3.OperationalError("no such column: x")), False),
        # pool, sockets, Redis
        (PoolTimeoutError("QueuePool limit of size 10 overflow 10 reached"), True),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (TimeoutError(), True),
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."), True),
        (RedisTimeoutError("Timeout reading from socket"), True),
        (RedisResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        # bugs
        (ValueError("bad"), False),
        (KeyError("x"), False),
        (AssertionError(), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_outage_or_bug(exc: BaseException, outage: bool) -> None:
    assert is_outage(exc) is outage


def test_an_outage_behind_a_cause_chain_is_found() -> None:
    try:
        try:
            raise RedisConnectionError("Error 111")
        except RedisConnectionError as inner:
            raise RuntimeError("publishing failed") from inner
    except RuntimeError as outer:
        assert is_outage(outer)


@given(st.integers(min_value=0, max_value=5000))
def test_only_the_listed_mysql_errnos_are_outages(errno: int) -> None:
    assert is_outage(wrapped(MyOperationalError(errno, "message"))) is (errno in MYSQL_OUTAGE_ERRNOS)


def test_unavailable_carries_its_retry_hint() -> None:
    assert Unavailable(retry_after_s=3).extensions() == {"code": "UNAVAILABLE", "retryAfter": 3}


def test_outage_warnings_are_one_per_interval_and_count_what_they_folded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from app.outages import OutageWarnings

    now = [100.0]
    warnings = OutageWarnings(interval_s=30, clock=lambda: now[0])
    log = logging.getLogger("test.outages")
    with caplog.at_level(logging.WARNING, logger="test.outages"):
        assert warnings.warn(log, "runs broke off: %s unavailable", "the database")
        for _ in range(5):
            now[0] += 1
            assert not warnings.warn(log, "runs broke off: %s unavailable", "the database")
        assert warnings.warn(log, "another message")  # each message has its own interval
        now[0] = 131.0
        assert warnings.warn(log, "runs broke off: %s unavailable", "the database")
    assert [r.getMessage() for r in caplog.records] == [
        "runs broke off: the database unavailable",
        "another message",
        "runs broke off: the database unavailable (and 5 more like it in the last 31s)",
    ]


@pytest.mark.parametrize(
    ("exc", "service"),
    [
        (RedisConnectionError("refused"), "Redis"),
        (wrapped(MyOperationalError(2013, "Lost connection")), "the database"),
        (ConnectionRefusedError(111, "refused"), "the database"),
    ],
)
def test_outage_of_names_the_service(exc: BaseException, service: str) -> None:
    from app.outages import outage_of

    assert outage_of(exc) == service


@pytest.mark.parametrize(
    ("sends", "logged", "recovery"),
    [
        # (messages, wake-ups) of each send, None for one that worked.
        ([None, None], [], [None, None]),
        ([(1, 0), (1, 1), (2, 0), None], [True, False, False],
         [None, None, None, "3 after-commit send(s) failed meanwhile (4 event message(s) not published, "
                            "1 wake-up(s) not enqueued"]),
        ([(0, 1), None, (1, 0), None], [True, True],
         [None, "1 after-commit send(s) failed meanwhile (0 event message(s) not published, 1 wake-up(s)",
          None, "1 after-commit send(s) failed meanwhile (1 event message(s) not published, 0 wake-up(s)"]),
    ],
)  # fmt: skip
def test_a_send_outage_is_logged_once_then_counted_until_a_send_works(
    sends: list[tuple[int, int] | None], logged: list[bool], recovery: list[str | None]
) -> None:
    now = [100.0]
    outage = SendOutage(clock=lambda: now[0])
    firsts, lines = [], []
    for send in sends:
        now[0] += 1.5
        if send is None:
            lines.append(outage.recovered())
        else:
            firsts.append(outage.failed(messages=send[0], wakeups=send[1]))
            lines.append(None)
    assert firsts == logged
    for line, expected in zip(lines, recovery, strict=True):
        assert (line is None) == (expected is None), (line, expected)
        if line is not None and expected is not None:
            assert expected in line and line.startswith("Redis answers again after "), line


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (wrapped(MyOperationalError(1213, "Deadlock found when trying to get lock")), True),
        (wrapped(MyOperationalError(1205, "Lock wait timeout exceeded")), True),
        # max_statement_time: a slow statement, not a lock conflict; run again it is only slower.
        (
            wrapped(
                MyOperationalError(1969, "Query execution was interrupted (max_statement_time exceeded)")
            ),
            False,
        ),
        (wrapped(MyOperationalError(2006, "MySQL server has gone away")), False),
        (wrapped(sqlite3.OperationalError("database is locked")), False),
        (wrapped(MyInternalError(1213, "not an OperationalError"), cls=ProgrammingError), False),
    ],
)
def test_only_deadlocks_and_lock_wait_timeouts_are_run_again(exc: BaseException, retried: bool) -> None:
    assert is_lock_conflict(exc) is retried


async def test_retry_deadlocks_runs_the_transaction_again_and_gives_up_after_its_attempts() -> None:
    attempts: list[int] = []

    async def deadlocking(times: int) -> str:
        attempts.append(1)
        if len(attempts) <= times:
            raise wrapped(MyOperationalError(1213, "Deadlock found"))
        return "committed"

    assert await retry_deadlocks(lambda: deadlocking(DEADLOCK_ATTEMPTS - 1)) == "committed"
    assert len(attempts) == DEADLOCK_ATTEMPTS
    attempts.clear()
    with pytest.raises(OperationalError):
        await retry_deadlocks(lambda: deadlocking(DEADLOCK_ATTEMPTS))
    assert len(attempts) == DEADLOCK_ATTEMPTS
    attempts.clear()
    with pytest.raises(OperationalError):  # anything else: at once
        await retry_deadlocks(lambda: _raise(wrapped(MyOperationalError(2006, "gone away"))))


async def _raise(exc: BaseException) -> str:
    raise exc
