"""arq job functions. Arguments are ids; everything else is reloaded from the database."""

from __future__ import annotations

import logging
from typing import Any

from app.engine import loop as engine
from app.outages import OUTAGE_WARNINGS, is_outage
from app.services import schedule_firing

log = logging.getLogger(__name__)


async def execute_run(ctx: dict[str, Any], run_id: int, wake: int, root_id: int | None = None) -> None:
    # `wake` is only part of the job identity (see app.keys.run_job_id); the claim decides.
    # `root_id` saves a lookup: a run's root never changes.
    try:
        await engine.execute_run(ctx["runtime"], ctx["registry"], run_id, owner=ctx["owner"], root_id=root_id,
                                 providers=ctx["providers"], stopping=ctx["stopping"], mcp=ctx["mcp"],
                                 live=ctx.get("live_runs"))  # fmt: skip
    except Exception as exc:
        if not is_outage(exc):
            raise
        # The database went away before the run was claimed (or while handing it back): the
        # run is still QUEUED, or RUNNING under a lease that will expire, and the sweeper
        # delivers it again once the database answers. Not a failure of the job.
        OUTAGE_WARNINGS.warn(log, "runs not claimed or not handed back: the database is unavailable (%s); "
                             "the sweeper will deliver them again", type(exc).__name__)  # fmt: skip


async def fire_schedules(ctx: dict[str, Any]) -> None:
    """The arq cron job (every minute, and at worker start): fire the schedules that are due.
    Every worker enqueues it each minute under the same job id, so usually one of them runs
    it; when several do, the database still lets each fire time fire once
    (``services.schedule_firing``)."""
    try:
        report = await schedule_firing.tick(ctx["runtime"])
    except Exception as exc:
        if not is_outage(exc):
            raise
        # Nothing was fired that is not recorded; the next minute's tick picks up what is due.
        log.warning("schedules: database unavailable (%s); the next tick will fire them", type(exc).__name__)
        return
    if report.firings:
        log.info("schedules: %d fired, %d skipped", report.fired, report.skipped)
