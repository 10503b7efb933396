"""``enverif schedules tick`` and ``enverif schedules list --workspace W`` as an operator runs them."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from tests.support.cli import Enverif, assert_one_line_error, in_thread
from tests.support.runs import scripted_agent
from tests.support.schedules import create_schedule, make_due

UPDATE_AGENT = (
    "mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { status } }"
)


async def test_list_shows_each_schedule_and_its_last_skip(
    enverif: Enverif,
    gql: Any,
    workspace: Any,
    sessionmaker: Any,
) -> None:
    agent = await scripted_agent(
        gql, workspace.admin, steps=[{"final": "ok"}], name=f"lister-{workspace.name}"
    )
    hourly = await create_schedule(gql, workspace.operator, agent, cron="0 * * * *", input={"a": 1})
    yearly = await create_schedule(
        gql,
        workspace.operator,
        agent,
        cron="0 0 1 1 *",
        timezone="Europe/Berlin",
        overlapPolicy="ALLOW",
        maxConcurrentRuns=2,
        budget={"maxTurns": 4},
    )
    await gql.ok(UPDATE_AGENT, {"id": agent, "input": {"status": "PAUSED"}}, token=workspace.admin)
    await make_due(sessionmaker, yearly, ago=timedelta(days=367))

    tick = await in_thread(enverif, "schedules", "tick", "--json")
    assert tick.returncode == 0, tick.stderr
    [firing] = [f for f in json.loads(tick.stdout)["firings"] if f["schedule_id"] == yearly["id"]]
    assert firing["outcome"] == "SKIPPED" and firing["run_id"] is None and "is PAUSED" in firing["reason"]

    listed = await in_thread(enverif, "schedules", "list", "--workspace", workspace.name, "--json")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    assert body["workspace"] == workspace.name
    by_id = {s["id"]: s for s in body["schedules"]}
    assert list(by_id) == [hourly["id"], yearly["id"]]
    assert by_id[hourly["id"]]["cron"] == "0 * * * *" and by_id[hourly["id"]]["input"] == {"a": 1}
    assert by_id[hourly["id"]]["agent"] == f"lister-{workspace.name}"
    assert by_id[hourly["id"]]["last_skip_reason"] is None
    assert by_id[yearly["id"]]["timezone"] == "Europe/Berlin" and by_id[yearly["id"]]["overlap"] == "ALLOW"
    assert "is PAUSED" in by_id[yearly["id"]]["last_skip_reason"]
    assert (by_id[yearly["id"]]["max_concurrent_runs"], by_id[yearly["id"]]["budget"]) == (2, {"maxTurns": 4})
    assert by_id[hourly["id"]]["budget"] is None

    human = await in_thread(enverif, "schedules", "list", "--workspace", workspace.name)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "agent", "cron"]
    assert any(hourly["id"] in line and "0 * * * *" in line for line in lines)
    assert "max_concurrent_runs" in lines[0] and "budget" in lines[0]
    assert any(line.startswith(yearly["id"]) and re.search(r'ALLOW +2 +\{"maxTurns":4\}', line)
               for line in lines), lines  # fmt: skip
    assert any(line.startswith(f"{yearly['id']} last skipped") and "PAUSED" in line for line in lines)


def test_list_of_an_unknown_workspace_is_a_one_line_error(enverif: Enverif) -> None:
    assert_one_line_error(
        enverif("schedules", "list", "--workspace", "no-such-workspace"), "no-such-workspace"
    )


def test_tick_prints_what_it_did(enverif: Enverif) -> None:
    tick = enverif("schedules", "tick")
    assert tick.returncode == 0, tick.stderr
    assert tick.stdout.splitlines()[0].endswith("skipped.")
