"""What a delegation costs, against plain runs measured in the same process.

    .venv/bin/python bench/delegation.py [--repeat 3] [--count] [--server mysql+asyncmy://root@127.0.0.1:3306/test]

1. Plain: 31 one-turn runs (a final answer) started at once; time until all SUCCEEDED.
2. Tree: a root delegating to 5 children in one turn, each delegating to 5 leaves (31 runs);
   time until the root SUCCEEDED. The ratio of (2) to (1) is what a delegation costs
   compared to a plain run (target: at most 1.5).
3. Wide: a root delegating to 50 children in one turn (51 runs), against 51 plain runs:
   every run of a tree serialises on its root row, so this is where that shows.

One in-process worker; MariaDB by default (a fresh schema, dropped afterwards); Redis at
127.0.0.1:6379. Medians of ``--repeat`` rounds (each round's figures are printed too).
``--count`` adds one more round of (1) and (2) counting statements and commits per run,
which the machine's load does not move. ``--result-kb N``: every leaf answers with about N KB
of text (a child's outcome is the result of its parent's step), for trees whose children
report back at length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from sqlalchemy import event
from sqlalchemy.engine import Engine

from app.db.orm import Agent
from app.domain.actors import SYSTEM
from app.domain.agents import Role
from app.events.publish import raw_events
from app.keys import events_channel
from app.services import auth, runs
from app.services.agents import version_row
from app.services.runtime import open_runtime
from app.settings import Settings
from bench.support import create_database
from workers.main import build_worker


class Counted:
    """Counts every statement and commit of every engine in the process (the worker's too)."""

    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0

    def _statement(self, *args: Any) -> None:
        self.statements += 1

    def _commit(self, *args: Any) -> None:
        self.commits += 1

    def __enter__(self) -> Counted:
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(Engine, "before_cursor_execute", self._statement)
        event.remove(Engine, "commit", self._commit)


async def make_agent(
    rt: Any, workspace_id: int, name: str, steps: list[dict[str, Any]], budget: dict[str, Any] | None = None
) -> int:
    from app.clock import utcnow

    async with rt.sessionmaker() as session, session.begin():
        agent = Agent(workspace_id=workspace_id, name=name, description=None, instructions="bench",
                      status="ACTIVE", model={"provider": "scripted", "steps": steps}, tools=["agents.*"],
                      policy={}, memory_max_items=5, memory_max_chars=1000, created_at=utcnow(),
                      updated_at=utcnow(), budget=budget)  # fmt: skip
        session.add(agent)
        await session.flush()
        session.add(version_row(agent, SYSTEM, agent.created_at))  # a run is pinned to one
        return agent.id


def fan_out(child: str, n: int) -> list[dict[str, Any]]:
    calls = [{"call": "agents.delegate", "args": {"agent": child, "task": f"part {i}"}} for i in range(n)]
    return [{"calls": calls}, {"final": "{{ results | length }}"}]


async def until_succeeded(rt: Any, principal: Any, agent_ids: list[int], watch_ids: int) -> float:
    """Start runs of ``agent_ids``; seconds until ``watch_ids`` of them (or of their trees'
    roots) reached SUCCEEDED, seen on the live event channel."""
    pubsub = rt.redis.pubsub()
    await pubsub.subscribe(events_channel(rt.settings.redis_prefix))
    started = time.perf_counter()
    ids = {(await runs.start_run(rt, principal, agent_id=a, input=None)).id for a in agent_ids}
    done: set[int] = set()
    deadline = time.monotonic() + 300
    try:
        while len(done) < watch_ids:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(done)} of {watch_ids} runs succeeded")
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if not msg:
                continue
            for event in raw_events(msg["data"]):
                if (
                    event.get("run_id") in ids
                    and event.get("type") == "RUN_STATUS_CHANGED"
                    and event.get("status") == "SUCCEEDED"
                ):
                    done.add(event["run_id"])
    finally:
        await pubsub.aclose()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--count", action="store_true",
                        help="then one more round of each, counting statements and commits per run")  # fmt: skip
    parser.add_argument(
        "--result-kb", type=int, default=0, help="each leaf's final answer: about this many KB"
    )
    parser.add_argument("--budget", type=json.loads, default=None,
                        help='every agent\'s budget, JSON (docs/concepts/budgets.md): {"maxTokens": 1000000}')  # fmt: skip
    args = parser.parse_args()

    url, drop_database = await create_database(args.server)
    # The deployment's budget defaults let the wide turn's 50 delegations all run (the
    # defaults, 16 calls a turn and 20 children a run, would refuse most of them).
    settings = Settings(database_url=url, redis_url=args.redis_url, sweep_interval_s=30,
                        redis_prefix=f"enverif-bench-{uuid.uuid4().hex[:6]}",
                        max_calls_per_turn=64, max_children_per_run=64, max_tree_runs=200)  # fmt: skip
    rt = await open_runtime(settings)
    worker = build_worker(settings, handle_signals=False)
    worker_task = asyncio.create_task(worker.main())
    try:
        async with rt.sessionmaker() as session:
            workspace, _ = await auth.create_workspace(session, name="bench")
        principal = auth.Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
        budget = args.budget
        answer = "done " * (args.result_kb * 200) if args.result_kb else "done"
        leaf = await make_agent(rt, workspace.id, "leaf", [{"final": answer}], budget)
        await make_agent(rt, workspace.id, "mid", fan_out("leaf", 5), budget)
        root = await make_agent(rt, workspace.id, "root", fan_out("mid", 5), budget)
        wide = await make_agent(rt, workspace.id, "wide", fan_out("leaf", 50), budget)
        await until_succeeded(rt, principal, [leaf] * 10, 10)  # warm up
        plain31, tree31, plain51, wide51 = [], [], [], []
        for _ in range(args.repeat):
            plain31.append(await until_succeeded(rt, principal, [leaf] * 31, 31))
            tree31.append(await until_succeeded(rt, principal, [root], 1))
            plain51.append(await until_succeeded(rt, principal, [leaf] * 51, 51))
            wide51.append(await until_succeeded(rt, principal, [wide], 1))
        p31, t31 = statistics.median(plain31), statistics.median(tree31)
        p51, w51 = statistics.median(plain51), statistics.median(wide51)
        report = {
            "database": "mariadb",
            "budget": budget,
            "leaf_result_kb": args.result_kb,
            "plain_31_runs_s": round(p31, 3),
            "tree_5x5_31_runs_s": round(t31, 3),
            "ms_per_plain_run": round(p31 * 1000 / 31, 2),
            "ms_per_delegated_run": round(t31 * 1000 / 31, 2),
            "delegation_cost_vs_plain_run": round(t31 / p31, 2),
            "plain_51_runs_s": round(p51, 3),
            "wide_50_children_s": round(w51, 3),
            "wide_cost_vs_plain_runs": round(w51 / p51, 2),
            "target": "delegation_cost_vs_plain_run <= 1.5",
            # Every round, in order: on a shared machine the medians alone hide the spread.
            "rounds": {
                "plain_31_runs_s": [round(t, 3) for t in plain31],
                "tree_5x5_31_runs_s": [round(t, 3) for t in tree31],
                "plain_51_runs_s": [round(t, 3) for t in plain51],
                "wide_50_children_s": [round(t, 3) for t in wide51],
            },
        }
        if args.count:
            # Load-independent: what a plain and a delegated run ask of the database.
            for name, agent_ids, watch in (("plain", [leaf] * 31, 31), ("delegated", [root], 1)):
                with Counted() as counted:
                    await until_succeeded(rt, principal, agent_ids, watch)
                    await asyncio.sleep(0.5)  # the last run's commit and what follows it
                report[f"statements_per_{name}_run"] = round(counted.statements / 31, 2)
                report[f"commits_per_{name}_run"] = round(counted.commits / 31, 2)
        print(json.dumps(report, indent=2))
    finally:
        worker_task.cancel()
        await asyncio.gather(worker_task, return_exceptions=True)
        await worker.close()
        await rt.close()
        await drop_database()


if __name__ == "__main__":
    asyncio.run(main())
