"""Schedules fire: once per fire time whoever ticks, through the path every run takes, with
overlap SKIP recorded on the schedule, and never for a disabled schedule or an idle agent.
Ticks go through the real CLI (``enverif schedules tick``) or the workers' arq cron job, and
runs are executed by real ``enverif worker`` processes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text

from app.db.orm import Run, RunEvent, Schedule, ScheduleFiring
from app.services import schedule_firing
from app.services.runtime import open_runtime
from tests.support.graphql import create_memory, pk
from tests.support.runs import DECIDE, scripted_agent, wait_run
from tests.support.schedules import create_schedule, get_schedule, make_due, tick_cli, tick_many
from tests.support.servers import sink_server
from tests.support.workers import spawn_worker

GREET = [{"final": {"hello": "{{ input.name }}", "memories": "{{ memories | map(attribute='key') | list }}"}}]
# Tests whose schedules outlive them (the session's database is shared, and every worker
# ticks) use a yearly cron: it fires only when a test makes it due.
YEARLY, A_YEAR = "0 0 1 1 *", timedelta(days=367)
UPDATE_AGENT = (
    "mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { status } }"
)
UPDATE_SCHEDULE = (
    "mutation($id: ID!, $input: SchedulePatch!) { updateSchedule(id: $id, input: $input) { id } }"
)


async def _runs_of(sessionmaker: Any, schedule_id: str) -> list[Run]:
    async with sessionmaker() as session:
        return list(await session.scalars(select(Run).where(Run.schedule_id == pk(schedule_id))))


async def test_a_due_schedule_fires_once_through_the_path_every_run_takes(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=GREET)
    await create_memory(gql, workspace.admin, agent, key="tone", value="Be brief")
    schedule = await create_schedule(
        gql, workspace.operator, agent, cron="0 9 * * *", timezone="Europe/Berlin", input={"name": "Ada"}
    )
    # The workers were down for three days: three 9:00s were missed, they fire as one run.
    await make_due(sessionmaker, schedule, ago=timedelta(days=3))

    first, again = await tick_cli(settings), await tick_cli(settings)
    assert (first["fired"], first["skipped"]) == (1, 0), first
    [firing] = first["firings"]
    assert firing["schedule_id"] == schedule["id"] and firing["missed"] == 2
    assert (again["fired"], again["skipped"]) == (0, 0)  # nothing more is due

    processes.append(spawn_worker(settings))
    state = await get_schedule(gql, workspace.viewer, schedule["id"])
    [run] = state["runs"]
    assert run["id"] == firing["run_id"] and run["trigger"] == "SCHEDULE"
    assert run["input"] == {"name": "Ada"}
    done = await wait_run(gql, workspace.viewer, run["id"], timeout_s=30)
    assert done["status"] == "SUCCEEDED", done
    assert done["result"] == {"hello": "Ada", "memories": ["tone"]}  # memory injection, as for any run

    fire_at = datetime.fromisoformat(firing["fire_at"])
    assert datetime.fromisoformat(state["lastFiredAt"]) == fire_at
    assert fire_at.astimezone(UTC) <= datetime.now(UTC) < datetime.fromisoformat(state["nextFireAt"])
    assert [(f["outcome"], f["missed"], f["run"]["id"]) for f in state["firings"]] == [
        ("FIRED", 2, run["id"])
    ]
    async with sessionmaker() as session:
        types = list(
            await session.scalars(
                select(RunEvent.type).where(RunEvent.root_run_id == pk(run["id"])).order_by(RunEvent.seq)
            )
        )
    assert types[0] == "RUN_CREATED" and "MEMORY_INJECTED" in types
    # A daily schedule: gone before its next 9:00 can fire during some later test.
    await gql.ok(
        "mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": schedule["id"]}, token=workspace.operator
    )


async def _until_waiting_for_locks(session: Any, n: int, timeout_s: float = 60) -> None:
    """Until ``n`` transactions wait for a lock (MariaDB). SQLite cannot tell: give the
    processes time to start and block on the write lock (shorter only means less overlap)."""
    if session.get_bind().dialect.name == "sqlite":
        await asyncio.sleep(5)
        return
    deadline = asyncio.get_running_loop().time() + timeout_s
    query = text("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
    async with session.bind.connect() as probe:
        # The server offers no event to wait on. InnoDB refreshes INNODB_TRX only when it was
        # not read for 100 ms: polled faster, the view never changes.
        while (waiting := await probe.scalar(query)) < n:
            assert asyncio.get_running_loop().time() < deadline, f"only {waiting} ticks reached the row lock"
            await asyncio.sleep(0.25)


async def test_three_processes_ticking_at_once_fire_each_schedule_once(
    gql, workspace, settings, sessionmaker
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=GREET)
    schedules = [
        await create_schedule(gql, workspace.operator, agent, cron=YEARLY, overlapPolicy="ALLOW")
        for _ in range(12)
    ]
    for schedule in schedules:
        await make_due(sessionmaker, schedule, ago=A_YEAR)

    # A starting line: hold the first schedule's row lock (on SQLite: the write lock) while the
    # three processes start, so that they all queue up on it and set off together.
    async with sessionmaker() as session, session.begin():
        await session.execute(select(Schedule).where(Schedule.id == pk(schedules[0]["id"])).with_for_update())
        ticks = asyncio.create_task(tick_many(settings, 3))
        await _until_waiting_for_locks(session, 3)
    reports = await ticks

    assert sum(r["fired"] for r in reports) == len(schedules), reports
    fired = sorted(f["schedule_id"] for r in reports for f in r["firings"])
    assert fired == sorted(s["id"] for s in schedules)
    for schedule in schedules:
        assert len(await _runs_of(sessionmaker, schedule["id"])) == 1


async def test_ticks_racing_in_one_process_on_separate_connections_fire_once(
    gql, workspace, settings, sessionmaker
) -> None:
    """The same race with the three ticks' transactions really interleaved: each tick has
    its own engine, all start together, and the database's row lock decides."""
    agent = await scripted_agent(gql, workspace.admin, steps=GREET)
    schedules = [
        await create_schedule(gql, workspace.operator, agent, cron=YEARLY, overlapPolicy="ALLOW")
        for _ in range(8)
    ]
    for schedule in schedules:
        await make_due(sessionmaker, schedule, ago=A_YEAR)
    runtimes = [await open_runtime(settings) for _ in range(3)]
    try:
        reports = await asyncio.gather(*(schedule_firing.tick(rt) for rt in runtimes))
    finally:
        for rt in runtimes:
            await rt.close()
    # Only these schedules: a tick fires whatever else is due in the database too.
    ours = {pk(s["id"]) for s in schedules}
    fired = [f.schedule_id for r in reports for f in r.firings if f.schedule_id in ours]
    assert sorted(fired) == sorted(ours)
    async with sessionmaker() as session:
        for schedule in schedules:
            runs = await session.scalar(select(func.count()).where(Run.schedule_id == pk(schedule["id"])))
            firings = await session.scalar(
                select(func.count()).where(ScheduleFiring.schedule_id == pk(schedule["id"]))
            )
            assert (runs, firings) == (1, 1)


