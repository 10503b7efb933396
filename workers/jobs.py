"""arq job functions. Arguments are ids; everything else is reloaded from the database."""

from __future__ import annotations

from typing import Any

from app.engine.loop import execute_run as run_loop
from app.services.sweeper import sweep


async def execute_run(ctx: dict[str, Any], run_id: int, wake: int, root_id: int | None = None) -> None:
    # `wake` is only part of the job identity (see app.keys.run_job_id); the claim decides.
    # `root_id` saves a lookup: a run's root never changes.
    await run_loop(
        ctx["runtime"],
        ctx["registry"],
        run_id,
        owner=ctx["owner"],
        root_id=root_id,
        providers=ctx["providers"],
    )


async def sweep_runs(ctx: dict[str, Any]) -> dict[str, int]:
    report = await sweep(ctx["runtime"])
    return {
        "requeued_expired": report.requeued_expired,
        "reenqueued": report.reenqueued,
        "reissued": report.reissued,
    }
