"""The chokepoint over a run tree: cancelling cascades to descendants, and a child's end is
delivered to its parent's waiting step and wakes the parent. The tree is written directly
(the delegation tool is not built yet); everything after that goes through the services and
a real worker."""

from __future__ import annotations

from app.db.orm import RunStep
from app.domain.agents import Role
from app.graphql.ids import from_global_id, to_global_id
from app.services import runs
from app.services.auth import Principal
from app.services.runtime import open_runtime
from tests.support.runs import CANCEL_RUN, get_run, scripted_agent, wait_run
from tests.support.trees import waiting_parent_with_child


async def test_cancelling_a_parent_cancels_its_descendants(gql, workspace, sessionmaker) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "{{ results[-1] }}"}])
    parent, step_id, child = await waiting_parent_with_child(sessionmaker, from_global_id(agent, "Agent"))
    data = await gql.ok(
        CANCEL_RUN, {"id": to_global_id("Run", parent), "reason": "stop all"}, token=workspace.operator
    )
    assert data["cancelRun"]["status"] == "CANCELLED"
    child_run = await get_run(gql, workspace.viewer, to_global_id("Run", child))
    assert child_run["status"] == "CANCELLED"
    async with sessionmaker() as session:
        step = await session.get_one(RunStep, step_id)
    # The child ended first, so its outcome (the child as its global id) reached the parent's step;
    # the parent stayed cancelled.
    assert step.status == "SUCCEEDED"
    assert step.result == {
        "status": "CANCELLED",
        "result": None,
        "error": None,
        "runId": to_global_id("Run", child),
    }


async def test_a_cancelled_child_wakes_its_parent_with_the_outcome(
    gql, workspace, sessionmaker, settings, worker
) -> None:
    agent = await scripted_agent(
        gql, workspace.admin, steps=[{"final": "never"}, {"final": "{{ results[-1] }}"}]
    )
    parent, _step_id, child = await waiting_parent_with_child(sessionmaker, from_global_id(agent, "Agent"))
    # Cancel the child before the worker gets to it (its job was never enqueued).
    rt = await open_runtime(settings)
    try:
        await runs.cancel_run(
            rt,
            Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0),
            run_id=child,
            reason="no",
        )
    finally:
        await rt.close()
    done = await wait_run(gql, workspace.viewer, to_global_id("Run", parent))
    assert done["status"] == "SUCCEEDED"
    assert done["result"] == {
        "status": "CANCELLED",
        "result": None,
        "error": None,
        "runId": to_global_id("Run", child),
    }
