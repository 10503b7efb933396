"""Every Redis key, queue and channel name, built in one place from the deployment prefix."""

from __future__ import annotations


def queue_name(prefix: str) -> str:
    return f"{prefix}:queue"


def run_job_id(prefix: str, run_id: int, wake_count: int) -> str:
    # One id per wake-up: arq refuses to enqueue a job id whose earlier job is still queued,
    # running or has a kept result, so a resumed run needs a fresh id (docs/architecture.md).
    # Prefixed, because arq's job keys are global to the Redis server, not per queue: two
    # deployments (or databases) sharing a Redis would otherwise swallow each other's jobs.
    return f"{run_job_prefix(prefix)}{run_id}:{wake_count}"


def run_job_prefix(prefix: str) -> str:
    """What every ``run_job_id`` starts with (the sweeper parses queue members with it)."""
    return f"{prefix}:run:"


def schedules_cron_name(prefix: str) -> str:
    """The arq cron job that fires schedules. arq derives the job id from this name (plus
    the minute), and job ids are global to the Redis server: prefixed, like run jobs."""
    return f"{prefix}:fire-schedules"


def events_channel(prefix: str) -> str:
    """The single pub/sub channel for run events; each API process subscribes once."""
    return f"{prefix}:events"


def token_revocations_channel(prefix: str) -> str:
    """Revoked token ids: every API process drops them from its token cache at once."""
    return f"{prefix}:token-revocations"


def worker_heartbeat_key(prefix: str, owner: str) -> str:
    """A live worker's heartbeat (expires unless renewed): the truth about who is alive."""
    return f"{prefix}:worker:{owner}"


def workers_index(prefix: str) -> str:
    # A set naming every worker that ever beat, so readers need no SCAN over the keyspace;
    # members whose heartbeat key expired are pruned by the readers.
    return f"{prefix}:workers"


def sweeper_turn_key(prefix: str) -> str:
    """Taken (SET NX with a TTL) by the worker that sweeps this interval; the others skip."""
    return f"{prefix}:sweeper-turn"


def output_channel(prefix: str) -> str:
    """Live model output (``runOutput``): text pieces of every run, one channel per deployment
    like run events, so each API process needs no more than its one subscriber."""
    return f"{prefix}:output"


def output_key(prefix: str, run_id: int) -> str:
    """The text a run's model has produced so far in its current turn (``"<stepSeq>:<text>"``),
    for a subscriber that joins mid-turn; gone when the turn ends."""
    return f"{prefix}:output:{run_id}"


def output_watch_key(prefix: str, run_id: int) -> str:
    """Set (with a TTL the subscription renews) while a ``runOutput`` subscription watches
    the run: a worker writes a turn's live output only then (``app.events.output``)."""
    return f"{prefix}:output-watch:{run_id}"


def run_stops_channel(prefix: str) -> str:
    """Stop notices for workers (a cancelled tree, a paused agent or workspace): each worker
    process subscribes once and re-checks the database for the runs a notice concerns."""
    return f"{prefix}:run-stops"


def ws_token_sockets_key(prefix: str, token_id: int) -> str:
    """The websockets one token holds in the deployment: a sorted set of slots, each scored
    by when it lapses unless its API process renews it (app.services.socket_slots)."""
    return f"{prefix}:ws-sockets:{token_id}"
