"""One database session for all the reads of one HTTP request (MariaDB/MySQL).

A session per read costs a pool checkout and two ROLLBACKs (the session's, then the pool's
reset) per resolver, DataLoader batch and token lookup; one per request costs them once.
Resolvers run concurrently and an ``AsyncSession`` must not be used by two tasks at once,
so uses take turns (a lock held for the ``async with`` block). Every use site awaits the
principal before it opens its block, so no block waits on another one (no deadlock).

Only for queries (a mutation, which takes write connections from the same pool, reads with
short sessions: see ``FreshLoadersPerOperation``), and only for MariaDB/MySQL under READ
COMMITTED, where every statement sees what was committed before it. On SQLite a read transaction is a snapshot taken at its first read, so one kept for
the request could hide the request's own writes; there (no network round trip to save)
every use gets a session of its own, as before. Websocket contexts, which live for the
connection, never share one either.

A block that fails (a statement timed out, the server went away) rolls the shared
session back, so the next block starts a fresh transaction (and a fresh connection after a
disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

logger = logging.getLogger(__name__)


class RequestSession:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self._session: AsyncSession | None = None
        self._lock = asyncio.Lock()

    @property
    def opened(self) -> bool:
        return self._session is not None

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncSession]:
        async with self._lock:
            if self._session is None:
                self._session = self._sessionmaker()
            try:
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
