"""Resilience with real processes: SIGKILL storms, a poisoned queue head, Redis restarting,
database connections killed, a database that does not answer (docs/operating/outages.md).

The workers are real ``enverif worker`` processes; Redis restarts are of a ``redis-server``
this test starts on a free loopback port (the shared one is never touched), and database
faults kill only this test session's own connections.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from sqlalchemy import select, text

from app.db.orm import Run, RunStep
from app.keys import queue_name
from app.services.health import HEARTBEAT_TTL_S, live_workers
from app.settings import Settings
from tests.conftest import DB_KIND, GraphQLClient
from tests.integration.test_faults import ALLOW_WEBHOOK
from tests.support.graphql import pk
from tests.support.runs import get_run, scripted_agent, start_run, wait_run
from tests.support.servers import Sink, sink_server
from tests.support.workers import exited, spawn_worker

pytestmark = pytest.mark.timeout(240)

ENVERIF = str(Path(sys.executable).parent / "enverif")
LEASE_S = 2.0
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def changed(settings: Settings, **changes: Any) -> Settings:
    # Not model_copy: the derived URLs are cached properties and would be copied stale.
    return Settings(**{**settings.model_dump(), **changes})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_all(
    sessionmaker: Any, workspace_id: int, count: int, timeout_s: float
) -> list[tuple[int, str]]:
    """Every run of the workspace once all ``count`` are terminal; fails with their states."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with sessionmaker() as session:
            rows = list(
                await session.execute(select(Run.id, Run.status).where(Run.workspace_id == workspace_id))
            )
        if len(rows) == count and all(status in TERMINAL for _, status in rows):
            return [(i, s) for i, s in rows]
        if time.monotonic() > deadline:
            async with sessionmaker() as session:
                stuck = list(
                    await session.execute(
                        select(Run.id, Run.status, Run.attempt, Run.wake_count, Run.lease_expires_at).where(
                            Run.workspace_id == workspace_id, Run.status.notin_(TERMINAL)
                        )
                    )
                )
            raise AssertionError(f"runs not finished after {timeout_s}s: {stuck}")
        await asyncio.sleep(0.1)


async def assert_no_recorded_step_repeated(
    sessionmaker: Any, workspace_id: int, sink: Sink, calls: int
) -> None:
    async with sessionmaker() as session:
        steps = list(
            await session.scalars(
                select(RunStep).where(RunStep.workspace_id == workspace_id, RunStep.tool == "webhook.post")
            )
        )
    assert len(steps) == calls
    for step in steps:
        key = str(step.id)
        assert sink.completions(key) == 1, f"step {key} completed {sink.completions(key)} times"
        assert step.finished_at is not None
        late = [
            d for d in sink.deliveries if d.key == key and d.arrived_at > step.finished_at.timestamp() + 0.001
        ]
        assert not late, f"step {key} was sent again after its result was recorded"


def webhook_agent_steps(url: str, calls: int = 3) -> list[dict[str, Any]]:
    hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"run": "{{ run.id }}"}}}
    return [hook] * calls + [{"final": "done"}]


# -- SIGKILL storm ---------------------------------------------------------------------------


