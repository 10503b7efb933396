"""Quotas (docs/concepts/budgets.md#quotas): runs over an agent's ``maxConcurrentRuns`` or
the workspace's ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE wait QUEUED with ``heldReason`` naming
the quota, and go on as slots free; schedules are capped per agent, and an ``ALLOW``
schedule's runs by its ``maxConcurrentRuns``. GraphQL, real workers, both databases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from app.keys import sweeper_turn_key
from app.services import runs
from tests.conftest import DB_KIND, stop_worker
from tests.integration.test_schedule_firing import A_YEAR, YEARLY
from tests.support.graphql import pk
from tests.support.runs import CANCEL_RUN, scripted_agent, start_run
from tests.support.schedules import CREATE_SCHEDULE, create_schedule, get_schedule, make_due, tick_cli
from tests.support.servers import sink_server

ALLOW = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}
RUNS = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on Run { id status heldReason } } }"


def _one_slow_call(url: str) -> list[dict[str, Any]]:
    return [{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {}}}, {"final": "done"}]


async def _watch(gql: Any, token: str, ids: list[str], timeout_s: float = 40.0) -> tuple[int, set[str]]:
    """Poll the runs until all ended: the most seen RUNNING at once, and every heldReason."""
    most, reasons = 0, set()
    deadline = time.monotonic() + timeout_s
    while True:
        runs = (await gql.ok(RUNS, {"ids": ids}, token=token))["nodes"]
        most = max(most, sum(1 for r in runs if r["status"] == "RUNNING"))
        reasons |= {r["heldReason"] for r in runs if r["heldReason"]}
        if all(r["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"} for r in runs):
            assert all(r["status"] == "SUCCEEDED" and r["heldReason"] is None for r in runs), runs
            return most, reasons
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.03)


@pytest.mark.usefixtures("worker")
async def test_an_agents_quota_holds_runs_and_releases_them_as_slots_free(gql, workspace) -> None:
    async with sink_server(delay_s=0.6) as (sink, url):
        agent = await scripted_agent(gql, workspace.admin, name="quota-scout", steps=_one_slow_call(url),
                                     policy=ALLOW, budget={"maxConcurrentRuns": 2})  # fmt: skip
        runs = [await start_run(gql, workspace.operator, agent) for _ in range(5)]
        # Run.budget lists the quota: used counts the agent's runs RUNNING now.
        deadline = time.monotonic() + 20
        while (quota := await _quota(gql, workspace.viewer, runs[0]))["used"] == 0:
            assert time.monotonic() < deadline, quota
            await asyncio.sleep(0.02)
        assert quota["used"] in {1, 2} and quota["remaining"] == 2 - quota["used"], quota
        most, reasons = await _watch(gql, workspace.viewer, runs)
    assert most == 2
    assert reasons == {"quota: agent 'quota-scout' has 2 runs running (budget.maxConcurrentRuns 2)"}
    assert len(sink.deliveries) == 5
    assert await _quota(gql, workspace.viewer, runs[0]) == {
        "name": "maxConcurrentRuns", "limit": 2, "used": 0, "remaining": 2, "imposedBy": "agent 'quota-scout'"
    }  # fmt: skip


QUOTA = "query($id: ID!) { run(id: $id) { budget { name limit used remaining imposedBy } } }"


async def _quota(gql: Any, token: str, run_id: str) -> dict[str, Any]:
    budget = (await gql.ok(QUOTA, {"id": run_id}, token=token))["run"]["budget"]
    [quota] = [b for b in budget if b["name"] == "maxConcurrentRuns"]
    return dict(quota)


@pytest.fixture
async def one_slot_worker(settings) -> AsyncIterator[Any]:
    """A worker of a deployment that lets one run of a workspace run at a time."""
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"max_active_runs_per_workspace": 1}), handle_signals=False)
    task = asyncio.create_task(w.main())
    yield w
    await stop_worker(w, task)


@pytest.mark.usefixtures("one_slot_worker")
async def test_the_workspace_quota_holds_runs_of_every_agent_until_the_sweeper_frees_a_slot(
    gql, make_workspace
) -> None:
    workspace, other = await make_workspace(), await make_workspace()
    async with sink_server(delay_s=0.5) as (sink, url):
        agents = [await scripted_agent(gql, workspace.admin, steps=_one_slow_call(url), policy=ALLOW)
                  for _ in range(3)]  # fmt: skip
        runs = [await start_run(gql, workspace.operator, a) for a in agents]
        # Another workspace's quota is its own: its run is never held by this one's.
        elsewhere = await scripted_agent(gql, other.admin, steps=_one_slow_call(url), policy=ALLOW)
        theirs = await start_run(gql, other.operator, elsewhere)
        most, reasons = await _watch(gql, workspace.viewer, runs)
        _, their_reasons = await _watch(gql, other.viewer, [theirs])
    assert most == 1
    assert reasons == {"quota: the workspace has 1 runs running (ENVERIF_MAX_ACTIVE_RUNS_PER_WORKSPACE 1)"}
    assert their_reasons == set()
    assert len(sink.deliveries) == 4


CANCEL_AGENT_RUNS = """
mutation($agentId: ID!) { cancelRuns(filter: {agentId: $agentId}, reason: "test over") { id } }
"""
SCHEDULE_CAPS = (
    "query($id: ID!) { node(id: $id) { ... on Schedule { overlapPolicy maxConcurrentRuns budget } } }"
)
RUN_BUDGET = "query($id: ID!) { run(id: $id) { budget { name limit imposedBy } } }"


async def test_a_schedule_flood_is_held_to_its_caps(gql, workspace, settings, sessionmaker) -> None:
    """No worker: the runs stay QUEUED, which is unfinished as much as running is."""
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "done"}])
    for bad, field in [
        ({"maxConcurrentRuns": 0}, "maxConcurrentRuns"),
        ({"maxConcurrentRuns": 10**6}, "maxConcurrentRuns"),
        ({"budget": {"maxTokens": -1}}, "budget.maxTokens"),
        ({"budget": {"maxTurns": "many"}}, "budget.maxTurns"),
        ({"budget": {"maxTurns": 51}}, "budget.maxTurns"),  # looser than the deployment's 50
        ({"budget": {"maxCostUsd": 1}}, "budget.maxCostUsd"),  # the scripted model has no price
    ]:
        err = await gql.error(CREATE_SCHEDULE, {"agentId": agent, "input": {"cron": YEARLY, **bad}},
                              token=workspace.operator)  # fmt: skip
        assert err["extensions"]["code"] == "VALIDATION_FAILED", (bad, err)
        assert err["extensions"]["field"] == field, (bad, err)
    flood = await create_schedule(gql, workspace.operator, agent, cron=YEARLY, overlapPolicy="ALLOW",
                                  maxConcurrentRuns=2, budget={"maxTurns": 4})  # fmt: skip
    caps = (await gql.ok(SCHEDULE_CAPS, {"id": flood["id"]}, token=workspace.viewer))["node"]
    assert caps == {"overlapPolicy": "ALLOW", "maxConcurrentRuns": 2, "budget": {"maxTurns": 4}}
    # An agent has at most ENVERIF_MAX_SCHEDULES_PER_AGENT (20) schedules.
    for _ in range(settings.max_schedules_per_agent - 1):
        await create_schedule(gql, workspace.operator, agent, cron=YEARLY, enabled=False)
    err = await gql.error(
        CREATE_SCHEDULE, {"agentId": agent, "input": {"cron": YEARLY}}, token=workspace.operator
    )
    assert (err["extensions"]["code"], err["extensions"]["field"]) == ("VALIDATION_FAILED", "agentId")
    assert "ENVERIF_MAX_SCHEDULES_PER_AGENT 20" in err["message"]
    try:
        for _ in range(4):
            await make_due(sessionmaker, flood, ago=A_YEAR)
            await tick_cli(settings)
        state = await get_schedule(gql, workspace.viewer, flood["id"])
        assert [f["outcome"] for f in state["firings"]] == ["SKIPPED", "SKIPPED", "FIRED", "FIRED"]
        assert state["firings"][0]["reason"] == (
            "overlap ALLOW: 2 runs of the schedule have not ended (maxConcurrentRuns 2)"
        )
        assert len(state["runs"]) == 2
        budget = (await gql.ok(RUN_BUDGET, {"id": state["runs"][0]["id"]}, token=workspace.viewer))["run"]
        [turns] = [b for b in budget["budget"] if b["name"] == "maxTurns"]
        assert turns == {"name": "maxTurns", "limit": 4, "imposedBy": f"schedule {pk(flood['id'])}"}
    finally:
        await gql.ok(CANCEL_AGENT_RUNS, {"agentId": agent}, token=workspace.operator)


async def test_a_slot_freed_while_a_claim_holds_for_it_releases_the_held_run(
    gql, workspace, runtime, monkeypatch
) -> None:
    """The lost release: a claim counts the agent's runs while one of them ends, the ending
    run's release reads before the hold has committed and finds nothing held. No worker and
    no sweeper: only the releases that follow a run's end and a hold can free the run.
    The interleaving is MariaDB's (row locks); SQLite's one writer makes the end wait for
    the hold to commit, so there the ending run's own release frees it."""
    agent = await scripted_agent(gql, workspace.admin, name="lost-release", steps=[{"final": "done"}],
                                 budget={"maxConcurrentRuns": 1})  # fmt: skip
    running, held = (
        await start_run(gql, workspace.operator, agent),
        await start_run(gql, workspace.operator, agent),
    )
    assert await runs.claim(runtime, pk(running), owner="quota-test") is not None
    counted, go_on = asyncio.Event(), asyncio.Event()
    decide = runs._QuotaCheck.reason

    async def reason_then_wait(self: Any, session: Any, run: Any) -> str | None:
        why = await decide(self, session, run)
        if run.id == pk(held):
            counted.set()
            await go_on.wait()  # the hold is decided, not yet committed
        return why

    monkeypatch.setattr(runs._QuotaCheck, "reason", reason_then_wait)
    holding = asyncio.create_task(runs.claim(runtime, pk(held), owner="quota-test"))
    await asyncio.wait_for(counted.wait(), 10)
    ending = asyncio.create_task(
        gql.ok(CANCEL_RUN, {"id": running, "reason": "slot freed"}, token=workspace.operator)
    )
    await asyncio.wait({ending}, timeout=2)  # MariaDB: done, its release found nothing held
    go_on.set()
    assert await holding is None
    assert (await ending)["cancelRun"]["status"] == "CANCELLED"
    deadline = time.monotonic() + 5
    while (found := (await gql.ok(RUNS, {"ids": [held]}, token=workspace.viewer))["nodes"][0])["heldReason"]:
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)
    assert found["status"] == "QUEUED", found


