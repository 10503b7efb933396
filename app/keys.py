"""Every Redis key, queue and channel name, built in one place from the deployment prefix."""

from __future__ import annotations


def queue_name(prefix: str) -> str:
    return f"{prefix}:queue"


def run_job_id(run_id: int, wake_count: int) -> str:
    # One id per wake-up: arq refuses to enqueue a job id whose earlier job is still queued,
    # running or has a kept result, so a resumed run needs a fresh id (PITFALLS: arq).
    return f"run:{run_id}:{wake_count}"


def events_channel(prefix: str) -> str:
    """The single pub/sub channel for run events; each API process subscribes once."""
    return f"{prefix}:events"