async def test_skip_waits_for_the_previous_run_and_says_why(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    async with sink_server() as (_sink, url):
        steps = [
            {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}},
            {"final": "posted"},
        ]
        agent = await scripted_agent(gql, workspace.admin, steps=steps)
        # Yearly: no fire time of its own comes while the test runs, only the ones it makes due.
        schedule = await create_schedule(gql, workspace.operator, agent, cron=YEARLY)
        assert schedule["overlapPolicy"] == "SKIP"
        processes.append(spawn_worker(settings))

        # The worker ticks too (its cron job): whichever tick gets there first, the
        # schedule's firings tell what happened to each fire time.
        await make_due(sessionmaker, schedule, ago=A_YEAR)
        await tick_cli(settings)
        state = await get_schedule(gql, workspace.viewer, schedule["id"])
        assert [f["outcome"] for f in state["firings"]] == ["FIRED"]
        [first] = state["runs"]
        assert first["trigger"] == "SCHEDULE"
        waiting = await wait_run(
            gql, workspace.viewer, first["id"], {"WAITING_APPROVAL", "FAILED"}, timeout_s=30
        )
        assert waiting["status"] == "WAITING_APPROVAL", waiting

        # The next fire time comes while the run waits for its approval: skipped, and why.
        skipped_at = await make_due(sessionmaker, schedule, ago=A_YEAR)
        await tick_cli(settings)
        state = await get_schedule(gql, workspace.viewer, schedule["id"])
        assert [f["outcome"] for f in state["firings"]] == ["SKIPPED", "FIRED"]
        assert len(state["runs"]) == 1
        assert datetime.fromisoformat(state["lastSkippedAt"]) >= skipped_at
        assert "WAITING_APPROVAL" in state["lastSkipReason"]
        assert state["firings"][0]["run"] is None
        assert "WAITING_APPROVAL" in state["firings"][0]["reason"]

        [approval] = waiting["pendingApprovals"]
        await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=workspace.operator)
        assert (await wait_run(gql, workspace.viewer, first["id"], timeout_s=30))["status"] == "SUCCEEDED"

        # The previous run has ended: the next fire time starts a run again.
        await make_due(sessionmaker, schedule, ago=A_YEAR)
        await tick_cli(settings)
        state = await get_schedule(gql, workspace.viewer, schedule["id"])
        assert [f["outcome"] for f in state["firings"]] == ["FIRED", "SKIPPED", "FIRED"]
        assert len(state["runs"]) == 2


