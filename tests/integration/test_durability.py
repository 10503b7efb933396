"""At-least-once delivery made safe: duplicate deliveries, fencing, lease expiry, resumes."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.clock import utcnow
from app.db.orm import Agent, Run, RunStep
from app.domain.agents import Role
from app.domain.runs import RunStatus
from app.engine.loop import execute_run
from app.engine.tools.registry import default_registry
from app.services import runs
from app.services.auth import Principal
from app.services.runtime import open_runtime
from app.services.sweeper import sweep
from app.services.transitions import LeaseLost, tree_tx
from tests.support.runs import CANCEL_RUN, scripted_agent, start_run
from tests.support.servers import sink_server

ALLOW_WEBHOOK = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


@pytest.fixture
async def rt(settings):
    runtime = await open_runtime(settings)
    yield runtime
    await runtime.close()


@pytest.fixture
async def registry(settings):
    reg = default_registry(settings)
    yield reg
    await reg.aclose()


async def _agent_row(sessionmaker, agent_gid: str) -> Agent:
    from app.graphql.ids import from_global_id

    async with sessionmaker() as session:
        return await session.get_one(Agent, from_global_id(agent_gid, "Agent"))


async def test_a_second_delivery_does_not_run_the_run_twice(
    gql, workspace, rt, registry, sessionmaker
) -> None:
    async with sink_server(delay_s=0.3) as (sink, url):
        agent_gid = await scripted_agent(
            gql,
            workspace.admin,
            steps=[{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}, {"final": "ok"}],
            policy=ALLOW_WEBHOOK,
        )
        agent = await _agent_row(sessionmaker, agent_gid)
        principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
        run = await runs.start_run(rt, principal, agent_id=agent.id, input=None)
        # Two deliveries of the same job at once (arq is at-least-once).
        await asyncio.gather(
            execute_run(rt, registry, run.id, owner="w1"), execute_run(rt, registry, run.id, owner="w2")
        )
    async with sessionmaker() as session:
        done = await session.get_one(Run, run.id)
    assert done.status == RunStatus.SUCCEEDED
    assert done.attempt == 1
    assert len(sink.deliveries) == 1


async def test_a_worker_whose_lease_was_taken_over_cannot_write(gql, workspace, rt, sessionmaker) -> None:
    agent_gid = await scripted_agent(gql, workspace.admin, steps=[{"final": "ok"}])
    agent = await _agent_row(sessionmaker, agent_gid)
    principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
    run = await runs.start_run(rt, principal, agent_id=agent.id, input=None)
    zombie = await runs.claim(rt, run.id, owner="zombie")
    assert zombie is not None and zombie.attempt == 1
    first = zombie.attempt
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Run).where(Run.id == run.id).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    report = await sweep(rt)
    assert report.requeued_expired >= 1
    fresh = await runs.claim(rt, run.id, owner="fresh")
    assert fresh is not None and fresh.attempt == 2
    second = fresh.attempt
    # The zombie wakes up and tries to finish the run: refused, nothing written.
    with pytest.raises(LeaseLost):
        async with tree_tx(rt, run.id) as tx:
            stale = await tx.fenced_run(run.id, first)
            await tx.set_run_status(stale, RunStatus.SUCCEEDED, result="stale")
    assert not (await runs.renew_lease(rt, run.id, attempt=first)).ours
    assert (await runs.renew_lease(rt, run.id, attempt=second)).ours
    async with sessionmaker() as session:
        row = await session.get_one(Run, run.id)
    assert row.status == RunStatus.RUNNING and row.attempt == 2 and row.lease_owner == "fresh"


async def test_a_resumed_run_really_runs_again(gql, workspace, worker, sessionmaker) -> None:
    """Regression guard for arq job-id dedup: every wake-up gets its own job id."""
    from tests.support.runs import DECIDE, start_run, wait_run

    async with sink_server() as (_sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}},
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 2}}},
                {"final": "both"},
            ],
        )
        run_id = await start_run(gql, workspace.operator, agent)
        for _ in range(2):
            run = await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL")
            await gql.ok(
                DECIDE, {"id": run["pendingApprovals"][0]["id"], "approve": True}, token=workspace.operator
            )
        run = await wait_run(gql, workspace.viewer, run_id)
    assert run["status"] == "SUCCEEDED" and run["result"] == "both"
    async with sessionmaker() as session:
        steps = list(await session.scalars(select(RunStep).where(RunStep.workspace_id == workspace.id)))
    assert sorted(s.status for s in steps) == ["SUCCEEDED"] * 3


async def test_cancel_a_queued_run(gql, workspace) -> None:
    # No worker in this test: the run stays QUEUED.
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": 1}])
    run_id = await start_run(gql, workspace.operator, agent)
    data = await gql.ok(CANCEL_RUN, {"id": run_id}, token=workspace.operator)
    assert data["cancelRun"]["status"] == "CANCELLED"


async def test_a_job_held_by_a_vanished_worker_gets_a_new_job_id(
    gql, workspace, rt, sessionmaker, settings
) -> None:
    """arq keeps a job that a SIGKILLed worker took locked for its whole timeout; the sweeper
    must not wait for it."""
    from arq.constants import in_progress_key_prefix

    from app.keys import run_job_id
    from tests.conftest import stop_worker
    from tests.support.runs import wait_run
    from workers.main import build_worker

    agent_gid = await scripted_agent(gql, workspace.admin, steps=[{"final": "ok"}])
    agent = await _agent_row(sessionmaker, agent_gid)
    principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
    run = await runs.start_run(rt, principal, agent_id=agent.id, input=None)
    job_id = run_job_id(settings.redis_prefix, run.id, 1)
    # What a worker leaves behind when it is killed right after taking the job.
    await rt.redis.set(in_progress_key_prefix + job_id, b"1", px=3_600_000)
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Run)
            .where(Run.id == run.id)
            .values(queued_at=utcnow() - timedelta(seconds=settings.lease_s + 1))
        )
    report = await sweep(rt)
    assert report.reissued == 1
    async with sessionmaker() as session:
        assert (await session.get_one(Run, run.id)).wake_count == 2
    w = build_worker(settings, handle_signals=False)
    task = asyncio.create_task(w.main())
    try:
        from app.graphql.ids import to_global_id

        done = await wait_run(gql, workspace.viewer, to_global_id("Run", run.id))
    finally:
        await stop_worker(w, task)
        await rt.redis.delete(in_progress_key_prefix + job_id)
    assert done["status"] == "SUCCEEDED"


async def test_a_run_that_keeps_breaking_its_workers_fails_instead_of_looping(
    gql, workspace, rt, sessionmaker, settings
) -> None:
    agent_gid = await scripted_agent(gql, workspace.admin, steps=[{"final": "ok"}])
    agent = await _agent_row(sessionmaker, agent_gid)
    principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
    run = await runs.start_run(rt, principal, agent_id=agent.id, input=None)
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Run).where(Run.id == run.id).values(abandoned_claims=settings.max_attempts)
        )
    assert await runs.claim(rt, run.id, owner="w") is None
    async with sessionmaker() as session:
        row = await session.get_one(Run, run.id)
    assert row.status == RunStatus.FAILED
    assert row.error is not None and "attempts" in row.error


async def test_an_internal_error_hands_the_run_back(
    gql, workspace, rt, registry, sessionmaker, monkeypatch
) -> None:
    from app.engine import loop

    agent_gid = await scripted_agent(gql, workspace.admin, steps=[{"final": "ok"}])
    agent = await _agent_row(sessionmaker, agent_gid)
    principal = Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
    run = await runs.start_run(rt, principal, agent_id=agent.id, input=None)

    async def broken(self: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(loop.RunExecutor, "drive", broken)
    await execute_run(rt, registry, run.id, owner="w1")
    async with sessionmaker() as session:
        row = await session.get_one(Run, run.id)
    assert row.status == RunStatus.QUEUED and row.attempt == 1 and row.wake_count == 2
    assert row.abandoned_claims == 1  # counts toward ENVERIF_MAX_ATTEMPTS
    monkeypatch.undo()
    await execute_run(rt, registry, run.id, owner="w2")
    async with sessionmaker() as session:
        row = await session.get_one(Run, run.id)
    assert row.status == RunStatus.SUCCEEDED and row.attempt == 2
