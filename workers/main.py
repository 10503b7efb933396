"""The arq worker: settings, start-up and shutdown of its resources."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Any

from arq import cron
from arq.worker import Worker, func

from app.engine.providers import Providers
from app.engine.tools.registry import default_registry
from app.keys import queue_name, sweep_job_name
from app.services.runtime import open_runtime, redis_settings
from app.settings import Settings
from workers.jobs import execute_run, sweep_runs

# arq counts starts, not failures: a run job only fails on infrastructure errors (the run
# itself records its own failures), so allow many restarts before arq gives up on a job.
RUN_JOB_MAX_TRIES = 100


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def build_worker(settings: Settings, *, burst: bool = False, **overrides: Any) -> Worker:
    async def on_startup(ctx: dict[str, Any]) -> None:
        ctx["runtime"] = await open_runtime(settings, worker=True)
        ctx["registry"] = default_registry(settings)
        # One guarded HTTP client and one template renderer pool for all runs of this worker.
        ctx["providers"] = Providers(settings)
        ctx["owner"] = worker_id()

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        if "providers" in ctx:
            await ctx["providers"].aclose()
        if "registry" in ctx:
            await ctx["registry"].aclose()
        if "runtime" in ctx:
            await ctx["runtime"].close()

    sweep_every = settings.sweep_interval_s
    options: dict[str, Any] = {
        "functions": [
            func(
                execute_run,
                name="execute_run",
                keep_result=0,
                max_tries=RUN_JOB_MAX_TRIES,
                timeout=settings.job_timeout_s,
            ),
        ],
        "cron_jobs": [
            cron(
                sweep_runs,
                name=sweep_job_name(settings.redis_prefix),
                second=set(range(0, 60, sweep_every)) if sweep_every < 60 else {0},
                run_at_startup=True,
                timeout=max(30, sweep_every * 5),
                keep_result=0,
            ),
        ],
        "redis_settings": redis_settings(settings),
        "queue_name": queue_name(settings.redis_prefix),
        "on_startup": on_startup,
        "on_shutdown": on_shutdown,
        "burst": burst,
        "max_jobs": settings.worker_max_jobs,
        "poll_delay": settings.worker_poll_delay_s,
        "job_timeout": settings.job_timeout_s,
        "keep_result": 0,
        "health_check_interval": 5,
    }
    options.update(overrides)
    return Worker(**options)


async def run_worker(settings: Settings, *, burst: bool = False) -> None:
    """Run until cancelled (the CLI owns SIGINT/SIGTERM and cancels this task).

    On cancellation the in-flight runs are cancelled too: each hands its run straight back
    to the queue (``engine.loop.execute_run``) instead of waiting for its lease to expire.
    """
    worker = build_worker(settings, burst=burst, handle_signals=False)
    try:
        await worker.main()
    except asyncio.CancelledError:
        jobs = [t for t in worker.tasks.values() if not t.done()]
        for task in jobs:
            task.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    finally:
        await worker.close()