async def test_disabled_schedules_and_idle_agents_never_fire(gql, workspace, settings, sessionmaker) -> None:
    disabled_agent = await scripted_agent(gql, workspace.admin, steps=GREET)
    disabled = await create_schedule(gql, workspace.operator, disabled_agent, cron="* * * * *")
    await make_due(sessionmaker, disabled, ago=timedelta(minutes=5))
    await gql.ok(
        UPDATE_SCHEDULE, {"id": disabled["id"], "input": {"enabled": False}}, token=workspace.operator
    )

    idle = {}
    for status in ("PAUSED", "ARCHIVED"):
        agent = await scripted_agent(gql, workspace.admin, steps=GREET)
        idle[status] = await create_schedule(gql, workspace.operator, agent, cron=YEARLY)
        await gql.ok(UPDATE_AGENT, {"id": agent, "input": {"status": status}}, token=workspace.admin)
        await make_due(sessionmaker, idle[status], ago=A_YEAR)

    report = await tick_cli(settings)
    assert report["fired"] == 0
    assert sorted(f["schedule_id"] for f in report["firings"]) == sorted(s["id"] for s in idle.values())
    assert await _runs_of(sessionmaker, disabled["id"]) == []
    state = await get_schedule(gql, workspace.viewer, disabled["id"])
    assert (state["enabled"], state["nextFireAt"], state["firings"]) == (False, None, [])
    for status, schedule in idle.items():
        assert await _runs_of(sessionmaker, schedule["id"]) == []
        state = await get_schedule(gql, workspace.viewer, schedule["id"])
        assert f"is {status}" in state["lastSkipReason"]
        # Moved on: the idle agent's backlog does not pile up for when it is resumed.
        assert datetime.fromisoformat(state["nextFireAt"]) > datetime.now(UTC)
    assert (await tick_cli(settings))["firings"] == []


