"""Run events written the way the chokepoint writes them (appended under the root row's lock
in a ``TreeTx``, published after commit), for subscription tests. An event can also be left
unpublished: exactly what a lost pub/sub message looks like to a subscriber."""

from __future__ import annotations

from sqlalchemy import select

from app.clock import utcnow
from app.db import orm
from app.domain.actors import SYSTEM
from app.domain.agents import AgentStatus
from app.domain.run_events import EventType
from app.domain.runs import RunStatus, RunTrigger
from app.events.publish import EventMessage, publish_events
from app.graphql.ids import to_global_id
from app.services.agents import version_row
from app.services.runtime import Runtime
from app.services.transitions import NewRun, NewTree, TreeTx
from tests.conftest import WorkspaceFixture


async def new_root_run(runtime: Runtime, workspace: WorkspaceFixture) -> orm.Run:
    """An agent and a QUEUED root run with its RUN_CREATED event (seq 1), published."""
    now = utcnow()
    async with runtime.sessionmaker() as session:
        async with session.begin():
            agent = orm.Agent(
                workspace_id=workspace.id,
                name=f"watcher-{now.timestamp()}",
                status=AgentStatus.ACTIVE.value,
                model={"provider": "scripted", "steps": [{"final": "done"}]},
                tools=[],
                policy={},
                memory_max_items=5,
                memory_max_chars=1_000,
                created_at=now,
                updated_at=now,
            )
            session.add(agent)
            await session.flush()
            session.add(version_row(agent, SYSTEM, agent.created_at))
            # The chokepoint's own path, without the job it would enqueue: these tests move
            # the run themselves.
            tree = NewTree(session)
            run = await tree.create_run(NewRun(agent=agent, trigger=RunTrigger.API, input={"q": 1}))
            await tree.finish()
    await publish_events(runtime.redis, runtime.settings.redis_prefix, tree.events)
    return run


async def new_child_run(runtime: Runtime, root: orm.Run) -> orm.Run:
    now = utcnow()
    async with runtime.sessionmaker() as session:
        async with session.begin():
            child = orm.Run(
                workspace_id=root.workspace_id,
                agent_id=root.agent_id,
                status=RunStatus.QUEUED.value,
                trigger=RunTrigger.DELEGATION.value,
                parent_run_id=root.id,
                root_run_id=root.id,
                depth=1,
                policy_chain=[],
                created_at=now,
                updated_at=now,
            )
            session.add(child)
    return child


async def append(
    runtime: Runtime,
    root_id: int,
    run_id: int | None = None,
    *,
    publish: bool = True,
    n: int = 1,
    payload_chars: int = 0,
) -> list[EventMessage]:
    """Append ``n`` events under the root's lock (TreeTx.emit) and, unless told not to,
    publish them after commit: a ``publish=False`` event is a lost pub/sub message.
    ``payload_chars`` pads each payload (to fill a socket quickly)."""
    async with runtime.sessionmaker() as session:
        async with session.begin():
            root = await session.scalar(select(orm.Run).where(orm.Run.id == root_id).with_for_update())
            assert root is not None
            tx = TreeTx(session, root, utcnow())
            run = root if run_id is None else await tx.run(run_id)
            for i in range(n):
                payload: dict[str, object] = {"i": i}
                if payload_chars:
                    payload["pad"] = "x" * payload_chars
                tx.emit(run, EventType.MEMORY_WRITTEN, payload=payload)
            await tx.write_events()
    if publish:
        await publish_events(runtime.redis, runtime.settings.redis_prefix, tx.events)
    return tx.events


def gid(run: orm.Run | int) -> str:
    return to_global_id("Run", run if isinstance(run, int) else run.id)
