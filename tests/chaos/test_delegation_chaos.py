"""Chaos: delegation trees with approvals while workers are SIGKILLed again and again.

Each tree: a root delegating to two children in one turn; each child posts a webhook that
needs an operator's approval (approved as soon as it shows), then finishes. Checked after:
no run lost, no step executed again after its result was recorded, event seqs gap-free per
tree, and no run's status ever went backwards. `make chaos` (MariaDB).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import time
import uuid
from collections import defaultdict

import pytest
from sqlalchemy import select

from app.db.orm import Approval, Run, RunEvent, RunStep
from app.domain.runs import RunStatus, can_transition_run
from app.graphql.ids import to_global_id
from tests.support.runs import DECIDE, scripted_agent, start_run
from tests.support.servers import sink_server
from tests.support.workers import spawn_worker

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

TREES = 10
WORKERS = 2
KILL_EVERY_S = 0.5  # without kills, the trees are done in about 3 s on SQLite: 3 kills must land first
MAX_KILLS = 20
DEADLINE_S = 180


async def test_delegation_trees_survive_repeated_worker_kills(
    gql, workspace, settings, sessionmaker, processes
) -> None:
    rng = random.Random(4321)
    async with sink_server(delay_s=0.2) as (sink, url):
        child = f"child-{uuid.uuid4().hex[:6]}"
        await scripted_agent(
            gql, workspace.admin, name=child,
            policy={"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL"}]},
            steps=[{"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"task": "{{ input.task }}"}}},
                   {"final": "{{ input.task }} posted"}],
        )  # fmt: skip
        root = await scripted_agent(
            gql, workspace.admin, tools=["agents.*"],
            steps=[{"calls": [{"call": "agents.delegate", "args": {"agent": child, "task": f"part {i}"}}
                              for i in range(2)]},
                   {"final": "{{ results | map(attribute='status') | list }}"}],
        )  # fmt: skip
        live = [spawn_worker(settings, lease_s=2.0) for _ in range(WORKERS)]
        processes.extend(live)
        for _ in range(TREES):
            await start_run(gql, workspace.operator, root)
        kills, next_kill = 0, time.monotonic() + KILL_EVERY_S
        deadline = time.monotonic() + DEADLINE_S
        while True:
            async with sessionmaker() as session:
                pending = list(await session.scalars(
                    select(Approval.id).where(Approval.workspace_id == workspace.id, Approval.status == "PENDING")
                ))  # fmt: skip
                open_run = await session.scalar(
                    select(Run.id).where(Run.workspace_id == workspace.id,
                                         Run.status.notin_(["SUCCEEDED", "FAILED", "CANCELLED"])).limit(1)
                )  # fmt: skip
            for approval_id in pending:
                await gql.raw(DECIDE, {"id": to_global_id("Approval", approval_id), "approve": True},
                              token=workspace.operator)  # fmt: skip
            if open_run is None:
                break
            assert time.monotonic() < deadline, "trees did not all finish before the deadline"
            if kills < MAX_KILLS and time.monotonic() >= next_kill:
                victim = live.pop(rng.randrange(len(live)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                fresh = spawn_worker(settings, lease_s=2.0)
                live.append(fresh)
                processes.append(fresh)
                next_kill = time.monotonic() + KILL_EVERY_S
            await asyncio.sleep(0.1)

    async with sessionmaker() as session:
        runs = list(await session.scalars(select(Run).where(Run.workspace_id == workspace.id)))
        steps = list(await session.scalars(
            select(RunStep).where(RunStep.workspace_id == workspace.id, RunStep.tool == "webhook.post")
        ))  # fmt: skip
        events = list(await session.scalars(
            select(RunEvent).where(RunEvent.workspace_id == workspace.id).order_by(RunEvent.root_run_id, RunEvent.seq)
        ))  # fmt: skip
    assert kills >= 3
    assert len(runs) == TREES * 3 and {r.status for r in runs} == {"SUCCEEDED"}
    assert sorted(r.result for r in runs if r.parent_run_id is None) == [["SUCCEEDED", "SUCCEEDED"]] * TREES
    assert len(steps) == 2 * TREES
    for step in steps:
        key = str(step.id)
        assert sink.completions(key) == 1, f"step {key} completed {sink.completions(key)} times"
        assert step.finished_at is not None
        assert not [
            d for d in sink.deliveries if d.key == key and d.arrived_at > step.finished_at.timestamp() + 0.001
        ]
    by_tree: dict[int, list[int]] = defaultdict(list)
    history: dict[int, list[str]] = defaultdict(list)
    for event in events:
        by_tree[event.root_run_id].append(event.seq)
        if event.type in ("RUN_CREATED", "RUN_STATUS_CHANGED") and event.status:
            history[event.run_id].append(event.status)
    assert len(by_tree) == TREES
    for seqs in by_tree.values():
        assert seqs == list(range(1, len(seqs) + 1)), "event seqs must be gap-free per tree"
    for run_id, statuses in history.items():
        for before, after in itertools.pairwise(statuses):
            assert can_transition_run(RunStatus(before), RunStatus(after)), (run_id, statuses)