async def test_sigkill_storm_every_run_succeeds_and_no_recorded_step_repeats(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    runs, kills = 16, 8
    rng = random.Random(7)
    async with sink_server(delay_s=1.0) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
        )
        live = [spawn_worker(settings, lease_s=LEASE_S) for _ in range(2)]
        processes.extend(live)
        for _ in range(runs):
            await start_run(gql, workspace.operator, agent)
        deadline = time.monotonic() + 30
        while sink.in_flight() < 1:
            assert time.monotonic() < deadline, "no call in flight"
            await asyncio.sleep(0.02)
        # Kill a busy worker about once a second and replace it at once, as a supervisor would.
        kill_log: list[tuple[float, set[str | None]]] = []
        for _ in range(kills):
            await asyncio.sleep(1.0)
            in_flight = {d.key for d in sink.deliveries if d.completed_at is None}
            victim = live.pop(rng.randrange(len(live)))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            kill_log.append((time.time(), in_flight))
            fresh = spawn_worker(settings, lease_s=LEASE_S)
            live.append(fresh)
            processes.append(fresh)
        finished_kills = time.monotonic()
        rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=90)  # a loaded CI box boots slowly
        done_after = time.monotonic() - finished_kills
        assert [s for _, s in rows] == ["SUCCEEDED"] * runs
        await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
    # How long a call that died with its worker took to be sent again by a live one: the
    # time for its lease to expire, the sweeper to requeue the run and a worker to claim it.
    resent_after = []
    for killed_at, keys in kill_log:
        again = [d.arrived_at for d in sink.deliveries if d.key in keys and d.arrived_at > killed_at]
        if again:
            resent_after.append(round(min(again) - killed_at, 2))
    print(f"\nrecovery (lease {LEASE_S}s): killed calls resent after {resent_after}s; "
          f"all runs done {done_after:.1f}s after the last kill")  # fmt: skip
    assert resent_after, "no kill hit a call in flight"
    assert not exited(live), exited(live)


async def test_a_killed_workers_run_moves_to_a_live_worker_within_a_few_leases(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    """The hand-over time on its own (no queue of other runs to wait behind): SIGKILL the
    worker that runs the call; the other one sends it again after the lease expires and the
    sweeper requeues the run."""
    async with sink_server(delay_s=1.0) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url, 2), policy=ALLOW_WEBHOOK
        )
        workers = [spawn_worker(settings, lease_s=LEASE_S) for _ in range(2)]
        processes.extend(workers)
        client = aioredis.from_url(settings.effective_redis_url)
        try:
            deadline = time.monotonic() + 30
            while len(await live_workers(client, settings.redis_prefix)) < 2:
                assert time.monotonic() < deadline, "workers did not start"
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()
        run_id = await start_run(gql, workspace.operator, agent)
        deadline = time.monotonic() + 30
        while sink.in_flight() < 1:
            assert time.monotonic() < deadline, "no call in flight"
            await asyncio.sleep(0.02)
        key = next(d.key for d in sink.deliveries if d.completed_at is None)
        async with sessionmaker() as session:
            owner = await session.scalar(select(Run.lease_owner).where(Run.id == pk(run_id)))
        assert owner is not None
        [victim] = [p for p in workers if f":{p.pid}:" in owner]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.time()
        deadline = time.monotonic() + 10 * LEASE_S
        while not [d for d in sink.deliveries if d.key == key and d.arrived_at > killed_at]:
            assert time.monotonic() < deadline, "the killed call was never sent again"
            await asyncio.sleep(0.02)
        moved_after = (
            min(d.arrived_at for d in sink.deliveries if d.key == key and d.arrived_at > killed_at)
            - killed_at
        )
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    print(
        f"\nhand-over (lease {LEASE_S}s, sweep 1s): the killed call was sent again after {moved_after:.2f}s"
    )
    assert run["status"] == "SUCCEEDED"
    assert moved_after < 2 * LEASE_S + 2  # lease expiry + one sweep interval + claim, with slack


