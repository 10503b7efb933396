"""Engine and sessions.

SQLite (embedded default) runs in WAL mode with a busy timeout, and every transaction starts
with ``BEGIN IMMEDIATE``: SQLite has no ``SELECT ... FOR UPDATE``, so taking the write lock
up front is what serialises our read-check-write transitions there (and it avoids the
"database is locked" error a deferred transaction gets when it upgrades to a writer). The
writers of a process wait their turn in the process before asking SQLite
(``app.db.sqlite_writer``), and a database file's statements run on the event loop's
thread, waits and long reads on aiosqlite's (``app.db.sqlite_driver``);
docs/operating/sqlite.md.
On MySQL/MariaDB the row locks are real (``with_for_update``).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.util import await_
from sqlalchemy.util.concurrency import in_greenlet

from app.db import sqlite_driver, sqlite_writer

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY_OPTION = "enverif_read_only"
_DEADLINE = "enverif_statement_deadline"
_IN_TRANSACTION = "enverif_in_transaction"
_PROGRESS_STEPS = 10_000  # VM instructions between deadline checks (well under a millisecond)
MYSQL_POOL_RECYCLE_S = 1_800  # below the server's default wait_timeout (8 h) and most proxies'


def create_engine(
    url: str,
    *,
    echo: bool = False,
    pool_size: int = 10,
    pre_ping: bool = True,
    statement_timeout_ms: int = 0,
) -> AsyncEngine:
    """``pre_ping`` checks each pooled MySQL connection at checkout, without a round trip
    (``_check_at_checkout``): one the server closed (a restart, a failover, a KILL) is
    replaced before use, so a request does not fail because the server restarted. Workers
    turn it off (``open_runtime(..., worker=True)``): a transaction that hits a dead
    connection fails, the pool drops the connection, and the run is handed back and retried
    (engine.loop).

    ``statement_timeout_ms`` (0: none) makes the server abort any one statement that runs
    longer, so a single expensive request cannot hold pooled connections while every other
    workspace waits for one. MariaDB enforces it (``max_statement_time``, set on each new
    connection; MySQL 8: ``max_execution_time``, SELECTs only). SQLite has no such setting:
    a progress handler aborts the statement instead (waiting for the write lock is not
    counted: that is the busy timeout's business)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        file = _sqlite_file(parsed.database)
        if file:
            Path(file).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url,
            echo=echo,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            # A database file: statements on the event loop's thread (app.db.sqlite_driver).
            # Sized like MariaDB's: SQLAlchemy's default for a file (5, and 10 more opened and
            # closed again as needed) had a worker of 16 jobs open and close a connection,
            # with its driver thread and its PRAGMAs, for many of its transactions.
            **(
                {
                    "async_creator": sqlite_driver.connector(file, SQLITE_BUSY_TIMEOUT_MS / 1000),
                    "pool_size": pool_size,
                    "max_overflow": pool_size,
                }
                if file
                else {}
            ),
            # Our own reset (_reset_sqlite_only_if_needed): no ROLLBACK, one more trip to
            # the driver's thread, after a COMMIT.
            pool_reset_on_return=None,
        )
        _reset_sqlite_only_if_needed(engine)
        _configure_sqlite(engine, file)
        if statement_timeout_ms > 0:
            _limit_sqlite_statements(engine, statement_timeout_ms)
        return engine
    if parsed.get_backend_name() == "mysql" and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    engine = create_async_engine(
        parsed,
        echo=echo,
        pool_recycle=MYSQL_POOL_RECYCLE_S,
        # Our own reset (_reset_only_if_needed): no second ROLLBACK after a COMMIT or ROLLBACK.
        pool_reset_on_return=None,
        pool_size=pool_size,
        max_overflow=pool_size,
        isolation_level="READ COMMITTED",
    )
    _reset_only_if_needed(engine)
    if pre_ping:
        _check_at_checkout(engine)
    if statement_timeout_ms > 0:
        _limit_mysql_statements(engine, statement_timeout_ms)
    return engine


def _reset_only_if_needed(engine: AsyncEngine) -> None:
    """Roll a connection back on its return to the pool only if a statement ran since its
    last COMMIT or ROLLBACK. SQLAlchemy's default reset rolls back every returned connection,
    a round trip even after the session has just committed or rolled back (each session
    closes its transaction itself: MySQL has ended it then)."""
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "before_cursor_execute")
    def _dirty(conn: Any, *_: Any) -> None:
        conn.connection.info[_IN_TRANSACTION] = True

    @event.listens_for(sync_engine, "commit")
    @event.listens_for(sync_engine, "rollback")
    def _clean(conn: Any) -> None:
        # Fired just before the COMMIT/ROLLBACK is sent; if it fails, the connection is
        # invalidated (a disconnect) or the server has rolled the transaction back itself.
        # Also fired for the rollback of a connection SQLAlchemy has just invalidated (a task
        # cancelled mid-statement, a disconnect): it has no DBAPI connection left to mark,
        # and reading ``conn.connection`` would raise PendingRollbackError, which would
        # replace the cancellation or the error being handled. Nothing to mark either: the
        # pool discards an invalidated connection.
        if conn.invalidated or conn.closed:
            return
        conn.connection.info[_IN_TRANSACTION] = False

    @event.listens_for(sync_engine.pool, "reset")
    def _reset(dbapi_connection: Any, record: Any, state: Any) -> None:
        if state.asyncio_safe and record is not None and record.info.pop(_IN_TRANSACTION, True):
            dbapi_connection.rollback()


