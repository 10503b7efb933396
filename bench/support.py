"""What the benchmarks share: a fresh, migrated MariaDB database for one run, and the login
to it of a raw asyncmy script."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db import migrate
from app.db.session import create_engine
from app.domain.agents import Role
from app.services import auth
from app.settings import Settings


async def create_database(
    server_url: str, *, keep: bool = False
) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A new database on ``server_url``'s server, migrated to head: its URL, and the coroutine
    function that drops it (with ``keep``, it only prints the database's name instead)."""
    name = f"enverif_bench_{uuid.uuid4().hex[:8]}"
    server = create_engine(server_url)
    async with server.begin() as conn:
        await conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()

    async def drop() -> None:
        if keep:
            print(f"kept database {name}")
        else:
            async with server.begin() as conn:
                await conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        await server.dispose()

    return url, drop


def asyncmy_login(database_url: str) -> dict[str, Any]:
    """``asyncmy.connect``'s (or ``create_pool``'s) arguments for the database of a SQLAlchemy
    URL, in one transaction per COMMIT and utf8mb4, as Enverif connects; through the URL's
    ``unix_socket`` when it names one, as Enverif's engine does."""
    url = make_url(database_url)
    login: dict[str, Any] = {
        "host": url.host,
        "port": url.port or 3306,
        "user": url.username,
        "password": url.password or "",
        "db": url.database,
        "autocommit": False,
        "charset": "utf8mb4",
    }
    if "unix_socket" in url.query:
        login["unix_socket"] = url.query["unix_socket"]
    return login


@contextlib.asynccontextmanager
async def bench_settings(server_url: str, redis_url: str) -> AsyncIterator[Settings]:
    """Settings for a fresh, migrated MariaDB database and a Redis key prefix of its own;
    afterwards the database is dropped and the prefix's keys deleted."""
    url, drop_database = await create_database(server_url)
    settings = Settings(database_url=url, redis_url=redis_url,
                        redis_prefix=f"enverif-bench-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        yield settings
    finally:
        redis = Redis.from_url(redis_url)
        async for key in redis.scan_iter(match=f"*{settings.redis_prefix}*"):
            await redis.delete(key)
        await redis.aclose()
        await drop_database()


async def operator_workspace(rt: Any, name: str) -> tuple[int, auth.Principal]:
    """A new workspace: its id, and an OPERATOR principal in it to start runs as."""
    async with rt.sessionmaker() as session:
        workspace, _ = await auth.create_workspace(session, name=name)
    return workspace.id, auth.Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
