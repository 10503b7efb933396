"""The demo's scheduled agent end to end (README: "A scheduled agent"): two scheduled runs of
``prospector`` on real workers; the second skips the domains the first remembered, and each
run's leads go to the demo CRM, a real MCP server (app/dev/crm.py) on loopback, through
``mcp.crm.create_lead`` once an operator approved the call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from starlette.applications import Starlette

from app.dev import routes as dev_routes
from app.dev.crm import DemoCrm
from app.dev.demo import seed_demo
from tests.support.graphql import pk
from tests.support.runs import DECIDE, wait_run
from tests.support.schedules import get_schedule, make_due, tick_cli
from tests.support.servers import serve
from tests.support.workers import spawn_worker

DEMO = """{ agents(first: 20) { edges { node { id name schedules { id cron timezone overlapPolicy } } } } }"""
STEPS = """query($id: ID!) { run(id: $id) { status result
  usage { inputTokens outputTokens turns } treeUsage { inputTokens outputTokens runs }
  budget { name limit used imposedBy }
  steps { id seq tool status arguments result childRun { status agent { name } result } approval { status } }
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


async def _through_approval(gql: Any, token: str, run_id: str, crm: DemoCrm) -> dict[str, Any]:
    """Wait for the run's call to the CRM to be held for approval, check nothing reached the
    CRM meanwhile, approve it, and return the finished run."""
    calls_before = len(crm.state.by_key)
    waiting = await wait_run(gql, token, run_id, {"WAITING_APPROVAL", "FAILED", "SUCCEEDED"}, timeout_s=60)
    assert waiting["status"] == "WAITING_APPROVAL", waiting
    [approval] = waiting["pendingApprovals"]
    assert approval["tool"] == "mcp.crm.create_lead"
    assert len(crm.state.by_key) == calls_before  # held, not sent
    await gql.ok(DECIDE, {"id": approval["id"], "approve": True}, token=token)
    done = await wait_run(gql, token, run_id, timeout_s=60)
    assert done["status"] == "SUCCEEDED", done
    assert len(crm.state.by_key) == calls_before + 1
    return (await gql.ok(STEPS, {"id": run_id}, token=token))["run"]


async def test_two_scheduled_runs_the_second_skips_what_the_first_remembered(
    gql, settings, sessionmaker, processes
) -> None:
    crm = DemoCrm()
    dev_app = Starlette(routes=[*dev_routes.routes, *crm.routes()], lifespan=lambda _: crm.running())
    async with serve(dev_app, lifespan="on") as url:
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

        first_id = await _scheduled_run(gql, token, settings, sessionmaker, schedule)
        first = await _through_approval(gql, token, first_id, crm)
        second_id = await _scheduled_run(gql, token, settings, sessionmaker, schedule)
        second = await _through_approval(gql, token, second_id, crm)
        async with httpx.AsyncClient(base_url=url) as http:
            held = (await http.get("/dev/crm/leads")).json()

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
        "mcp.crm.create_lead",
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

    # The leads each run created in the CRM (after its approval, once per step), and what it
    # remembered for the next one.
    assert [lead["domain"] for lead in held["leads"]] == [
        "northwind.example",
        "initech.example",
        "hooli.example",
    ]
    assert held["callsPerKey"] == {str(pk(first["steps"][5]["id"])): 1, str(pk(second["steps"][5]["id"])): 1}
    assert first["result"]["leads"] == ["lead-1", "lead-2"] and second["result"]["leads"] == ["lead-3"]
    assert second["result"]["report"].endswith("leads created in the CRM: 1.")
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
