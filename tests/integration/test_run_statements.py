"""What a run costs the database, counted through a real worker: each statement of the run's
path is work for the database and for the worker (docs/performance.md), so a change that
adds one shows here before it shows in a benchmark."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event

from app.keys import sweeper_turn_key
from app.services.runtime import open_runtime
from tests.conftest import stop_worker
from tests.support.runs import scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

ALLOW_WEBHOOK = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


class Statements:
    """The worker's statements, by their first word, and its commits."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.texts: list[str] = []
        self.commits = 0

    def executed(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.kinds[statement.split(None, 1)[0].upper()] += 1
        self.texts.append(statement)

    def committed(self, _conn: Any) -> None:
        self.commits += 1

    def clear(self) -> None:
        self.kinds.clear()
        self.texts.clear()
        self.commits = 0


@pytest.fixture
async def counted(settings: Any) -> AsyncIterator[Statements]:
    """An in-process worker that does not sweep (the sweeper's turn is taken), and the
    statements of its engine."""
    from workers.main import build_worker

    turn = sweeper_turn_key(settings.redis_prefix)
    rt = await open_runtime(settings, worker=True)
    await rt.redis.set(turn, b"test", px=120_000)
    engine = rt.engine.sync_engine
    seen = Statements()
    event.listen(engine, "before_cursor_execute", seen.executed)
    event.listen(engine, "commit", seen.committed)
    w = build_worker(settings, handle_signals=False, runtime=rt)
    task = asyncio.create_task(w.main())
    try:
        yield seen
    finally:
        await stop_worker(w, task)
        await rt.redis.delete(turn)
        await rt.close()


async def test_three_side_effecting_calls_cost_five_transactions_of_few_statements(
    gql: Any, workspace: Any, counted: Statements
) -> None:
    """The claim, one transaction per call (its step written before it runs, the previous
    call's result with it) and the final answer: 5 commits. Per transaction, one locking read
    of the run and one UPDATE of it, one INSERT of events; the claim's read of the agent
    before its lock; and at the end, the look for live children to end (kept even for a run
    that never delegated: test_engine's live descendants, however they came to be). Counted
    on the agent's second run: the worker reads an agent's pinned version once."""
    async with sink_server() as (sink, url):
        call = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}}
        agent = await scripted_agent(
            gql, workspace.admin, steps=[call, call, call, {"final": "done"}], policy=ALLOW_WEBHOOK
        )
        for _ in range(2):
            counted.clear()
            run = await wait_run(gql, workspace.viewer, await start_run(gql, workspace.operator, agent))
            assert run["status"] == "SUCCEEDED", run
    assert len(sink.deliveries) == 6
    assert counted.commits == 5
    selects = [s[:100] for s in counted.texts if s.startswith("SELECT")]
    assert dict(counted.kinds) == {"SELECT": 7, "INSERT": 9, "UPDATE": 8}, selects
    # What the run started with (its input can be 256 KB) is read by the claim alone: the four
    # writes after it lock the run's row without it (tree_tx's ``without_start``).
    assert sum("agent_runs.input" in s for s in counted.texts) == 1, selects
