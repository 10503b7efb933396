"""Every Redis key, queue and channel name, built in one place from the deployment prefix."""

from __future__ import annotations


def queue_name(prefix: str) -> str:
    return f"{prefix}:queue"


def run_job_id(prefix: str, run_id: int, wake_count: int) -> str:
    # One id per wake-up: arq refuses to enqueue a job id whose earlier job is still queued,
    # running or has a kept result, so a resumed run needs a fresh id (PITFALLS: arq).
    # Prefixed, because arq's job keys are global to the Redis server, not per queue: two
    # deployments (or databases) sharing a Redis would otherwise swallow each other's jobs.
    return f"{prefix}:run:{run_id}:{wake_count}"


def sweep_job_name(prefix: str) -> str:
    # arq names cron job ids "cron:<name>:<time>", also global to the Redis server.
    return f"sweep_runs:{prefix}"


def events_channel(prefix: str) -> str:
    """The single pub/sub channel for run events; each API process subscribes once."""
    return f"{prefix}:events"
