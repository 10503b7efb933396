"""The tree chaos scenario (``make chaos``; a short version runs in ``make test``): 3-level
delegation trees with approvals and webhooks, real workers SIGKILLed and a private Redis
SIGKILLed under them, then an invariant checker over the database and the webhook receiver.

Each tree: a root delegates to two mid-level agents in one turn; each mid posts a webhook
and delegates to a leaf in one turn; each leaf posts a webhook that needs an approval, which
the test decides through GraphQL as it shows (a share of them rejected). Invariants:

- every run is terminal, and the tree has all its runs;
- nothing is delivered again after its result was recorded, and no key completes twice;
- a rejected call is never delivered;
- every parent's delegation step holds its child's outcome (status, result, error);
- each root's event log is gap-free.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from app.db.orm import Approval, Run, RunEvent, RunStep
from app.graphql.ids import to_global_id
from app.settings import Settings
from tests.support.runs import DECIDE, create_agent, start_run
from tests.support.servers import Sink, sink_server
from tests.support.workers import exited, spawn_worker

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
RUNS_PER_TREE = 5
LEASE_S = 2.0


@dataclass(frozen=True)
class Chaos:
    trees: int
    workers: int = 2
    worker_kills: int = 1
    redis_kills: int = 1
    kill_every_s: float = 2.0
    redis_down_s: float = 2.0
    deadline_s: float = 120.0
    reject_share: float = 0.2
    seed: int = 2029


@dataclass
class Outcome:
    worker_kills: int = 0
    redis_kills: int = 0
    approvals: int = 0
    rejections: int = 0
    finished_after_s: float = 0.0
    redis_back_at: list[float] = field(default_factory=list)


async def run_tree_chaos(
    chaos: Chaos,
    *,
    settings: Settings,
    workspace: Any,
    sessionmaker: Any,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> Outcome:
    # Imported here: the Redis and API helpers live with the resilience tests.
    from tests.integration.test_resilience import api, changed, redis_server

    rng = random.Random(chaos.seed)
    outcome = Outcome()
    with redis_server(tmp_path) as (port, stop_redis, start_redis):
        mine = changed(settings, redis_url=f"redis://127.0.0.1:{port}/0")
        async with sink_server(delay_s=0.2) as (sink, url), api(mine) as gql:
            root = await _tree_agents(gql, workspace, url)
            live = [spawn_worker(mine, lease_s=LEASE_S) for _ in range(chaos.workers)]
            processes.extend(live)
            for n in range(chaos.trees):
                await start_run(gql, workspace.operator, root, {"task": f"tree {n}"})
            started = time.monotonic()
            faults = _fault_plan(chaos, started)
            redis_down_until: float | None = None
            while True:
                now = time.monotonic()
                if redis_down_until is not None and now >= redis_down_until:
                    start_redis()
                    outcome.redis_back_at.append(time.time())
                    redis_down_until = None
                elif faults and now >= faults[0][0]:
                    _, kind = faults.pop(0)
                    if kind == "worker":
                        victim = live.pop(rng.randrange(len(live)))
                        victim.send_signal(signal.SIGKILL)
                        victim.wait()
                        fresh = spawn_worker(mine, lease_s=LEASE_S)
                        live.append(fresh)
                        processes.append(fresh)
                        outcome.worker_kills += 1
                    elif redis_down_until is None:
                        stop_redis()
                        outcome.redis_kills += 1
                        redis_down_until = now + chaos.redis_down_s
                await _decide_pending(gql, workspace, sessionmaker, rng, chaos.reject_share, outcome)
                if (
                    redis_down_until is None
                    and not faults
                    and await _all_terminal(sessionmaker, workspace.id, chaos)
                ):
                    break
                assert now - started < chaos.deadline_s, await _stuck(sessionmaker, workspace.id)
                await asyncio.sleep(0.1)
            outcome.finished_after_s = round(time.monotonic() - started, 1)
            assert not exited(live), exited(live)
            await check_tree_invariants(sessionmaker, workspace.id, sink, chaos.trees)
    return outcome


async def _tree_agents(gql: Any, workspace: Any, url: str) -> str:
    tag = uuid.uuid4().hex[:6]
    hook = {"call": "webhook.post", "args": {"url": url + "/hook", "payload": {"task": "{{ input.task }}"}}}
    leaf, mid = f"leaf-{tag}", f"mid-{tag}"
    await create_agent(
        gql, workspace.admin, name=leaf, tools=["webhook.post"],
        policy={"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL"}]},
        steps=[hook, {"final": "{{ input.task }} posted"}],
    )  # fmt: skip
    await create_agent(
        gql, workspace.admin, name=mid, tools=["webhook.post", "agents.*"],
        policy={"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]},
        steps=[{"calls": [hook, {"call": "agents.delegate", "args": {"agent": leaf, "task": "{{ input.task }}/leaf"}}]},
               {"final": "{{ input.task }} done"}],
    )  # fmt: skip
    return await create_agent(
        gql, workspace.admin, name=f"root-{tag}", tools=["agents.*"],
        policy={"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]},
        steps=[{"calls": [{"call": "agents.delegate", "args": {"agent": mid, "task": f"{{{{ input.task }}}}/mid {i}"}}
                          for i in range(2)]},
               {"final": "{{ results | map(attribute='status') | list }}"}],
    )  # fmt: skip


def _fault_plan(chaos: Chaos, started: float) -> list[tuple[float, str]]:
    """Worker kills every ``kill_every_s``, Redis kills interleaved between them."""
    kinds = ["worker"] * chaos.worker_kills
    for n in range(chaos.redis_kills):
        kinds.insert(min(len(kinds), 2 * n + 1), "redis")
    # A Redis kill takes its downtime before the next fault.
    plan, at = [], started + 1.0
    for kind in kinds:
        plan.append((at, kind))
        at += chaos.kill_every_s + (chaos.redis_down_s if kind == "redis" else 0.0)
    return plan


async def _decide_pending(
    gql: Any, workspace: Any, sessionmaker: Any, rng: random.Random, reject_share: float, outcome: Outcome
) -> None:
    async with sessionmaker() as session:
        pending = list(await session.scalars(
            select(Approval.id).where(Approval.workspace_id == workspace.id, Approval.status == "PENDING")
        ))  # fmt: skip
    for approval_id in pending:
        approve = rng.random() >= reject_share
        await gql.raw(DECIDE, {"id": to_global_id("Approval", approval_id), "approve": approve},
                      token=workspace.operator)  # fmt: skip
        outcome.approvals += approve
        outcome.rejections += not approve


async def _all_terminal(sessionmaker: Any, workspace_id: int, chaos: Chaos) -> bool:
    async with sessionmaker() as session:
        rows = list(await session.scalars(select(Run.status).where(Run.workspace_id == workspace_id)))
    return len(rows) == chaos.trees * RUNS_PER_TREE and all(s in TERMINAL for s in rows)


async def _stuck(sessionmaker: Any, workspace_id: int) -> str:
    async with sessionmaker() as session:
        rows = list(await session.execute(
            select(Run.id, Run.status, Run.attempt, Run.parent_run_id).where(
                Run.workspace_id == workspace_id, Run.status.notin_(TERMINAL))
        ))  # fmt: skip
    return f"trees did not finish before the deadline; open runs: {rows}"


async def check_tree_invariants(sessionmaker: Any, workspace_id: int, sink: Sink, trees: int) -> None:
    async with sessionmaker() as session:
        runs = {r.id: r for r in await session.scalars(select(Run).where(Run.workspace_id == workspace_id))}
        steps = list(await session.scalars(select(RunStep).where(RunStep.workspace_id == workspace_id)))
        events = list(await session.scalars(
            select(RunEvent).where(RunEvent.workspace_id == workspace_id).order_by(RunEvent.root_run_id, RunEvent.seq)
        ))  # fmt: skip
    assert len(runs) == trees * RUNS_PER_TREE, len(runs)
    assert all(r.status in TERMINAL for r in runs.values()), [(r.id, r.status) for r in runs.values()]
    assert len([r for r in runs.values() if r.parent_run_id is None]) == trees

    first_at = _earliest(sink)
    for step in (s for s in steps if s.tool == "webhook.post"):
        key = str(step.id)
        if step.status == "REJECTED":
            assert key not in first_at, f"rejected step {key} was delivered"
            continue
        assert step.status == "SUCCEEDED", (key, step.status, step.error)
        assert sink.completions(key) == 1, f"step {key} completed {sink.completions(key)} times"
        assert step.finished_at is not None
        late = [
            d for d in sink.deliveries if d.key == key and d.arrived_at > step.finished_at.timestamp() + 0.001
        ]
        assert not late, f"step {key} was sent again after its result was recorded"

    for step in (s for s in steps if s.tool == "agents.delegate"):
        assert step.child_run_id is not None and step.status == "SUCCEEDED", (step.id, step.status)
        child = runs[step.child_run_id]
        expected = {
            "status": child.status, "result": child.result, "error": child.error,
            "runId": to_global_id("Run", child.id),
        }  # fmt: skip
        assert step.result == expected, (step.id, step.result, expected)

    by_root: dict[int, list[int]] = defaultdict(list)
    for event in events:
        by_root[event.root_run_id].append(event.seq)
    assert len(by_root) == trees
    for root_id, seqs in by_root.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"tree {root_id}: event seqs are not gap-free"


def _earliest(sink: Sink) -> dict[str, float]:
    first: dict[str, float] = {}
    for d in sink.deliveries:
        if d.key is not None:
            first[d.key] = min(first.get(d.key, d.arrived_at), d.arrived_at)
    return first


def print_outcome(name: str, chaos: Chaos, outcome: Outcome, emit: Callable[[str], None] = print) -> None:
    emit(
        f"\n{name}: {chaos.trees} trees ({chaos.trees * RUNS_PER_TREE} runs), {outcome.worker_kills} worker "
        f"SIGKILLs, {outcome.redis_kills} Redis SIGKILLs ({chaos.redis_down_s:.0f} s down), "
        f"{outcome.approvals} approved / {outcome.rejections} rejected; all terminal and every invariant held, "
        f"{outcome.finished_after_s} s after the start"
    )


async def assert_trees_survive(name: str, chaos: Chaos, **fixtures: Any) -> Outcome:
    """``run_tree_chaos`` (which checks the invariants), printed; every planned fault happened."""
    outcome = await run_tree_chaos(chaos, **fixtures)
    print_outcome(name, chaos, outcome)
    assert (outcome.worker_kills, outcome.redis_kills) == (chaos.worker_kills, chaos.redis_kills)
    return outcome
