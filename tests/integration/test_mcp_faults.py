"""An MCP call cut off by a worker's crash: real ``enverif worker`` processes (SIGKILL runs
no cleanup), a real MCP server process on 127.0.0.1."""

from __future__ import annotations

import signal
from pathlib import Path

from sqlalchemy import select

from app.db.orm import RunStep
from tests.integration.test_mcp import crm_server, register
from tests.support.graphql import pk
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.workers import spawn_worker, wait_for


async def test_sigkill_during_an_mcp_call_resends_it_with_the_same_key_and_records_one_result(
    gql, workspace, settings, sessionmaker, processes, tmp_path: Path
) -> None:
    async with crm_server(tmp_path, extra=("--lead-delay", "1.5")) as crm:
        # DESTRUCTIVE (no annotations) always asks; the admin's override lets the rule allow it.
        server = await register(
            gql,
            workspace.admin,
            transport="STREAMABLE_HTTP",
            url=crm.url,
            toolRisk={"create_lead": "EXTERNAL_WRITE"},
        )
        tool = f"mcp.{server['name']}.create_lead"
        agent = await scripted_agent(
            gql, workspace.admin, tools=[f"mcp.{server['name']}.*"],
            policy={"default": "ALLOW", "rules": [{"tool": tool, "decision": "ALLOW"}]},
            steps=[{"call": tool, "args": {"company": "Acme", "email": "a@acme.test"}}, {"final": "{{ results[-1] }}"}],
        )  # fmt: skip
        first = spawn_worker(settings)
        processes.append(first)
        run_id = await start_run(gql, workspace.operator, agent)
        await wait_for(lambda: len(crm.calls("create_lead")) >= 1, 30, "the call to reach the server")
        first.send_signal(signal.SIGKILL)
        first.wait()
        processes.append(spawn_worker(settings))
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=60)
        calls = crm.calls("create_lead")

    assert run["status"] == "SUCCEEDED", run
    async with sessionmaker() as session:
        [step] = list(
            await session.scalars(select(RunStep).where(RunStep.run_id == pk(run_id), RunStep.tool == tool))
        )
    # The server saw the call twice, both times with the step's id as the key...
    assert [c["key"] for c in calls] == [str(step.id), str(step.id)]
    # ...and the run recorded one result: the answer to the second.
    assert run["result"]["structuredContent"] == {"lead": "lead-Acme", "timesSeenWithThisKey": 2}