# The transactions of this test's database waiting for a row lock (other sessions' tests
# share the server).
LOCK_WAITS = text(
    "SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p"
    " ON p.ID = t.trx_mysql_thread_id WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
)


@pytest.mark.skipif(DB_KIND != "mysql", reason="MariaDB's row locks: SQLite has one writer and no deadlock")
async def test_a_quota_release_chosen_as_a_deadlocks_victim_runs_again(
    gql, workspace, runtime, engine, caplog
) -> None:
    """The release that follows a run's end locks the agent's held runs in id order; a
    transaction that locked them the other way round, and wrote more, makes it MariaDB's
    victim (error 1213). Run again, it releases the run as the end's own release."""
    agent = await scripted_agent(gql, workspace.admin, name="deadlock-victim", steps=[{"final": "done"}],
                                 budget={"maxConcurrentRuns": 1})  # fmt: skip
    running = await start_run(gql, workspace.operator, agent)
    held = [await start_run(gql, workspace.operator, agent) for _ in range(2)]
    assert await runs.claim(runtime, pk(running), owner="quota-test") is not None
    for run_id in held:
        assert await runs.claim(runtime, pk(run_id), owner="quota-test") is None  # held for the slot
    async with engine.connect() as other, engine.connect() as probe:
        await other.begin()
        # The heavier transaction (rows written): InnoDB rolls back the lighter one.
        await other.execute(text("CREATE TEMPORARY TABLE weight (n INT PRIMARY KEY) ENGINE=InnoDB"))
        await other.execute(text("INSERT INTO weight VALUES " + ",".join(f"({n})" for n in range(200))))
        await other.execute(text("SELECT id FROM agent_runs WHERE id = :id FOR UPDATE"), {"id": pk(held[1])})
        ending = asyncio.create_task(
            gql.ok(CANCEL_RUN, {"id": running, "reason": "slot freed"}, token=workspace.operator)
        )
        deadline = time.monotonic() + 20
        while not await probe.scalar(LOCK_WAITS):  # the release holds held[0], waits for held[1]
            assert time.monotonic() < deadline and not ending.done(), "the release never waited"
            await asyncio.sleep(0.25)  # InnoDB refreshes INNODB_TRX at most every 100 ms
        await other.execute(text("SELECT id FROM agent_runs WHERE id = :id FOR UPDATE"), {"id": pk(held[0])})
        await other.rollback()
    assert (await ending)["cancelRun"]["status"] == "CANCELLED"
    # The end's release ran again after its deadlock: the oldest held run is free at once.
    found = (await gql.ok(RUNS, {"ids": held}, token=workspace.viewer))["nodes"]
    assert [r["heldReason"] is None for r in found] == [True, False], found
    assert "quota release" not in caplog.text, caplog.text


