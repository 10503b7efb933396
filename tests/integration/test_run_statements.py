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

from app.db.orm import RunStep
from app.domain.runs import TERMINAL_STEP
from app.keys import sweeper_turn_key
from app.services.runtime import open_runtime
from tests.conftest import stop_worker
from tests.support.runs import agent_name, scripted_agent, start_run, wait_run
from tests.support.servers import sink_server

ALLOW_WEBHOOK = {"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]}


class Statements:
    """The worker's statements, by their first word, and its commits."""

    def __init__(self, engine: Any) -> None:
        self.kinds: Counter[str] = Counter()
        self.texts: list[str] = []
        self.commits = 0
        self.engine = engine  # the worker's, for its writes

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
    seen = Statements(engine)
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


async def test_a_child_that_ends_reads_none_of_its_parents_finished_steps(
    gql: Any, workspace: Any, counted: Statements
) -> None:
    """A fan-out's children end one by one, each in a transaction that hands its outcome to
    the parent's step and looks at whether the parent can wake: that takes the parent's open
    steps only, not every sibling's outcome again (a wide run's child ends would otherwise
    read O(n^2) results). The parent's finished steps are read once: by its claim after the
    wake, which gives them to the model."""
    width = 4
    leaf = await scripted_agent(gql, workspace.admin, steps=[{"final": "answered"}], tools=[])
    leaf_name = await agent_name(gql, workspace.admin, leaf)
    calls = [
        {"call": "agents.delegate", "args": {"agent": leaf_name, "task": f"part {i}"}} for i in range(width)
    ]
    root = await scripted_agent(gql, workspace.admin, steps=[{"calls": calls}, {"final": "done"}],
                                tools=["agents.*"])  # fmt: skip
    finished_loads: Counter[int] = Counter()

    def loaded(step: RunStep, context: Any) -> None:
        # The worker's write sessions (tree transactions); not its reads, nor the API's.
        if step.status in TERMINAL_STEP and context.session.get_bind() is counted.engine:
            finished_loads[step.run_id] += 1

    event.listen(RunStep, "load", loaded)
    try:
        run_id = await start_run(gql, workspace.operator, root)
        run = await wait_run(gql, workspace.viewer, run_id, timeout_s=30)
    finally:
        event.remove(RunStep, "load", loaded)
    assert run["status"] == "SUCCEEDED", run
    assert list(finished_loads.values()) == [width], finished_loads  # the root's, by its claim


async def test_what_runs_started_with_is_read_by_their_claims_alone_at_any_depth(
    gql: Any, workspace: Any, counted: Statements
) -> None:
    """A chain of delegations as deep as allowed (depth 3), whose deepest run makes a call:
    its turn checks the budgets of its whole chain, locking its grandparent too. What each run
    started with (input, task, memories) is read by its claims (each marked by the statement
    that reads what a claim needs first), by no write after them."""
    async with sink_server() as (sink, url):
        post = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"n": 1}}}
        below = await scripted_agent(
            gql, workspace.admin, steps=[post, {"final": "deepest"}], policy=ALLOW_WEBHOOK
        )
        for _ in range(3):
            name = await agent_name(gql, workspace.admin, below)
            call = {"call": "agents.delegate", "args": {"agent": name, "task": "go deeper"}}
            below = await scripted_agent(gql, workspace.admin, steps=[call, {"final": "{{ results[0].result }}"}],
                                         tools=["agents.*"], policy=ALLOW_WEBHOOK)  # fmt: skip
        run = await wait_run(
            gql, workspace.viewer, await start_run(gql, workspace.operator, below), timeout_s=30
        )
    assert run["status"] == "SUCCEEDED", run
    assert run["result"] == "deepest", run
    assert len(sink.deliveries) == 1
    claims = sum(s.startswith("SELECT agent_runs.injected_memory_ids") for s in counted.texts)
    assert claims == 7  # three delegating runs claimed twice (started, woken), the deepest once
    # The deepest run's claim checks its chain's budgets too: it locks its grandparent with
    # all of the row, beyond the three its first statement locks (a claim's tree transaction
    # is not the worker's writes, whose rows all leave it out).
    assert sum("agent_runs.input" in s for s in counted.texts) == claims + 1