@pytest.mark.timeout(240)
async def test_workers_fire_due_schedules_at_start_and_every_minute(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=GREET)
    schedule = await create_schedule(gql, workspace.operator, agent, cron=YEARLY, input={"name": "cron"})
    await make_due(sessionmaker, schedule, ago=A_YEAR)
    # Two workers start together; each runs the cron job at start-up: one run all the same.
    processes.extend([spawn_worker(settings), spawn_worker(settings)])

    async def runs_once_there_are(n: int, timeout_s: float) -> list[dict[str, Any]]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(runs := (await get_schedule(gql, workspace.viewer, schedule["id"]))["runs"]) < n:
            assert asyncio.get_running_loop().time() < deadline, f"the workers fired {len(runs)} of {n}"
            await asyncio.sleep(0.2)
        return runs

    [first] = await runs_once_there_are(1, timeout_s=60)
    done = await wait_run(gql, workspace.viewer, first["id"], timeout_s=30)
    assert done["result"]["hello"] == "cron"

    # Later fire times are the every-minute job's: the next one starts within a minute or so.
    await make_due(sessionmaker, schedule, ago=A_YEAR)
    runs = await runs_once_there_are(2, timeout_s=150)
    state = await get_schedule(gql, workspace.viewer, schedule["id"])
    assert len(runs) == 2 and [f["outcome"] for f in state["firings"]] == ["FIRED", "FIRED"]


@pytest.mark.timeout(180)
async def test_a_fire_time_whose_input_a_newer_schema_refuses_starts_no_run(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    """The input was checked when the schedule was written; the agent's next version's
    inputSchema refuses it. The worker's tick records the fire time SKIPPED with the path,
    as startRun would have refused it, and starts no run that would fail later."""
    name = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    agent = await scripted_agent(gql, workspace.admin, steps=GREET, inputSchema=name)
    schedule = await create_schedule(gql, workspace.operator, agent, cron=YEARLY, input={"name": "Ada"})
    stricter = {**name, "properties": {"name": {"type": "string", "minLength": 4}}}
    update = "mutation($id: ID!, $s: JSON) { updateAgent(id: $id, input: {inputSchema: $s}) { version } }"
    version = (await gql.ok(update, {"id": agent, "s": stricter}, token=workspace.admin))["updateAgent"]
    assert version == {"version": 2}

    await make_due(sessionmaker, schedule, ago=A_YEAR)
    processes.append(spawn_worker(settings))  # its cron job ticks once at start-up
    deadline = asyncio.get_running_loop().time() + 60
    while not (state := await get_schedule(gql, workspace.viewer, schedule["id"]))["firings"]:
        assert asyncio.get_running_loop().time() < deadline, "the worker did not tick"
        await asyncio.sleep(0.2)
    # Read again: the poll's read of the schedule row may have begun before the firing's
    # commit and its read of the firings after it.
    state = await get_schedule(gql, workspace.viewer, schedule["id"])
    [firing] = state["firings"]
    assert (firing["outcome"], firing["run"]) == ("SKIPPED", None)
    assert firing["reason"].endswith("(version 2): input.name: 'Ada' is too short"), firing["reason"]
    assert "inputSchema" in firing["reason"] and state["lastSkipReason"] == firing["reason"]
    assert state["runs"] == [] and await _runs_of(sessionmaker, schedule["id"]) == []

    # Input that the new version takes: the next fire time starts a run, which succeeds.
    await gql.ok(UPDATE_SCHEDULE, {"id": schedule["id"], "input": {"input": {"name": "Grace"}}},
                 token=workspace.operator)  # fmt: skip
    await make_due(sessionmaker, schedule, ago=A_YEAR)
    await tick_cli(settings)  # or the worker's every-minute job, whichever comes first
    state = await get_schedule(gql, workspace.viewer, schedule["id"])
    assert [f["outcome"] for f in state["firings"]] == ["FIRED", "SKIPPED"]
    done = await wait_run(gql, workspace.viewer, state["firings"][0]["run"]["id"], timeout_s=30)
    assert (done["status"], done["result"]["hello"]) == ("SUCCEEDED", "Grace"), done
