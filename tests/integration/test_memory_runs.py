"""Memory in runs: injection at a run's first start through a real worker, the bounded
candidate read, and the write cores the memory tools use (on the real database)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.db import orm
from app.domain.errors import CredentialRejected, ValidationFailed
from app.domain.memory import value_score
from app.services import memories, memory_injection, memory_search
from app.services.runtime import Runtime, open_runtime
from tests.support.graphql import create_memory, gid, pk
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.trees import Rows

RUN_MEMORIES = """
query($id: ID!) { run(id: $id) { status result injectedMemories { key lastUsedAt } } }
"""
UPDATE_AGENT = """
mutation($id: ID!, $input: UpdateAgentInput!) { updateAgent(id: $id, input: $input) { id } }
"""


@pytest.fixture
async def rt(settings: Any) -> AsyncIterator[Runtime]:
    runtime = await open_runtime(settings)
    yield runtime
    await runtime.close()


async def _insert(sessionmaker: Any, workspace_id: int, agent_id: int, **fields: Any) -> orm.Memory:
    now = fields.pop("at", datetime.now(UTC))
    async with sessionmaker() as session, session.begin():
        row = orm.Memory(
            workspace_id=workspace_id,
            agent_id=agent_id,
            tags=fields.pop("tags", []),
            importance=fields.pop("importance", 0.5),
            created_at=now,
            updated_at=now,
            last_used_at=None,
            **fields,
        )
        session.add(row)
    return row


async def test_a_run_starts_with_its_best_memories_within_budget(
    gql: Any, workspace: Any, worker: Any, sessionmaker: Any
) -> None:
    agent_id = await scripted_agent(
        gql,
        workspace.admin,
        steps=[{"final": "{{ memories | map(attribute='key') | join(',') }}"}],
        tools=[],
    )
    await gql.ok(
        UPDATE_AGENT,
        {"id": agent_id, "input": {"memoryBudget": {"maxItems": 2, "maxChars": 60}}},
        token=workspace.admin,
    )
    agent_pk = pk(agent_id)
    old = datetime.now(UTC) - timedelta(days=365)
    await _insert(sessionmaker, workspace.id, agent_pk, key="icp", value="mid-market SaaS", importance=0.9)
    await _insert(
        sessionmaker, workspace.id, agent_pk, key="huge", value="x" * 100, importance=1.0
    )  # over maxChars
    await _insert(sessionmaker, workspace.id, agent_pk, key="stale", value="old news", importance=0.9, at=old)
    await _insert(sessionmaker, workspace.id, agent_pk, key="tone", value="short bullets", importance=0.4)
    await _insert(sessionmaker, workspace.id, agent_pk, key="minor", value="trivia", importance=0.1)

    run_id = await start_run(gql, workspace.operator, agent_id)
    run = await wait_run(gql, workspace.operator, run_id)
    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == "icp,tone"  # importance x recency, within 2 items and 60 characters
    data = (await gql.ok(RUN_MEMORIES, {"id": run_id}, token=workspace.viewer))["run"]
    assert [m["key"] for m in data["injectedMemories"]] == ["icp", "tone"]
    assert all(m["lastUsedAt"] is not None for m in data["injectedMemories"])
    async with sessionmaker() as session:
        events = list(
            await session.scalars(
                select(orm.RunEvent).where(
                    orm.RunEvent.root_run_id == pk(run_id), orm.RunEvent.type == "MEMORY_INJECTED"
                )
            )
        )
        unused = await session.scalar(
            select(orm.Memory).where(orm.Memory.agent_id == agent_pk, orm.Memory.key == "minor")
        )
    assert [e.payload for e in events] == [{"keys": ["icp", "tone"]}]
    assert unused is not None and unused.last_used_at is None


async def test_no_budget_injects_nothing(gql: Any, workspace: Any, worker: Any) -> None:
    agent_id = await scripted_agent(
        gql, workspace.admin, steps=[{"final": "{{ memories | length }}"}], tools=[]
    )
    await gql.ok(
        UPDATE_AGENT,
        {"id": agent_id, "input": {"memoryBudget": {"maxItems": 0, "maxChars": 100}}},
        token=workspace.admin,
    )
    await create_memory(gql, workspace.operator, agent_id, key="k", value="v", importance=1.0)
    run = await wait_run(gql, workspace.operator, await start_run(gql, workspace.operator, agent_id))
    assert (run["status"], run["result"]) == ("SUCCEEDED", 0)


async def test_candidates_are_bounded_and_read_only_on_a_first_start(
    gql: Any, workspace: Any, sessionmaker: Any, rt: Runtime
) -> None:
    agent_id = await scripted_agent(gql, workspace.admin, tools=[])
    agent_pk = pk(agent_id)
    async with sessionmaker() as session, session.begin():
        now = datetime.now(UTC)
        for i in range(150):
            session.add(
                orm.Memory(
                    workspace_id=workspace.id,
                    agent_id=agent_pk,
                    key=f"k{i}",
                    value="v" * (i % 7 + 1),
                    tags=[],
                    importance=(i % 10) / 10,
                    created_at=now,
                    updated_at=now - timedelta(hours=i),
                    last_used_at=None,
                )
            )
    rows = Rows(sessionmaker, workspace.id)
    fresh = await rows.run(agent_pk, status="QUEUED")
    found = await memory_injection.candidates(rt, fresh.id)
    assert found is not None
    # Default budget 20 items: a bounded head, never all 150.
    assert len(found) == 20 * memory_injection.CANDIDATES_PER_ITEM
    # ... and exactly the best by the pure ranking's importance x recency, in its order.
    async with sessionmaker() as session:
        everything = await memory_injection._bounded_candidates(
            session, agent_id=agent_pk, max_items=150, max_chars=4000
        )
    assert len(everything) == 150
    best = sorted(everything, key=lambda m: (-value_score(m, now), -m.id))
    assert [c.key for c in found] == [c.key for c in best[: len(found)]]
    assert found[0].key == "k9"  # importance 0.9, 9 hours old
    resumed = await rows.run(agent_pk, status="QUEUED", injected=[])
    assert await memory_injection.candidates(rt, resumed.id) is None


# -- the write cores the memory tools use ------------------------------------------------------


async def test_remember_upserts_by_key_with_run_revisions(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    agent_id = await scripted_agent(gql, workspace.admin, tools=[])
    agent_pk = pk(agent_id)
    rows = Rows(sessionmaker, workspace.id)
    run_a = await rows.run(agent_pk, status="RUNNING")
    run_b = await rows.run(agent_pk, status="RUNNING")
    now = datetime.now(UTC)

    async def remember(run: orm.Run, **fields: Any) -> memories.Written:
        async with sessionmaker() as session, session.begin():
            return await memories.remember(
                session,
                workspace_id=workspace.id,
                agent_id=agent_pk,
                now=now,
                max_value_chars=16_384,
                source_run_id=run.id,
                **{"tags": None, "importance": None, **fields},
            )

    first = await remember(run_a, key="Decision", value="target fintech", tags=["icp"], importance=0.8)
    assert first.created
    second = await remember(run_b, key="Decision", value="target healthtech")
    assert not second.created and second.memory.id == first.memory.id
    other_case = await remember(run_b, key="decision", value="lower-case key is another memory")
    assert other_case.created and other_case.memory.id != first.memory.id

    memory = (
        await gql.ok(
            """query($id: ID!) { node(id: $id) { ... on Memory {
                 value tags importance sourceRun { id } revisions { action oldValue newValue byOperator sourceRun { id } }
               } } }""",
            {"id": gid("Memory", first.memory.id)},
            token=workspace.viewer,
        )
    )["node"]
    assert (memory["value"], memory["tags"], memory["importance"]) == ("target healthtech", ["icp"], 0.8)
    assert memory["sourceRun"] == {"id": gid("Run", run_b.id)}
    assert memory["revisions"] == [
        {
            "action": "CREATE",
            "oldValue": None,
            "newValue": "target fintech",
            "byOperator": False,
            "sourceRun": {"id": gid("Run", run_a.id)},
        },
        {
            "action": "UPDATE",
            "oldValue": "target fintech",
            "newValue": "target healthtech",
            "byOperator": False,
            "sourceRun": {"id": gid("Run", run_b.id)},
        },
    ]

    async with sessionmaker() as session, session.begin():
        assert await memories.forget(
            session, agent_id=agent_pk, key="Decision", now=now, source_run_id=run_a.id
        )
        assert not await memories.forget(
            session, agent_id=agent_pk, key="Decision", now=now, source_run_id=run_a.id
        )
    async with sessionmaker() as session:
        revisions = list(
            await session.scalars(
                select(orm.MemoryRevision)
                .where(orm.MemoryRevision.memory_id == first.memory.id)
                .order_by(orm.MemoryRevision.id)
            )
        )
    assert [(r.action, r.run_id, r.token_id) for r in revisions][-1] == ("DELETE", run_a.id, None)


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"key": "", "value": "v"}, ValidationFailed, "key"),
        ({"key": "k" * 256, "value": "v"}, ValidationFailed, "key"),
        ({"key": "k", "value": "v" * 101}, ValidationFailed, "value"),
        ({"key": "k", "value": "v", "importance": 1.01}, ValidationFailed, "importance"),
        ({"key": "k", "value": "v", "tags": [f"t{i}" for i in range(33)]}, ValidationFailed, "tags"),
        ({"key": "k", "value": "v", "tags": ["t" * 65]}, ValidationFailed, "tags"),
        ({"key": "smtp_password", "value": "tulip42"}, CredentialRejected, "value"),
        ({"key": "k", "value": "api_key=" + "zz9"}, CredentialRejected, "value"),
    ],
)
async def test_refused_writes_store_nothing(
    gql: Any, workspace: Any, sessionmaker: Any, fields: dict[str, Any], error: type[Exception], field: str
) -> None:
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
    with pytest.raises(error) as caught:
        async with sessionmaker() as session, session.begin():
            await memories.remember(
                session,
                workspace_id=workspace.id,
                agent_id=agent_pk,
                now=datetime.now(UTC),
                max_value_chars=100,
                **{"tags": None, "importance": None, **fields},
            )
    assert caught.value.field == field  # type: ignore[attr-defined]
    async with sessionmaker() as session:
        assert await session.scalar(select(orm.Memory).where(orm.Memory.agent_id == agent_pk)) is None
        assert (
            await session.scalar(select(orm.MemoryRevision).where(orm.MemoryRevision.agent_id == agent_pk))
            is None
        )


async def test_search_for_a_run_marks_results_used(gql: Any, workspace: Any, sessionmaker: Any) -> None:
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
    await _insert(
        sessionmaker,
        workspace.id,
        agent_pk,
        key="excluded",
        value="Orbit Labs is a customer",
        tags=["research"],
    )
    await _insert(sessionmaker, workspace.id, agent_pk, key="other", value="unrelated", tags=["research"])
    now = datetime.now(UTC)
    async with sessionmaker() as session, session.begin():
        found = await memory_search.search(
            session,
            workspace_id=workspace.id,
            agent_id=agent_pk,
            query="customers orbit",
            tags=["research"],
            limit=5,
            now=now,
            mark_used=True,
        )
    assert [m.key for m in found] == ["excluded"]
    async with sessionmaker() as session:
        used = {
            m.key: m.last_used_at
            for m in await session.scalars(select(orm.Memory).where(orm.Memory.agent_id == agent_pk))
        }
    assert used["excluded"] is not None and used["other"] is None


async def test_concurrent_remembers_of_one_new_key_both_land(
    gql: Any, workspace: Any, sessionmaker: Any
) -> None:
    """Two runs remembering the same new key at once: one creates, the other updates (the
    unique index decides; a savepoint keeps the loser's transaction alive). On MariaDB this
    is real row locking; on SQLite the writers take turns."""
    agent_pk = pk(await scripted_agent(gql, workspace.admin, tools=[]))
    rows = Rows(sessionmaker, workspace.id)
    runs = [await rows.run(agent_pk, status="RUNNING") for _ in range(4)]

    async def remember(run: orm.Run) -> bool:
        async with sessionmaker() as session, session.begin():
            written = await memories.remember(
                session,
                workspace_id=workspace.id,
                agent_id=agent_pk,
                key="shared",
                value=f"from run {run.id}",
                tags=None,
                importance=None,
                now=datetime.now(UTC),
                max_value_chars=100,
                source_run_id=run.id,
            )
            await asyncio.sleep(0.05)  # hold the transaction open so the others overlap
            return written.created

    created = await asyncio.gather(*(remember(r) for r in runs))
    assert sorted(created) == [False, False, False, True]
    async with sessionmaker() as session:
        stored = list(await session.scalars(select(orm.Memory).where(orm.Memory.agent_id == agent_pk)))
        revisions = list(
            await session.scalars(
                select(orm.MemoryRevision)
                .where(orm.MemoryRevision.agent_id == agent_pk)
                .order_by(orm.MemoryRevision.id)
            )
        )
    assert len(stored) == 1
    assert [r.action for r in revisions] == ["CREATE", "UPDATE", "UPDATE", "UPDATE"]
    # Each revision starts from the value the previous one left: no branching history.
    assert [r.old_value for r in revisions[1:]] == [r.new_value for r in revisions[:-1]]
    assert stored[0].value == revisions[-1].new_value
