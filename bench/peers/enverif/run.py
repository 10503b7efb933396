"""Enverif: ``bench/throughput.py``'s write scenario (a scripted agent making three
``webhook.post`` calls to the local page server, each step recorded before its call, then a
final answer) through one in-process worker (``worker_max_jobs``, 16 by default, in flight),
on MariaDB or SQLite. Runs in the project's own ``.venv``.

As in ``bench/throughput.py``, the timed runs are queued with the worker paused, and the
window runs from letting it pick jobs to the last run's ``SUCCEEDED`` on the event channel.
The database it is given is empty; it is migrated here. Redis at ``--redis-url``, under a key
prefix of its own that is deleted afterwards.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/peers: the protocol
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository

from protocol import CALLS, arguments  # first: it sets the offline environment

# isort: split

from redis.asyncio import Redis

from app.db import migrate
from app.db.session import create_engine
from app.services import runs
from app.services.runtime import open_runtime
from app.settings import Settings
from bench.support import operator_workspace
from bench.throughput import make_agent, wait_statuses
from workers.main import build_worker, stop_worker

REDIS_URL = "redis://127.0.0.1:6379/0"


def database_url(db: str, url: str) -> str:
    if db == "sqlite":
        return f"sqlite+aiosqlite:///{url}"
    return url.replace("mysql://", "mysql+asyncmy://", 1) + "?charset=utf8mb4"


async def main() -> None:
    args = arguments(("sqlite", "mariadb"))
    settings = Settings(
        database_url=database_url(args.db, args.url),
        redis_url=REDIS_URL,
        redis_prefix=f"enverif-bench-peers-{uuid.uuid4().hex[:6]}",
        http_allow_private_networks=True,
        sweep_interval_s=30,
        worker_max_jobs=args.in_flight,
    )
    engine = create_engine(settings.effective_database_url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()
    rt = await open_runtime(settings)
    worker = build_worker(settings, handle_signals=False)
    poll = asyncio.create_task(worker.main())
    try:
        workspace_id, principal = await operator_workspace(rt, "bench-peers")
        post = {"call": "webhook.post", "args": {"url": f"{args.server}/hook", "payload": {"n": 1}}}
        agent = await make_agent(
            rt, workspace_id, "three-writes", [post] * CALLS + [{"final": "done"}],
            policy={"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]},
        )  # fmt: skip

        async def queue(n: int) -> asyncio.Task[dict[int, float]]:
            """``n`` started runs, and the task that sees each reach SUCCEEDED."""
            ids = {(await runs.start_run(rt, principal, agent_id=agent, input=None)).id for _ in range(n)}
            watcher = asyncio.create_task(wait_statuses(rt, ids, timeout_s=600))
            await asyncio.sleep(0.2)  # the watcher's subscription
            return watcher

        await (await queue(args.in_flight))  # warm-up, the worker picking jobs as they come
        worker.allow_pick_jobs = False
        watcher = await queue(args.runs)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.perf_counter()
        worker.allow_pick_jobs = True
        done = await watcher
        if len(done) < args.runs:
            raise RuntimeError(f"only {len(done)} of {args.runs} runs succeeded")
        print(json.dumps({"runs": args.runs, "elapsed_s": max(done.values()) - started}), flush=True)
    finally:
        await stop_worker(worker, poll)
        await worker.close()  # its sweeper and heartbeat too
        await rt.close()
        redis = Redis.from_url(REDIS_URL)
        async for key in redis.scan_iter(match=f"*{settings.redis_prefix}*"):
            await redis.delete(key)
        await redis.aclose()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
