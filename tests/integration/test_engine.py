"""The run engine's defects from review, each reproduced through the layer a user touches,
with real worker processes (``enverif worker``) where a crash or a process boundary matters
and an in-process arq worker where the test has to reach inside (a skewed clock, a slow
publish)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DataError

from app.clock import utcnow
from app.db.clock import db_now
from app.db.orm import Agent, Run, RunEvent, RunStep
from app.graphql.ids import from_global_id, to_global_id
from app.services.runtime import open_runtime
from tests.conftest import stop_worker
from tests.support.graphql import CREATE_AGENT
from tests.support.runs import CANCEL_RUN, DECIDE, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server
from tests.support.trees import overwrite_agent_config, waiting_parent_with_child
from tests.support.workers import WORKER_LOGS, install_plugins, spawn_worker

ALLOW_ALL = {"default": "ALLOW"}


async def test_a_run_woken_by_twelve_approvals_succeeds_and_sends_each_key_once(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    """Wake-ups are not crashes: only abandoned claims count toward ENVERIF_MAX_ATTEMPTS (10)."""
    async with sink_server() as (sink, url):
        steps: list[dict[str, Any]] = [
            {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": n}}} for n in range(12)
        ]
        agent = await scripted_agent(gql, workspace.admin, steps=[*steps, {"final": "done"}])
        processes.append(spawn_worker(settings, ENVERIF_MAX_ATTEMPTS="10"))
        run_id = await start_run(gql, workspace.operator, agent)
        for _ in range(12):
            run = await wait_run(gql, workspace.viewer, run_id, {"WAITING_APPROVAL", "FAILED"}, timeout_s=30)
            assert run["status"] == "WAITING_APPROVAL", run
            [approval] = run["pendingApprovals"]
            await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=workspace.operator)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    assert run["status"] == "SUCCEEDED", run
    keys = [s["id"] for s in run["steps"] if s["tool"] == "webhook.post"]
    assert len(keys) == 12
    async with sessionmaker() as session:
        row = await session.get_one(Run, from_global_id(run_id, "Run"))
    assert row.attempt == 13 and row.abandoned_claims == 0
    for step in await _steps(sessionmaker, row.id):
        if step.tool == "webhook.post":
            assert sink.completions(str(step.id)) == 1


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    log = tmp_path / "calls.log"
    log.touch()
    env = install_plugins(
        tmp_path / "site",
        {
            "datetime": "tests.support.plugin_tools:DatetimeTool",
            "huge": "tests.support.plugin_tools:HugeTool",
            "deep": "tests.support.plugin_tools:DeepTool",
            "hang": "tests.support.plugin_tools:HangingTool",
        },
    )
    return {**env, "ENVERIF_TEST_PLUGIN_LOG": str(log)}


def _calls(env: dict[str, str]) -> list[str]:
    return Path(env["ENVERIF_TEST_PLUGIN_LOG"]).read_text().splitlines()


async def test_plugin_results_that_cannot_be_stored_fail_their_step_and_run_once(
    gql, workspace, settings, processes, plugin_env
) -> None:
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[
            {"call": "test.datetime", "args": {}},
            {"call": "test.huge", "args": {}},
            {"call": "test.deep", "args": {}},
            {
                "final": {
                    "a": "{{ results[0].error.code }}",
                    "b": "{{ results[1].error.message }}",
                    "c": "{{ results[2].error.code }}: {{ results[2].error.message }}",
                }
            },
        ],
        tools=["test.*"],
        policy=ALLOW_ALL,
    )
    processes.append(spawn_worker(settings, **plugin_env))
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"]["a"] == "NOT_JSON"
    assert "over the cap" in run["result"]["b"]
    # Too deep for MariaDB: a FAILED step the model sees, not ten crashed attempts.
    assert run["result"]["c"] == "NOT_JSON: the tool result is nested 41 levels deep; at most 32"
    [first, second, third] = run["steps"][:3]
    assert first["status"] == "FAILED" and "datetime" in first["result"]["error"]["message"]
    assert second["status"] == "FAILED" and second["result"]["error"]["code"] == "TOO_LARGE"
    assert third["status"] == "FAILED" and third["result"]["error"]["code"] == "NOT_JSON"
    # Each ran exactly once: a result that cannot be stored is not an infrastructure failure.
    assert sorted(c.split()[0] for c in _calls(plugin_env)) == ["test.datetime", "test.deep", "test.huge"]


async def test_a_hung_tool_is_a_failed_step_after_its_timeout(
    gql, workspace, settings, processes, plugin_env
) -> None:
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[{"call": "test.hang", "args": {}}, {"final": "{{ results[0].error.code }}"}],
        tools=["test.*"],
        policy=ALLOW_ALL,
    )
    processes.append(spawn_worker(settings, lease_s=30, **plugin_env))
    run_id = await start_run(gql, workspace.operator, agent)
    run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)
    assert run["status"] == "SUCCEEDED" and run["result"] == "TIMEOUT", run
    step = run["steps"][0]
    assert step["status"] == "FAILED" and "within 1 s" in step["result"]["error"]["message"]
    assert len(_calls(plugin_env)) == 1


async def test_a_provider_plugin_runs_in_the_worker_that_installed_it(
    gql, workspace, settings, sessionmaker, processes, tmp_path
) -> None:
    """``enverif.providers`` entry points, loaded by a real worker: a plugin's provider runs
    agents there; one that takes a built-in's name (``openai``) is skipped, not obeyed; and a
    process without the plugin (this API) still refuses the name as VALIDATION_FAILED."""
    env = install_plugins(
        tmp_path / "site",
        {},
        providers={
            "echo": "tests.support.plugin_providers:EchoProvider",
            "shadow": "tests.support.plugin_providers:ShadowOpenAI",
        },
    )
    echo = {"provider": "echo", "answer": {"from": "the plugin"}}
    error = await gql.error(
        CREATE_AGENT, {"input": {"name": "echo-agent", "model": echo}}, token=workspace.admin
    )
    assert error["extensions"] == {"code": "VALIDATION_FAILED", "field": "model.provider"}
    assert "scripted, openai" in error["message"]
    # Written as an API process with the plugin installed would have written it.
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "not this"}])
    await overwrite_agent_config(sessionmaker, from_global_id(agent, "Agent"), model=echo)
    worker = spawn_worker(settings, **env)
    processes.append(worker)
    run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent), timeout_s=60)
    assert run["status"] == "SUCCEEDED" and run["result"] == {"echo": {"from": "the plugin"}, "turn": 0}, run
    log = _worker_log(worker.pid)
    assert "skipping provider plugin 'shadow'" in log and "already registered" in log


def _worker_log(pid: int) -> str:
    return Path(WORKER_LOGS[pid]).read_text()


async def test_every_tool_call_has_the_default_timeout(gql, workspace, settings, processes) -> None:
    async with sink_server(delay_s=5.0) as (_sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}},
                {"final": "{{ results[0].error.code }}"},
            ],
            policy=ALLOW_ALL,
        )
        processes.append(spawn_worker(settings, lease_s=30, ENVERIF_TOOL_TIMEOUT_S="0.5"))
        run = await wait_run(
            gql, workspace.viewer, await start_run(gql, workspace.operator, agent), timeout_s=30
        )
    assert run["status"] == "SUCCEEDED" and run["result"] == "TIMEOUT", run
    took = datetime.fromisoformat(run["finishedAt"]) - datetime.fromisoformat(run["startedAt"])
    assert took < timedelta(seconds=4)  # the receiver holds the request for 5 s


@pytest.mark.parametrize("end", ["SUCCEEDED", "FAILED"])
async def test_a_run_that_ends_ends_its_live_descendants(
    gql, workspace, settings, sessionmaker, processes, end
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "done"}])
    parent_gid = await start_run(gql, workspace.operator, agent)
    parent = from_global_id(parent_gid, "Run")
    agent_id = from_global_id(agent, "Agent")
    child = await _live_child(sessionmaker, parent, parent, agent_id, status="WAITING_APPROVAL")
    # Parked (not QUEUED): the sweeper would deliver a QUEUED orphan to the worker first.
    grandchild = await _live_child(sessionmaker, child, parent, agent_id, status="WAITING_CHILD")
    if end == "FAILED":  # an agent whose stored model config no longer validates
        await overwrite_agent_config(sessionmaker, agent_id, model={"provider": "gone"})
    processes.append(spawn_worker(settings))
    run = await wait_run(gql, workspace.viewer, parent_gid, timeout_s=30)
    assert run["status"] == end
    async with sessionmaker() as session:
        rows = {r.id: r for r in await session.scalars(select(Run).where(Run.id.in_([child, grandchild])))}
    for run_id in (child, grandchild):
        assert rows[run_id].status == "CANCELLED"
    assert rows[child].cancel_reason == f"ancestor run {parent} {end.lower()}"
    assert rows[grandchild].cancel_reason == f"ancestor run {parent} {end.lower()}"


async def test_cancelling_a_tree_never_shows_the_parent_resuming(gql, workspace, sessionmaker) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    parent, step_id, child = await waiting_parent_with_child(sessionmaker, from_global_id(agent, "Agent"))
    data = await gql.ok(
        CANCEL_RUN, {"id": to_global_id("Run", parent), "reason": "stop"}, token=workspace.operator
    )
    assert data["cancelRun"]["status"] == "CANCELLED"
    async with sessionmaker() as session:
        events = list(
            await session.scalars(
                select(RunEvent).where(RunEvent.root_run_id == parent).order_by(RunEvent.seq)
            )
        )
        step = await session.get_one(RunStep, step_id)
    statuses = [(e.run_id, e.status) for e in events if e.type == "RUN_STATUS_CHANGED"]
    assert statuses == [(child, "CANCELLED"), (parent, "CANCELLED")]
    # The child's outcome still reached the parent's step.
    assert step.result == {
        "status": "CANCELLED",
        "result": None,
        "error": None,
        "runId": to_global_id("Run", child),
    }
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))


async def test_leases_use_the_database_clock_not_the_hosts(
    gql, workspace, settings, sessionmaker, monkeypatch
) -> None:
    """A worker whose clock is two hours ahead still takes a lease of ENVERIF_LEASE_S."""
    skewed = lambda: utcnow() + timedelta(hours=2)  # noqa: E731
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("app.") and hasattr(module, "utcnow"):
            monkeypatch.setattr(module, "utcnow", skewed)
    from app.services import runs

    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    run_gid = await start_run(gql, workspace.operator, agent)
    rt = await open_runtime(settings)
    try:
        claim = await runs.claim(rt, from_global_id(run_gid, "Run"), owner="skewed")
        assert claim is not None
        assert (await runs.renew_lease(rt, claim.run.id, attempt=claim.attempt)).ours
    finally:
        await rt.close()
    async with sessionmaker() as session:
        row = await session.get_one(Run, claim.run.id)
        now = await db_now(session)
    assert row.lease_expires_at is not None
    assert timedelta(0) < row.lease_expires_at - now <= timedelta(seconds=settings.lease_s + 1)


async def test_start_run_creates_the_run_on_the_database_clock(
    gql, workspace, sessionmaker, monkeypatch
) -> None:
    """An API host whose clock is two hours ahead still creates runs at the database's time,
    as schedules and delegations do: run creation goes through the chokepoint's clock."""
    skewed = lambda: utcnow() + timedelta(hours=2)  # noqa: E731
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("app.") and hasattr(module, "utcnow"):
            monkeypatch.setattr(module, "utcnow", skewed)
    run_id = from_global_id(await start_run(gql, workspace.operator, agent), "Run")
    async with sessionmaker() as session:
        row = await session.get_one(Run, run_id)
        [created] = await session.scalars(select(RunEvent).where(RunEvent.root_run_id == run_id))
        now = await db_now(session)
    assert row.root_run_id == run_id and row.last_event_seq == 1
    assert (created.seq, created.type, created.status) == (1, "RUN_CREATED", "QUEUED")
    for at in (row.created_at, row.queued_at, created.at):
        assert at is not None and timedelta(0) <= now - at < timedelta(minutes=5), (at, now)


