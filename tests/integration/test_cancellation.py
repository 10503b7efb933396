"""A cancellation stays a cancellation: cancelling a task in the middle of a database
statement raises ``CancelledError`` in it, with Enverif's engine exactly as with a plain
SQLAlchemy engine, on MariaDB and on SQLite; and what the run loop does about it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.orm import Agent, Run
from app.db.session import READ_ONLY_OPTION, create_engine, create_sessionmaker
from app.engine.tools.registry import default_registry
from app.graphql.ids import from_global_id
from app.services import runs
from app.services.runtime import Runtime, open_runtime
from app.settings import Settings
from tests.conftest import DB_KIND
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.integration.test_resilience import changed, webhook_agent_steps
from tests.support.runs import create_agent
from tests.support.servers import sink_server

# A statement that runs for about a second: SLEEP on MariaDB; on SQLite, a recursive count.
SLOW = (
    "SELECT SLEEP(1)"
    if DB_KIND == "mysql"
    else "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000000) SELECT max(n) FROM c"
)


async def _cancelled_mid_statement(
    engine: AsyncEngine, body: Callable[[AsyncEngine], Awaitable[Any]]
) -> BaseException | None:
    task = asyncio.create_task(body(engine))
    await asyncio.sleep(0.2)  # well inside the statement
    assert not task.done()
    task.cancel()
    try:
        await asyncio.wait_for(task, 30)
    except BaseException as exc:
        return exc
    return None


async def _in_session_begin(engine: AsyncEngine) -> None:
    async with create_sessionmaker(engine)() as session, session.begin():
        await session.execute(text(SLOW))


async def _in_engine_begin(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(SLOW))


@pytest.mark.parametrize("body", [_in_session_begin, _in_engine_begin], ids=["session.begin", "engine.begin"])
@pytest.mark.parametrize("kind", ["enverif", "plain"])
async def test_a_cancel_mid_statement_raises_cancelled_error(
    settings: Settings, kind: str, body: Any, tmp_path: Path
) -> None:
    # SQLite: a file of its own, so that a cancelled transaction that kept the write lock (see
    # test_sqlite_locking.py) would not hold up the session's database, which all tests share.
    url = (
        settings.effective_database_url if DB_KIND == "mysql" else f"sqlite+aiosqlite:///{tmp_path}/cancel.db"
    )
    engine = (
        create_engine(url, statement_timeout_ms=30_000) if kind == "enverif" else create_async_engine(url)
    )
    try:
        raised = await _cancelled_mid_statement(engine, body)
        assert isinstance(raised, asyncio.CancelledError), repr(raised)
        # The pool is fine afterwards: the next statement works (a read, for that lock).
        async with engine.execution_options(**{READ_ONLY_OPTION: True}).connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


# -- the run loop ------------------------------------------------------------------------------


async def _webhook_run(gql: Any, workspace: Any, rt: Runtime, sessionmaker: Any, url: str, calls: int) -> int:
    from app.domain.agents import Role
    from app.services.auth import Principal

    agent_gid = await create_agent(
        gql, workspace.admin, steps=webhook_agent_steps(url, calls), policy=ALLOW_WEBHOOK
    )
    async with sessionmaker() as session:
        agent = await session.get_one(Agent, from_global_id(agent_gid, "Agent"))
    principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
    return (await runs.start_run(rt, principal, agent_id=agent.id, input=None)).id


def _renewers() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if "keep_lease" in repr(t.get_coro())]


async def test_a_renewer_stops_with_its_job_even_when_its_cancel_is_lost(
    gql, workspace, settings, sessionmaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renewer is cancelled while a renewal is in flight, and the renewal turns the
    cancellation into an error (what the pool listener used to do): it must stop all the
    same, instead of extending the lease of a run nobody executes."""
    from app.engine.loop import execute_run

    rt = await open_runtime(changed(settings, lease_s=1.0))
    registry = default_registry(settings)
    renewing = asyncio.Event()

    async def renewal_that_loses_its_cancel(*_: Any, **__: Any) -> runs.LeaseCheck:
        renewing.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("Can't reconnect until invalid transaction is rolled back") from None
        return runs.LeaseCheck(ours=True)

    monkeypatch.setattr(runs, "renew_lease", renewal_that_loses_its_cancel)
    try:
        async with sink_server(delay_s=0.6) as (_, url):
            run_id = await _webhook_run(gql, workspace, rt, sessionmaker, url, calls=2)
            job = asyncio.create_task(execute_run(rt, registry, run_id, owner="renewer-test"))
            await asyncio.wait_for(renewing.wait(), 10)  # a renewal is in flight
            await asyncio.wait_for(job, 20)  # the job ends, and so does its renewer
        assert _renewers() == []
        async with sessionmaker() as session:
            assert (await session.get_one(Run, run_id)).status == "SUCCEEDED"
    finally:
        await registry.aclose()
        await rt.close()


@pytest.mark.skipif(DB_KIND != "mysql", reason="SELECT SLEEP; SQLite's cancel is covered above")
async def test_a_job_cancelled_mid_statement_hands_its_run_back_cleanly(
    gql, workspace, settings, sessionmaker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop (or arq's job timeout) cancels a job while it waits on the database: that is a
    clean hand-back (the run QUEUED again, no abandoned claim counted), not "broke off"."""
    from app.engine.loop import execute_run
    from app.engine.persist import RunWrites

    rt = await open_runtime(settings)
    registry = default_registry(settings)
    in_statement = asyncio.Event()
    apply = RunWrites.apply

    async def slow_apply(self: Any, *args: Any) -> Any:
        # The plan's write waits on the database (a lock, a slow disk) when the stop comes.
        async with rt.sessionmaker() as session, session.begin():
            in_statement.set()
            await session.execute(text("SELECT SLEEP(2)"))
        return await apply(self, *args)

    monkeypatch.setattr(RunWrites, "apply", slow_apply)
    try:
        async with sink_server() as (_, url):
            run_id = await _webhook_run(gql, workspace, rt, sessionmaker, url, calls=1)
            job = asyncio.create_task(execute_run(rt, registry, run_id, owner="cancel-test"))
            await asyncio.wait_for(in_statement.wait(), 10)
            await asyncio.sleep(0.3)
            with caplog.at_level(logging.INFO, logger="app.engine.loop"):
                job.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(job, 20)
        async with sessionmaker() as session:
            run = await session.get_one(Run, run_id)
        assert (run.status, run.abandoned_claims) == ("QUEUED", 0)
        assert not [r for r in caplog.records if "broke off" in r.getMessage()]
    finally:
        await registry.aclose()
        await rt.close()