async def test_a_poisoned_queue_head_does_not_stop_work(gql, workspace, settings, processes) -> None:
    """What a storm of kills leaves behind: hundreds of queue entries at the head whose jobs
    are marked in progress for an hour (arq's default: job timeout + 10 s) by workers that
    no longer exist. arq workers read only the head of the queue and skip such entries; the
    sweeper (its own task, not a job behind them) removes the ones the database says are
    dead, and new runs start."""
    client = aioredis.from_url(settings.effective_redis_url)
    try:
        async with client.pipeline(transaction=False) as pipe:
            for n in range(300):
                job_id = f"{settings.redis_prefix}:run:{900_000_000 + n}:1"
                pipe.zadd(queue_name(settings.redis_prefix), {job_id: 1 + n})  # oldest first
                pipe.psetex(f"arq:in-progress:{job_id}", 3_610_000, b"1")
            await pipe.execute()
        agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ input.n }}"}])
        run_ids = [await start_run(gql, workspace.operator, agent, {"n": n}) for n in range(5)]
        processes.append(spawn_worker(settings, lease_s=LEASE_S))
        deadline = time.monotonic() + 30
        for run_id in run_ids:
            while (run := await get_run(gql, workspace.viewer, run_id))["status"] != "SUCCEEDED":
                assert time.monotonic() < deadline, f"run stuck behind the poisoned head: {run}"
                await asyncio.sleep(0.1)
        left = await client.zrangebyscore(queue_name(settings.redis_prefix), 0, 1000)
        assert not [m for m in left if b":run:9000" in m]
    finally:
        await client.aclose()


async def test_a_run_longer_than_the_job_timeout_is_handed_back_and_finishes(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    """arq cancels a job at ENVERIF_JOB_TIMEOUT_S even though the run's lease is fine: the
    run is handed back at once and resumes after its last recorded step."""
    async with sink_server(delay_s=4.0) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url, 4), policy=ALLOW_WEBHOOK
        )
        processes.append(spawn_worker(settings, lease_s=LEASE_S, ENVERIF_JOB_TIMEOUT_S="10"))
        run_id = await start_run(gql, workspace.operator, agent)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=90)
        assert run["status"] == "SUCCEEDED", run
        await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 4)
    async with sessionmaker() as session:
        attempts = await session.scalar(select(Run.attempt).where(Run.id == pk(run_id)))
    assert attempts is not None and attempts >= 2  # it was claimed again after the timeout


async def test_healthz_reports_the_oldest_queued_run(gql, client, workspace) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    await start_run(gql, workspace.operator, agent)  # no worker of this session runs now
    await asyncio.sleep(0.3)
    body = (await client.get("/healthz")).json()
    assert body["database"] == "ok" and body["redis"] == "ok"
    assert body["oldestQueuedAgeS"] is not None and body["oldestQueuedAgeS"] >= 0.2


# -- liveness --------------------------------------------------------------------------------


def worker_check(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "ENVERIF_HOME": str(settings.home),
        "ENVERIF_DATABASE_URL": settings.effective_database_url,
        "ENVERIF_REDIS_URL": settings.effective_redis_url,
        "ENVERIF_REDIS_PREFIX": settings.redis_prefix,
    }
    return subprocess.run(
        [ENVERIF, "worker", "--check", *args], env=env, capture_output=True, text=True, timeout=30
    )


async def test_liveness_follows_worker_processes(gql, client, settings, processes) -> None:
    mine = settings.model_copy(update={"redis_prefix": f"{settings.redis_prefix}-live"})
    assert worker_check(mine).returncode == 1
    worker = spawn_worker(mine, lease_s=LEASE_S)
    processes.append(worker)
    deadline = time.monotonic() + 30
    while (check := worker_check(mine, "--this-host")).returncode != 0:
        assert time.monotonic() < deadline, check.stdout + check.stderr
        await asyncio.sleep(0.2)
    assert check.stdout.strip() == "1 worker alive on this host"
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    killed = time.monotonic()
    while worker_check(mine).returncode != 1:
        assert time.monotonic() - killed < HEARTBEAT_TTL_S + 5
        await asyncio.sleep(0.2)
    print(f"\nliveness: a SIGKILLed worker stopped counting after {time.monotonic() - killed:.1f}s")


# -- Redis restarting --------------------------------------------------------------------------


@contextmanager
def redis_server(tmp: Path) -> Iterator[tuple[int, Any, Any]]:
    """A private redis-server on a free loopback port, persisted to an append-only file so a
    restart keeps its data (a restart, not a flush). Yields (port, stop, start)."""
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--dir", str(tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def stop() -> None:
        proc = procs[-1]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    start()
    try:
        yield port, stop, start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@asynccontextmanager
