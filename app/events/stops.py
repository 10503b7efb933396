"""Stop notices: tell the workers at once that runs they execute may have to stop
(docs/concepts/holds.md).

A cancel, a paused agent, a changed policy or a paused workspace commits in the database first; then a notice
naming the tree, the agent or the workspace goes out on one pub/sub channel
(``keys.run_stops_channel``). A worker's ``LiveRuns`` pokes each run it is executing that
the notice concerns, and that run re-reads its state from the database right away instead
of at its next lease renewal (every third of the lease). The database stays the truth: the
notice carries no state, a lost notice only costs the wait for that renewal, and a notice
about a run that is fine costs one renewal.

Notices that arrive while a run is being claimed (not yet registered) are caught by a
generation count: a run whose claim saw any notice pass re-checks once it is registered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from app import keys
from app.services.runtime import Runtime

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class LiveRun:
    run_id: int
    root_id: int
    agent_id: int
    workspace_id: int
    poke: Callable[[], None]
    # The agents on its policy chain: a policy change of any of them reaches it at once.
    chain_agents: frozenset[int] = frozenset()


class LiveRuns:
    """The runs this worker process is executing (a ``ChannelHandler`` of the process's one
    subscriber)."""

    def __init__(self) -> None:
        self._runs: dict[int, LiveRun] = {}
        # Bumped by every notice (and by a lost channel, when notices may have been missed).
        self.generation = 0

    def add(self, run: LiveRun) -> None:
        self._runs[run.run_id] = run

    def discard(self, run_id: int) -> None:
        self._runs.pop(run_id, None)

    def on_message(self, data: bytes) -> None:
        self.generation += 1
        try:
            notice = json.loads(data)
            trees = set(notice.get("trees") or ())
            agents = set(notice.get("agents") or ())
            workspaces = set(notice.get("workspaces") or ())
        except (ValueError, AttributeError, TypeError):
            log.warning("ignoring a malformed stop notice: %r", data[:200])
            return
        for run in list(self._runs.values()):
            if (
                run.root_id in trees
                or run.agent_id in agents
                or run.workspace_id in workspaces
                or not run.chain_agents.isdisjoint(agents)
            ):
                run.poke()

    def on_lost(self) -> None:
        self.generation += 1

    def on_regained(self) -> None:
        # Notices may have been missed meanwhile: every live run re-checks.
        self.generation += 1
        for run in list(self._runs.values()):
            run.poke()


async def publish_stop(
    rt: Runtime, *, trees: Sequence[int] = (), agents: Sequence[int] = (), workspaces: Sequence[int] = ()
) -> None:
    """After commit, best effort: a Redis failure is logged, never raised (the change
    committed; the workers find out at their next lease renewal)."""
    notice = {"trees": list(trees), "agents": list(agents), "workspaces": list(workspaces)}
    channel = keys.run_stops_channel(rt.settings.redis_prefix)
    try:
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            await rt.redis.publish(channel, json.dumps(notice))
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("could not publish a stop notice (workers see it at their next lease renewal): %r", exc)
