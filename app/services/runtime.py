"""Per-process resources shared by the API and the worker: created at start-up (app lifespan
or worker ``on_startup``) and closed at shutdown. No module-level clients."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.session import create_engine, create_read_sessionmaker, create_sessionmaker
from app.dev.embedded import ensure_embedded_redis
from app.domain.agent_versions import AgentConfig
from app.domain.policy import RiskClass
from app.outages import SendOutage
from app.services.token_cache import TokenCache
from app.settings import Settings

BACKGROUND_GRACE_S = 5.0


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    # For reads only (GraphQL queries, loaders, sweeper scans): no write lock on SQLite.
    read_sessionmaker: async_sessionmaker[AsyncSession]
    # One arq pool per process: enqueues jobs and publishes events.
    redis: ArqRedis
    # Best-effort writes that must not hold up a request (recording a token's use: on SQLite
    # a write waits for the one write lock). Tracked so close() lets them finish first.
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    # API processes only (started by the app's lifespan): recently seen tokens.
    token_cache: TokenCache | None = None
    # The risk class of every tool workers register (loaded on first use), for the policy
    # preview (app.services.policy_preview).
    tool_risks: dict[str, RiskClass] | None = None
    # The tools workers register (app.services.agents loads them on first use): a policy
    # rule must match one of them.
    tool_names: frozenset[str] | None = None
    # Their specs by name (risk, argument schema), for checking an operator's edited call.
    tool_specs: dict[str, Any] | None = None
    # Agent versions runs were claimed with, by (id, agent id, number): a version row never
    # changes, so a worker reads each one once (``app.services.memory_injection``).
    pinned_versions: dict[tuple[int, int, int], AgentConfig] = field(default_factory=dict)
    # Workers only: whether a ``runOutput`` subscription watches each run this process
    # executes, as the last commit's round trip to Redis found (``outbox.send``); None where
    # nobody asks (the API, tests calling the engine directly): live output is then always
    # written (app.events.output).
    output_watch: dict[int, bool] | None = None
    # Whether after-commit sends to Redis are failing now, and how many have (``outbox``).
    send_outage: SendOutage = field(default_factory=SendOutage)

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        if self._background:
            _, pending = await asyncio.wait(set(self._background), timeout=BACKGROUND_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.redis.aclose()
        await self.engine.dispose()


def redis_settings(settings: Settings) -> RedisSettings:
    if settings.uses_embedded_redis:
        ensure_embedded_redis(settings)
    rs = RedisSettings.from_dsn(settings.effective_redis_url)
    rs.conn_timeout = 5
    rs.conn_retries = 3
    return rs


async def open_runtime(settings: Settings, *, worker: bool = False) -> Runtime:
    if worker:
        # Each concurrent job holds at most one connection at a time, plus the lease
        # renewals and the sweeper; no pre-ping (see app.db.session.create_engine).
        engine = create_engine(
            settings.effective_database_url, pool_size=max(10, settings.worker_max_jobs + 4), pre_ping=False
        )
    else:
        # Only the API's statements are capped: a worker's work is bounded by its own timeouts.
        engine = create_engine(
            settings.effective_database_url, statement_timeout_ms=settings.db_statement_timeout_ms
        )
    pool = await create_pool(redis_settings(settings), default_queue_name=_queue(settings))
    return Runtime(
        settings=settings,
        engine=engine,
        sessionmaker=create_sessionmaker(engine),
        read_sessionmaker=create_read_sessionmaker(engine),
        redis=pool,
    )


def _queue(settings: Settings) -> str:
    from app.keys import queue_name

    return queue_name(settings.redis_prefix)