async def test_finishing_never_cancels_its_own_after_commit_work(
    gql, workspace, settings, monkeypatch
) -> None:
    """The renewer sees the run ended while the worker still publishes its end: the publish
    must complete (it used to be cancelled, and subscribers never heard the run ended)."""
    from app.services.transitions import outbox
    from workers.main import build_worker

    real = outbox.send
    succeeded_published = asyncio.Event()

    async def slow_send(rt: Any, messages: list[str], wakeups: list[outbox.WakeUp], **kwargs: Any) -> None:
        await asyncio.sleep(1.0)  # longer than a renewal interval (lease 1.2 s / 3)
        await real(rt, messages, wakeups, **kwargs)
        if any('"status":"SUCCEEDED"' in m and "RUN_STATUS_CHANGED" in m for m in messages):
            succeeded_published.set()

    monkeypatch.setattr(outbox, "send", slow_send)
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    w = build_worker(settings.model_copy(update={"lease_s": 1.2}), handle_signals=False)
    task = asyncio.create_task(w.main())
    try:
        run_id = await start_run(gql, workspace.operator, agent)
        assert (await wait_run(gql, workspace.viewer, run_id))["status"] == "SUCCEEDED"
        await asyncio.wait_for(succeeded_published.wait(), 10)
    finally:
        await stop_worker(w, task)


