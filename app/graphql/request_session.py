"""One database session, and so one snapshot, for all the reads of one HTTP query request.

Two reads of one query (a schedule, then its firings; a run, then its steps) through
sessions of their own could straddle a commit and answer with halves of two states. Through
one session they read one state (docs/graphql/guide.md#one-snapshot-per-query):

- MariaDB/MySQL: the engine's connections run under READ COMMITTED, where every statement
  sees what was committed before it; the shared session's transaction is REPEATABLE READ
  (``SET TRANSACTION``, one statement, for that transaction only), whose snapshot InnoDB
  takes at its first read. It also saves the pool checkout and the ROLLBACKs a session per
  resolver, DataLoader batch and token lookup would cost.
- SQLite: a read transaction is a snapshot from its first read already (WAL); the shared
  one lasts the request.

Only for queries: a query writes nothing, so the snapshot hides no write of its own. A
mutation, which must show its own commit in its payload (and takes write connections from
the same pool), reads with short sessions: see ``FreshLoadersPerOperation``. Websocket
contexts, which live for the connection, never share one either.

Resolvers run concurrently and an ``AsyncSession`` must not be used by two tasks at once,
so uses take turns (a lock held for the ``async with`` block). Every use site awaits the
principal before it opens its block, so no block waits on another one (no deadlock).

A block that fails (a statement timed out, the server went away) rolls the shared
session back, so the next block starts a fresh transaction (and a fresh connection after a
disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

logger = logging.getLogger(__name__)

_SNAPSHOT = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


class RequestSession:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], *, repeatable_read: bool) -> None:
        self._sessionmaker = sessionmaker
        self._repeatable_read = repeatable_read
        self._session: AsyncSession | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncSession]:
        async with self._lock:
            if self._session is None:
                self._session = self._sessionmaker()
            try:
                if self._repeatable_read and not self._session.in_transaction():
                    # The next transaction only (the first, or the next after a failed block).
                    await self._session.execute(_SNAPSHOT)
                yield self._session
            except (SQLAlchemyError, OSError):
                with contextlib.suppress(Exception):
                    await self._session.rollback()
                raise

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                await session.close()
            except Exception:  # the connection is gone: the pool replaces it
                logger.debug("closing a request's session failed", exc_info=True)