@pytest.fixture
async def unswept_worker(settings, runtime) -> AsyncIterator[Any]:
    """A worker whose sweeper sweeps once, at its start, and then not for an hour: only the
    releases that follow a run's end or a hold free a quota-held run."""
    from workers.main import build_worker

    w = build_worker(settings.model_copy(update={"sweep_interval_s": 3600}), handle_signals=False)
    task = asyncio.create_task(w.main())
    await asyncio.sleep(0.5)  # its one sweep is done before the runs exist
    yield w
    await stop_worker(w, task)
    # Its sweep took the session's sweeper turn for most of the hour: give it back, or no
    # later test's worker would sweep.
    await runtime.redis.delete(sweeper_turn_key(settings.redis_prefix))


@pytest.mark.usefixtures("unswept_worker")
async def test_runs_finishing_while_others_are_held_release_them_without_the_sweeper(gql, workspace) -> None:
    """Many short runs of an agent with two slots: holds, releases and ends race all the time.
    Before: a run held while another ended stayed held, and a run released while the job of
    the claim that held it was still in progress was released with no job (arq refuses that
    job id until the job ends); both waited for the next sweep."""
    agent = await scripted_agent(gql, workspace.admin, name="quota-race", steps=[{"final": "done"}],
                                 budget={"maxConcurrentRuns": 2})  # fmt: skip
    runs_ = await asyncio.gather(*(start_run(gql, workspace.operator, agent) for _ in range(24)))
    # Every run ends, none left held (or released with no job) waiting for a sweep. (How many
    # ran at once is the test above's: ``nodes`` reads one run after another, so with runs
    # this short its count would mix moments.)
    await _watch(gql, workspace.viewer, list(runs_), timeout_s=30)
