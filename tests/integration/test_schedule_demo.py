"""The demo's scheduled agent end to end (README: "A scheduled agent"): two scheduled runs of
``prospector`` on real workers; the second skips the domains the first remembered, and each
run's post to the webhook waits for an operator's approval."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from starlette.applications import Starlette

from app.dev import routes as dev_routes
from app.dev.demo import seed_demo
from tests.support.runs import DECIDE, wait_run
from tests.support.schedules import get_schedule, make_due, tick_cli
from tests.support.servers import serve
from tests.support.workers import spawn_worker

DEMO = """{ agents(first: 20) { edges { node { id name schedules { id cron timezone overlapPolicy } } } } }"""
STEPS = """query($id: ID!) { run(id: $id) { status result
  usage { inputTokens outputTokens turns } treeUsage { inputTokens outputTokens runs }
  budget { name limit used imposedBy }
  steps { seq tool status arguments result childRun { status agent { name } result } approval { status } }
} }"""
MEMORIES = """query($id: ID!) { memories(agentId: $id, tags: ["screened"], first: 20) {
  edges { node { key value tags sourceRun { id } } } } }"""
A_YEAR = timedelta(days=367)
UPDATE_SCHEDULE = (
    "mutation($id: ID!, $input: SchedulePatch!) { updateSchedule(id: $id, input: $input) { cron } }"
)


async def _scheduled_run(
    gql: Any, token: str, settings: Any, sessionmaker: Any, schedule: dict[str, Any]
) -> str:
    """Let the schedule's next fire time come, tick, and return the run it started."""
    before = {r["id"] for r in (await get_schedule(gql, token, schedule["id"]))["runs"]}
    await make_due(sessionmaker, schedule, ago=A_YEAR)
    await tick_cli(settings)
    after = (await get_schedule(gql, token, schedule["id"]))["runs"]
    [run] = [r for r in after if r["id"] not in before]
    assert run["trigger"] == "SCHEDULE"
    return str(run["id"])


async def _through_approval(gql: Any, token: str, run_id: str, webhook: Any) -> dict[str, Any]:
    """Wait for the run's post to be held for approval, check nothing was posted meanwhile,
    approve it, and return the finished run."""
    deliveries_before = len((await webhook())["deliveries"])
    waiting = await wait_run(gql, token, run_id, {"WAITING_APPROVAL", "FAILED", "SUCCEEDED"}, timeout_s=60)
    assert waiting["status"] == "WAITING_APPROVAL", waiting
    [approval] = waiting["pendingApprovals"]
    assert approval["tool"] == "webhook.post"
    assert len((await webhook())["deliveries"]) == deliveries_before  # held, not sent
    await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=token)
    done = await wait_run(gql, token, run_id, timeout_s=60)
    assert done["status"] == "SUCCEEDED", done
    assert len((await webhook())["deliveries"]) == deliveries_before + 1
    return (await gql.ok(STEPS, {"id": run_id}, token=token))["run"]


async def test_two_scheduled_runs_the_second_skips_what_the_first_remembered(
    gql, settings, sessionmaker, processes
) -> None:
    async with serve(Starlette(routes=dev_routes.routes)) as url:
        seed = await seed_demo(sessionmaker, base_url=url, reset=True)
        token = seed.token
        agents = {e["node"]["name"]: e["node"] for e in (await gql.ok(DEMO, token=token))["agents"]["edges"]}
        [schedule] = agents["prospector"]["schedules"]
        assert (schedule["cron"], schedule["overlapPolicy"]) == ("0 * * * *", "SKIP")
        # Yearly for the test, so that no fire time of its own comes while it runs: only the
        # two this test lets come.
        await gql.ok(UPDATE_SCHEDULE, {"id": schedule["id"], "input": {"cron": "0 0 1 1 *"}}, token=token)
        schedule["cron"] = "0 0 1 1 *"
        processes.append(spawn_worker(settings))

        async with httpx.AsyncClient(base_url=url) as http:

            async def webhook() -> Any:
                return (await http.get("/dev/webhook")).json()

            first_id = await _scheduled_run(gql, token, settings, sessionmaker, schedule)
            first = await _through_approval(gql, token, first_id, webhook)
            second_id = await _scheduled_run(gql, token, settings, sessionmaker, schedule)
            second = await _through_approval(gql, token, second_id, webhook)
            deliveries = (await webhook())["deliveries"]

    # First run: the feed's first page, nothing screened before; two of four qualify.
    assert first["result"]["screened"] == [
        "northwind.example",
        "globex.example",
        "initech.example",
        "umbrella.example",
    ]
    assert first["result"]["skipped"] == []
    assert first["result"]["qualified"] == ["northwind.example", "initech.example"]
    tools = [s["tool"] for s in first["steps"]]
    assert tools == [
        "http.get",
        "memory.search",
        "agents.delegate",
        "memory.remember",
        "memory.remember",
        "webhook.post",
        None,
    ]
    delegate = first["steps"][2]
    assert delegate["childRun"]["agent"]["name"] == "qualifier"
    assert delegate["childRun"]["status"] == "SUCCEEDED"
    assert first["steps"][5]["approval"]["status"] == "APPROVED"
    # It is budgeted, and its turns spent (the scripted model says what each turn cost): the
    # qualifier's turns count in the prospector's tree, under the schedule's tighter tokens.
    assert first["usage"] == {"inputTokens": 9000, "outputTokens": 640, "turns": 6}
    assert first["treeUsage"] == {"inputTokens": 10800, "outputTokens": 850, "runs": 2}
    limits = {b["name"]: b for b in first["budget"]}
    assert limits["maxTokens"]["limit"] == 16000 and limits["maxTokens"]["used"] == 11650
    assert limits["maxTokens"]["imposedBy"].startswith("schedule ")
    assert limits["maxTurns"]["imposedBy"] == "agent 'prospector'"

    # Second run: the next page overlaps the first by two domains, which it skips.
    assert second["result"]["skipped"] == ["initech.example", "umbrella.example"]
    assert second["result"]["screened"] == ["hooli.example", "vandelay.example"]
    assert second["steps"][2]["arguments"]["input"] == {"domains": ["hooli.example", "vandelay.example"]}
    assert second["result"]["qualified"] == ["hooli.example"]
    assert second["result"]["report"].startswith("Screened 2 new candidates, skipped 2 already screened")
    assert second["steps"][5]["approval"]["status"] == "APPROVED"

    # What each run posted (after its approval), and what it remembered for the next one.
    posted = [[lead["domain"] for lead in d["payload"]["qualifiedLeads"]] for d in deliveries]
    assert posted == [["northwind.example", "initech.example"], ["hooli.example"]]
    memories = (await gql.ok(MEMORIES, {"id": agents["prospector"]["id"]}, token=token))["memories"]["edges"]
    remembered = {m["node"]["key"]: m["node"]["value"] for m in memories}
    assert len(remembered) == 4
    assert sorted(" ".join(remembered.values()).split()) == sorted(
        [
            "northwind.example",
            "initech.example",
            "globex.example",
            "umbrella.example",
            "hooli.example",
            "vandelay.example",
        ]
    )