def _reset_sqlite_only_if_needed(engine: AsyncEngine) -> None:
    """Roll a SQLite connection back on its return to the pool only if it is in a
    transaction. SQLite says so itself (``sqlite3_get_autocommit``, read without a trip to
    the driver's thread: the connection is idle when it is returned), which also covers a
    COMMIT that failed and left its transaction, and the write lock, open."""

    @event.listens_for(engine.sync_engine.pool, "reset")
    def _reset(dbapi_connection: Any, record: Any, state: Any) -> None:
        raw = getattr(dbapi_connection.driver_connection, "_connection", None)
        if state.asyncio_safe and raw is not None and raw.in_transaction:
            dbapi_connection.rollback()


def _check_at_checkout(engine: AsyncEngine) -> None:
    """Replace a pooled connection the server has closed, at checkout, without a round trip.

    SQLAlchemy's ``pool_pre_ping`` sends a ping on every checkout. But a server that closes a
    connection (restart, failover, ``KILL``) sends its FIN, and the event loop has seen it by
    the time the connection is next checked out: asyncmy's protocol then holds ``eof`` (or
    unread bytes: an idle connection is sent nothing else). Such a connection is refused with
    ``DisconnectionError``, and the pool retries the checkout with a new one. A driver that
    does not expose that state is pinged instead. A connection that dies silently (no FIN)
    fails its first statement, as it would after a ping: the request answers UNAVAILABLE.
    """

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        state = _closed_by_server(dbapi_connection.driver_connection)
        if state is None:
            try:
                dbapi_connection.ping(False)
            except Exception as exc:
                raise DisconnectionError("the pooled connection failed its ping") from exc
        elif state:
            raise DisconnectionError("the server closed the pooled connection")


def _closed_by_server(driver_connection: Any) -> bool | None:
    """True if the server closed this idle asyncmy connection; None if it cannot be told."""
    proto = getattr(driver_connection, "_proto", None)
    if proto is None or not hasattr(driver_connection, "_transport"):
        return None
    transport = driver_connection._transport
    if transport is None:
        return True
    try:
        return bool(proto.eof or proto.exc is not None or proto.length > proto.pos or transport.is_closing())
    except AttributeError:
        return None


def _limit_mysql_statements(engine: AsyncEngine, timeout_ms: int) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SELECT VERSION()")
        (version,) = cursor.fetchone()
        if "mariadb" in str(version).lower():
            # Seconds, fractions allowed; applies to every statement, not only SELECTs.
            cursor.execute(f"SET SESSION max_statement_time = {timeout_ms / 1000:.3f}")
        else:
            # MySQL has no max_statement_time; max_execution_time (ms) covers SELECTs only.
            cursor.execute(f"SET SESSION max_execution_time = {int(timeout_ms)}")
        cursor.close()


def _limit_sqlite_statements(engine: AsyncEngine, timeout_ms: int) -> None:
    """SQLite calls the progress handler every few thousand VM instructions, on the driver's
    thread; a non-zero answer interrupts the statement ("interrupted"). The deadline lives
    in the pooled connection's ``info``: set before each statement, cleared after it (or its
    failure), so a COMMIT or an idle connection never finds a stale one."""
    timeout_s = timeout_ms / 1000

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        info = record.info

        def past_deadline() -> int:
            deadline = info.get(_DEADLINE)
            return 1 if deadline is not None and time.monotonic() > deadline else 0

        await_(dbapi_connection.driver_connection.set_progress_handler(past_deadline, _PROGRESS_STEPS))

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _start(conn: Any, *_: Any) -> None:
        conn.connection.info[_DEADLINE] = time.monotonic() + timeout_s

    @event.listens_for(engine.sync_engine, "after_cursor_execute")
    def _stop(conn: Any, *_: Any) -> None:
        conn.connection.info.pop(_DEADLINE, None)

    @event.listens_for(engine.sync_engine, "handle_error")
    def _failed(context: Any) -> None:
        conn = context.connection
        if conn is not None and not conn.closed and not conn.invalidated:
            conn.connection.info.pop(_DEADLINE, None)