async def api(settings: Settings) -> AsyncIterator[GraphQLClient]:
    from app.main import create_app

    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://enverif.test") as http:
            yield GraphQLClient(http)


async def test_redis_restart_under_load_workers_stay_up_and_runs_finish(
    workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    runs = 10
    with redis_server(tmp_path) as (port, stop_redis, start_redis):
        mine = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"})
        async with sink_server(delay_s=0.3) as (sink, url), api(mine) as gql:
            agent = await scripted_agent(
                gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
            )
            workers = [spawn_worker(mine, lease_s=LEASE_S) for _ in range(2)]
            processes.extend(workers)
            for _ in range(runs):
                await start_run(gql, workspace.operator, agent)
            deadline = time.monotonic() + 30
            while sink.in_flight() < 1:
                assert time.monotonic() < deadline, "no call in flight"
                await asyncio.sleep(0.02)

            stop_redis()
            # A worker started while Redis is down waits for it instead of exiting.
            late = spawn_worker(mine, lease_s=LEASE_S)
            processes.append(late)
            await asyncio.sleep(3.0)
            assert not exited([*workers, late]), exited([*workers, late])
            start_redis()
            back = time.monotonic()

            rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=60)
            print(f"\nredis restart: every run finished {time.monotonic() - back:.1f}s after Redis returned")
            assert [s for _, s in rows] == ["SUCCEEDED"] * runs
            await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
            assert not exited([*workers, late]), exited([*workers, late])
            client = aioredis.from_url(mine.effective_redis_url)
            try:
                deadline = time.monotonic() + 15
                while len(await live_workers(client, mine.redis_prefix)) < 3:
                    assert time.monotonic() < deadline, "not every worker reports liveness after the outage"
                    await asyncio.sleep(0.2)
            finally:
                await client.aclose()


# -- the database ----------------------------------------------------------------------------


async def _kill_session_connections(engine: Any) -> int:
    """KILL every connection to this session's schema except the killer's own (the shared
    MariaDB server itself is never restarted)."""
    async with engine.connect() as conn:
        ids = (
            await conn.execute(
                text(
                    "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id != CONNECTION_ID()"
                )
            )
        ).scalars()
        killed = 0
        for connection_id in list(ids):
            try:
                await conn.execute(text(f"KILL CONNECTION {int(connection_id)}"))
                killed += 1
            except Exception:  # it ended by itself meanwhile
                pass
    return killed


@pytest.mark.skipif(DB_KIND != "mysql", reason="server-side connection kills")
async def test_database_connections_killed_under_load(
    gql, workspace, settings, sessionmaker, engine, processes
) -> None:
    runs = 10
    async with sink_server(delay_s=0.3) as (sink, url):
        agent = await scripted_agent(
            gql, workspace.admin, steps=webhook_agent_steps(url), policy=ALLOW_WEBHOOK
        )
        workers = [spawn_worker(settings, lease_s=LEASE_S) for _ in range(2)]
        processes.extend(workers)
        for _ in range(runs):
            await start_run(gql, workspace.operator, agent)

        codes: list[str] = []
        stop = asyncio.Event()

        async def client_traffic() -> None:
            # A client reading while connections die: it sees data or UNAVAILABLE, never INTERNAL.
            while not stop.is_set():
                response = await gql.http.post(
                    "/graphql",
                    json={"query": "{ runs(first: 50) { edges { node { id status } } } }"},
                    headers={"Authorization": f"Bearer {workspace.viewer}"},
                )
                body = response.json()
                for error in body.get("errors") or []:
                    codes.append(error["extensions"]["code"])
                    assert response.status_code in (200, 503)
                await asyncio.sleep(0.01)

        traffic = asyncio.create_task(client_traffic())
        killed = 0
        for _ in range(3):
            await asyncio.sleep(1.0)
            killed += await _kill_session_connections(engine)
        stop.set()
        await traffic
        assert killed > 0
        rows = await wait_all(sessionmaker, workspace.id, runs, timeout_s=60)
        assert [s for _, s in rows] == ["SUCCEEDED"] * runs
        await assert_no_recorded_step_repeated(sessionmaker, workspace.id, sink, 3 * runs)
        assert set(codes) <= {"UNAVAILABLE"}, codes
        assert not exited(workers), exited(workers)


