"""A worker that dies between a memory write and its step's result leaves neither: the write
commits with the step's result or not at all, and the retried call writes it once."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.db.orm import Memory, MemoryRevision, Run, RunStep
from app.engine.loop import execute_run
from app.engine.tools.registry import default_registry
from app.graphql.ids import from_global_id
from app.services.runtime import open_runtime
from app.services.transitions import TreeTx
from tests.support.runs import scripted_agent, start_run

KEY = "processed:acme.example"


@pytest.fixture
async def rt(settings: Any) -> Any:
    runtime = await open_runtime(settings)
    yield runtime
    await runtime.close()


@pytest.fixture
async def registry(settings: Any) -> Any:
    reg = default_registry(settings)
    yield reg
    await reg.aclose()


async def _state(sessionmaker: Any, run_id: int) -> tuple[list[Memory], list[MemoryRevision], list[RunStep]]:
    async with sessionmaker() as session:
        run = await session.get_one(Run, run_id)
        memories = list(await session.scalars(select(Memory).where(Memory.agent_id == run.agent_id)))
        revisions = list(
            await session.scalars(select(MemoryRevision).where(MemoryRevision.agent_id == run.agent_id))
        )
        steps = list(
            await session.scalars(select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.seq))
        )
    return memories, revisions, steps


async def test_a_crash_between_a_memory_write_and_its_step_leaves_neither(
    gql: Any, workspace: Any, rt: Any, registry: Any, sessionmaker: Any, monkeypatch: Any
) -> None:
    agent = await scripted_agent(
        gql,
        workspace.admin,
        tools=["memory.*"],
        steps=[
            {
                "call": "memory.remember",
                "args": {"key": KEY, "value": "done, 3 leads", "tags": ["processed"]},
            },
            {"final": "{{ results[0] }}"},
        ],
    )
    run_id = from_global_id(await start_run(gql, workspace.operator, agent), "Run")

    async def dies(self: TreeTx, *args: Any, **kwargs: Any) -> bool:
        raise ConnectionResetError("the worker's connection died before commit")

    monkeypatch.setattr(TreeTx, "finish_running_step", dies)
    await execute_run(rt, registry, run_id, owner="doomed")
    memories, revisions, steps = await _state(sessionmaker, run_id)
    assert memories == [] and revisions == []  # the write went with the transaction
    assert [(s.tool, s.status) for s in steps] == [("memory.remember", "RUNNING")]

    monkeypatch.undo()
    await execute_run(rt, registry, run_id, owner="survivor")
    memories, revisions, steps = await _state(sessionmaker, run_id)
    assert [(m.key, m.value) for m in memories] == [(KEY, "done, 3 leads")]
    assert len(revisions) == 1 and revisions[0].run_id == run_id
    assert [(s.tool, s.status) for s in steps] == [("memory.remember", "SUCCEEDED"), (None, "SUCCEEDED")]
    async with sessionmaker() as session:
        run = await session.get_one(Run, run_id)
    assert run.status == "SUCCEEDED" and run.result == {"key": KEY, "created": True}
