"""The database's clock, for leases (docs/architecture.md).

Lease expiry is set and compared on the database server's clock, never on a worker's: with
several hosts, a worker whose clock runs ahead would otherwise see a live run's lease as
expired and requeue it, and one whose clock runs behind would keep a dead worker's run
stranded. Everything else (event and step timestamps) may use the host clock.

Both dialects store UTC with microseconds (``app.db.orm.UTCDateTime``); the expressions here
produce the same representation, so comparisons with stored values are exact.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import ColumnElement, literal_column, text
from sqlalchemy.ext.asyncio import AsyncSession


def now_sql(dialect: str, *, plus_s: float = 0.0) -> ColumnElement[datetime]:
    """The database's current UTC time (plus ``plus_s`` seconds) as a SQL expression."""
    micros = round(plus_s * 1_000_000)
    if dialect == "sqlite":
        # strftime's %f has milliseconds; pad to the six digits SQLAlchemy stores and parses.
        modifier = f", '{micros / 1_000_000:+.6f} seconds'" if micros else ""
        return literal_column(f"(strftime('%Y-%m-%d %H:%M:%f', 'now'{modifier}) || '000')")
    if micros:
        return literal_column(f"DATE_ADD(UTC_TIMESTAMP(6), INTERVAL {micros} MICROSECOND)")
    return literal_column("UTC_TIMESTAMP(6)")


async def db_now(session: AsyncSession) -> datetime:
    """The database's current UTC time, read in the session's transaction."""
    dialect = session.get_bind().dialect.name
    return as_utc(await session.scalar(text(f"SELECT {now_sql(dialect)}")))


def as_utc(value: object) -> datetime:
    """A value of ``now_sql`` as read back: SQLite returns it as text, MariaDB as a datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC)
