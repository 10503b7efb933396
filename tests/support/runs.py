"""GraphQL helpers for run tests: what a frontend would send."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.support.graphql import create_agent as _create_agent

START_RUN = """
mutation($agentId: ID!, $input: JSON) { startRun(agentId: $agentId, input: $input) { id status trigger } }
"""
CANCEL_RUN = """
mutation($id: ID!, $reason: String) { cancelRun(id: $id, reason: $reason) { id status } }
"""
DECIDE = """
mutation($id: ID!, $approve: Boolean!, $reason: String) {
  decideApproval(id: $id, approve: $approve, reason: $reason) { id status reason decidedAt }
}
"""
RUN = """
query($id: ID!) {
  run(id: $id) {
    id status result error input trigger startedAt finishedAt
    steps { id seq tool arguments status decision decisionReason result error
            approval { id status reason } }
    pendingApprovals { id tool status arguments }
  }
}
"""
PENDING_APPROVALS = """
query { approvals(status: PENDING, first: 50) { edges { node { id tool status run { id } step { id } } } } }
"""

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


async def scripted_agent(
    gql: Any,
    token: str,
    *,
    steps: list[dict[str, Any]] | None = None,
    model: dict[str, Any] | None = None,
    tools: list[str] | None = None,
    policy: dict[str, Any] | None = None,
    name: str | None = None,
    **fields: Any,
) -> str:
    """An agent for a run to follow, by id: a scripted model taking ``steps`` (or ``model``),
    offered the HTTP tools unless ``tools`` says otherwise."""
    spec: dict[str, Any] = {
        "instructions": "test agent",
        "model": model or {"provider": "scripted", "steps": steps or []},
        "tools": tools if tools is not None else ["http.*", "webhook.post"],
        **fields,
    }
    if policy is not None:
        spec["policy"] = policy
    agent = await _create_agent(gql, token, name=name, **spec)
    return str(agent["id"])


async def agent_name(gql: Any, token: str, agent_id: str) -> str:
    """The agent's name: what ``agents.delegate`` takes."""
    data = await gql.ok("query($id: ID!) { agent(id: $id) { name } }", {"id": agent_id}, token=token)
    return str(data["agent"]["name"])


# The old name of scripted_agent, for tests that import it from here (it returned the id,
# tests.support.graphql.create_agent returns the agent).
create_agent = scripted_agent


async def start_run(gql: Any, token: str, agent_id: str, input: Any = None) -> str:
    data = await gql.ok(START_RUN, {"agentId": agent_id, "input": input}, token=token)
    assert data["startRun"]["status"] == "QUEUED"
    return str(data["startRun"]["id"])


async def get_run(gql: Any, token: str, run_id: str) -> dict[str, Any]:
    data = await gql.ok(RUN, {"id": run_id}, token=token)
    run: dict[str, Any] = data["run"]
    return run


async def wait_run(
    gql: Any, token: str, run_id: str, statuses: set[str] | str = TERMINAL, timeout_s: float = 20.0
) -> dict[str, Any]:
    wanted = {statuses} if isinstance(statuses, str) else statuses
    deadline = time.monotonic() + timeout_s
    while True:
        run = await get_run(gql, token, run_id)
        if run["status"] in wanted:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {run['status']} after {timeout_s}s: {run}")
        await asyncio.sleep(0.05)