async def test_a_result_the_database_refuses_fails_the_step_without_rerunning_it(
    gql, workspace, worker, monkeypatch
) -> None:
    from app.services.transitions import TreeTx

    real = TreeTx.finish_running_step
    refused: list[int] = []

    async def refusing(self: TreeTx, run: Run, step: RunStep, to: Any, **kw: Any) -> bool:
        if step.tool == "webhook.post" and not refused:
            refused.append(step.id)
            raise DataError("UPDATE run_steps ...", {}, Exception("Data too long for column 'result'"))
        return await real(self, run, step, to, **kw)

    monkeypatch.setattr(TreeTx, "finish_running_step", refusing)
    async with sink_server() as (sink, url):
        agent = await scripted_agent(
            gql,
            workspace.admin,
            steps=[
                {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}},
                # Asked first with the result as the tool returned it, then (after the
                # database refused it) with the failure that was stored instead.
                {"final": "{{ results[0].error.code if results[0].error is defined else 'unstored' }}"},
            ],
            policy=ALLOW_ALL,
        )
        run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
    assert run["status"] == "SUCCEEDED" and run["result"] == "RESULT_NOT_STORED", run
    assert sink.completions(str(refused[0])) == 1 and len(sink.deliveries) == 1
    # Our words, never the driver's message (which can quote the data being stored).
    step = run["steps"][0]
    assert (
        step["result"]["error"]["message"]
        == "the database refused the result: a value does not fit its column"
    )
    assert "Data too long" not in json.dumps(run)


async def _steps(sessionmaker: Any, run_id: int) -> list[RunStep]:
    async with sessionmaker() as session:
        return list(await session.scalars(select(RunStep).where(RunStep.run_id == run_id)))


async def _live_child(sessionmaker: Any, parent: int, root: int, agent_id: int, *, status: str) -> int:
    """A child run written directly (delegation is another issue): linked by parent and root."""
    now = utcnow()
    async with sessionmaker() as session, session.begin():
        agent = await session.get_one(Agent, agent_id)
        link = {"agent_id": agent.id, "agent_name": agent.name, "policy": agent.policy}
        child = Run(workspace_id=agent.workspace_id, agent_id=agent.id, status=status, trigger="DELEGATION",
                    depth=1, parent_run_id=parent, root_run_id=root, policy_chain=[link, link],
                    injected_memory_ids=[], attempt=1, wake_count=1, turns=0, last_event_seq=0,
                    created_at=now, updated_at=now, queued_at=now)  # fmt: skip
        session.add(child)
        await session.flush()
        return child.id