def _sqlite_file(database: str | None) -> str | None:
    """The database file of a SQLite URL; None for an in-memory or ``file:`` URI database."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database


def _configure_sqlite(engine: AsyncEngine, file: str | None) -> None:
    """WAL, the busy timeout, ``BEGIN IMMEDIATE`` for write transactions and, for a database
    file, the process's write queue (``app.db.sqlite_writer``; docs/operating/sqlite.md)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Stop the driver from issuing its own deferred BEGIN; we issue BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        if not file:  # a file's driver waits for other processes' locks itself (app.db.sqlite_driver)
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Read-only sessions (see create_read_sessionmaker) take no lock up front: in WAL mode
        # readers and the one writer never wait for each other.
        if connection.get_execution_options().get(READ_ONLY_OPTION):
            _begin(connection, "BEGIN")
            return
        if file:
            sqlite_writer.acquire(connection, file, SQLITE_BUSY_TIMEOUT_MS / 1000)
        _begin(connection, "BEGIN IMMEDIATE")

    def _begin(connection: Any, sql: str) -> None:
        if not file:
            connection.exec_driver_sql(sql)
            return
        # Straight to the driver: SQLAlchemy's path for a statement (an execution context,
        # the statement events, a result) costs more than the BEGIN itself on the loop.
        driver = connection.connection.driver_connection
        try:
            if not driver.begin_now(sql):
                await_(driver.statement(sql, (), False))
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc

    pool = engine.sync_engine.pool

    @event.listens_for(pool, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        sqlite_writer.release(record)

    @event.listens_for(pool, "detach")
    def _on_detach(_dbapi_connection: Any, record: Any) -> None:
        sqlite_writer.release(record)

    @event.listens_for(pool, "invalidate")
    def _on_invalidate(dbapi_connection: Any, record: Any, _exc: BaseException | None) -> None:
        _roll_back_dropped(dbapi_connection)
        sqlite_writer.release(record)


def _roll_back_dropped(dbapi_connection: Any) -> None:
    """End the transaction of a connection SQLAlchemy drops (a task cancelled mid-statement
    does that), before it is closed, so that the next writer gets the lock at once.

    ``interrupt`` stops the statement still running on the driver's thread
    (``sqlite3_interrupt`` may be called from any thread); the ROLLBACK then runs there next.
    Closing alone was not enough with aiosqlite's own cursors: the cancelled statement's cursor
    was still referenced (by the traceback), so SQLite deferred the close, and the rollback
    with it, until the garbage collector found the cursor; the database stayed write-locked
    for the whole busy timeout (30 s) meanwhile. (``app.db.sqlite_driver`` closes every cursor
    with its statement; a ``:memory:`` or ``file:`` database still uses aiosqlite's.)"""
    driver = getattr(dbapi_connection, "driver_connection", None)
    raw = getattr(driver, "_connection", None)  # aiosqlite's sqlite3 connection, None once closed
    if driver is None or raw is None:
        return
    raw.interrupt()
    if not in_greenlet():
        return  # garbage collection of a lost connection: nothing can be awaited here
    try:
        await_(asyncio.shield(driver.rollback()))
    except Exception:  # it failed or was never needed: the connection is being closed anyway
        return


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


def create_read_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that only read. On SQLite they begin a plain (deferred) transaction instead
    of taking the write lock; elsewhere they are ordinary sessions. Never write with them:
    a deferred transaction that tries to write can fail with "database is locked"."""
    return async_sessionmaker(
        engine.execution_options(**{READ_ONLY_OPTION: True}), expire_on_commit=False, autoflush=False
    )


def is_mysql(engine: AsyncEngine) -> bool:
    return engine.dialect.name in ("mysql", "mariadb")


# MariaDB/MySQL's "Deadlock found when trying to get lock; try restarting transaction": the
# victim's transaction was rolled back whole. "Lock wait timeout exceeded" (only when
# ENVERIF_DB_STATEMENT_TIMEOUT_MS is off or longer than innodb_lock_wait_timeout: a statement
# cut short by max_statement_time is error 1969, and is not retried, since a slow query run
# again is only slower) rolls back the statement; leaving ``session.begin()`` with the error
# rolls back the rest. Either way nothing of the transaction is left: running it again is safe.
MYSQL_DEADLOCK = 1213
MYSQL_LOCK_WAIT_TIMEOUT = 1205
MYSQL_LOCK_CONFLICTS = frozenset({MYSQL_DEADLOCK, MYSQL_LOCK_WAIT_TIMEOUT})
DEADLOCK_ATTEMPTS = 3


def is_lock_conflict(exc: BaseException) -> bool:
    """A deadlock's victim or a lock wait that timed out (MariaDB/MySQL; SQLite has neither:
    its one writer waits for the write lock, up to its busy timeout)."""
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    return isinstance(exc, OperationalError) and len(args) > 0 and args[0] in MYSQL_LOCK_CONFLICTS


async def retry_deadlocks(transaction: Callable[[], Awaitable[T]]) -> T:
    """Run ``transaction`` again when the database chose it as a deadlock's victim, or its
    wait for a row lock timed out: a few times, after a short random pause.

    ``transaction`` must be one whole transaction that sends nothing outside the database
    before it commits (publishing and enqueueing after commit are fine: a failed attempt
    never got there). The write paths that can race use it (docs/architecture.md#lock-order)."""
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return await transaction()
        except OperationalError as exc:
            if attempt == DEADLOCK_ATTEMPTS or not is_lock_conflict(exc):
                raise
            await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)
    raise AssertionError("unreachable")