@pytest.mark.parametrize("where", ["closed-port", "missing-sqlite-path"])
async def test_unreachable_database_is_unavailable_with_503(settings, workspace, tmp_path, where) -> None:
    # A directory where the SQLite file should be: SQLite cannot open it ("unable to open").
    (tmp_path / "enverif.db").mkdir()
    url = (
        f"mysql+asyncmy://root@127.0.0.1:{free_port()}/enverif"
        if where == "closed-port"
        else f"sqlite+aiosqlite:///{tmp_path}/enverif.db"
    )
    down = changed(settings, database_url=url)
    async with api(down) as gql:
        response = await gql.http.post(
            "/graphql",
            json={"query": "{ agents(first: 1) { edges { cursor } } }"},
            headers={"Authorization": f"Bearer {workspace.viewer}"},
        )
        assert response.status_code == 503, response.text
        assert int(response.headers["retry-after"]) >= 1
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        assert error["extensions"]["code"] == "UNAVAILABLE"
        assert error["extensions"]["retryAfter"] >= 1
        assert "127.0.0.1" not in response.text and "sqlite" not in response.text.lower()

        health = await gql.http.get("/healthz")
        assert health.status_code == 503
        assert health.json()["database"].startswith("error")


async def test_a_sql_bug_stays_internal(gql, workspace, monkeypatch) -> None:
    """Precise detection: a statement the database rejects is a bug, not an outage."""
    from sqlalchemy import literal_column, select

    from app.db.orm import Agent
    from app.services import reads

    def broken(workspace_id: int, statuses: Any = None) -> Any:
        return select(Agent).where(literal_column("no_such_column") == 1)

    monkeypatch.setattr(reads, "agents_query", broken)
    response = await gql.http.post(
        "/graphql",
        json={"query": "{ agents { edges { cursor } } }"},
        headers={"Authorization": f"Bearer {workspace.viewer}"},
    )
    assert response.status_code == 200
    assert response.json()["errors"][0]["extensions"] == {"code": "INTERNAL"}


@pytest.mark.skipif(DB_KIND != "sqlite", reason="uses its own SQLite file; once is enough")
async def test_a_worker_started_without_its_database_waits_and_then_works(
    settings, tmp_path, processes
) -> None:
    from app.db import migrate
    from app.db.session import create_engine, create_sessionmaker
    from app.services import auth

    db_path = tmp_path / "later.db"
    db_path.mkdir()  # a directory where the database should be: SQLite cannot open it
    mine = changed(
        settings,
        database_url=f"sqlite+aiosqlite:///{db_path}",
        redis_prefix=f"{settings.redis_prefix}-later",
    )
    worker = spawn_worker(mine, lease_s=LEASE_S)
    processes.append(worker)
    await asyncio.sleep(4.0)
    assert worker.poll() is None, "the worker exited instead of waiting for its database"

    db_path.rmdir()
    engine = create_engine(mine.effective_database_url)
    try:
        await migrate.upgrade(engine)
        async with create_sessionmaker(engine)() as session:
            _, admin = await auth.create_workspace(session, name="later")
    finally:
        await engine.dispose()
    async with api(mine) as gql:
        agent = await scripted_agent(gql, admin, steps=[{"final": "late but fine"}])
        run = await wait_run(gql, admin, await start_run(gql, admin, agent), timeout_s=60)
    assert run["status"] == "SUCCEEDED" and run["result"] == "late but fine"
