"""The ceiling for the worker: a 3-READ-call run's work done by a raw script.

One arq job per run, through an arq ``Worker`` with the worker's tuning, on the same event
loop as the rest of the benchmark. Each job makes the statements ``enverif worker`` makes for
such a run on MariaDB (captured from the engine's SQL, in the same order and transactions),
with asyncmy and no ORM, no SQLAlchemy, no state machine, no planner:

    read      SELECT the run's first-start check and its agent's memory budget; ROLLBACK
    claim     SELECT the run FOR UPDATE with NOW(6); SELECT the agent; INSERT 1 event;
              UPDATE the run; COMMIT; publish 1 event
    3 GETs    on one pooled httpx client (the tools' client library, without the guard)
    finish    SELECT the run FOR UPDATE with NOW(6); INSERT 4 steps; INSERT 8 events;
              UPDATE the run; COMMIT; publish 8 events (one pipeline)

``enverif worker`` divided by this is the share of the ceiling the engine reaches.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncmy
import httpx
from arq import Worker
from arq.connections import create_pool
from arq.worker import func

from app.keys import events_channel
from app.services.runtime import redis_settings
from app.settings import Settings
from bench.support import asyncmy_login

RUN_COLUMNS = (
    "id, workspace_id, agent_id, status, `trigger`, input, result, error, parent_run_id, root_run_id, depth, "
    "delegation_task, parent_step_id, schedule_id, policy_chain, injected_memory_ids, cancel_reason, attempt, "
    "abandoned_claims, wake_count, lease_owner, lease_expires_at, turns, last_event_seq, created_at, "
    "updated_at, queued_at, started_at, finished_at"
)
LOCK_RUN = f"SELECT {RUN_COLUMNS}, NOW(6) FROM agent_runs WHERE id = %s FOR UPDATE"
FIRST_START = (
    "SELECT r.injected_memory_ids, r.agent_id, a.memory_max_items, a.memory_max_chars, "
    "EXISTS (SELECT * FROM memories m WHERE m.agent_id = r.agent_id) "
    "FROM agent_runs r JOIN agents a ON a.id = r.agent_id WHERE r.id = %s"
)
AGENT = (
    "SELECT id, workspace_id, name, description, instructions, status, model, tools, policy, "
    "memory_max_items, memory_max_chars, created_at, updated_at FROM agents WHERE id = %s"
)
EVENT_COLUMNS = "workspace_id, root_run_id, seq, run_id, parent_run_id, type, status, step_id, payload, at"
STEP_COLUMNS = (
    "workspace_id, run_id, seq, turn, tool, arguments, status, decision, decision_reason, result, error, "
    "executed_attempt, created_at, started_at, finished_at"
)
CLAIM_UPDATE = (
    "UPDATE agent_runs SET status=%s, injected_memory_ids=%s, attempt=%s, lease_owner=%s, lease_expires_at=%s, "
    "last_event_seq=%s, updated_at=%s, started_at=%s WHERE id = %s"
)
FINISH_UPDATE = (
    "UPDATE agent_runs SET status=%s, result=%s, lease_owner=%s, lease_expires_at=%s, turns=%s, "
    "last_event_seq=%s, updated_at=%s, finished_at=%s WHERE id = %s"
)


def _values(columns: str, rows: int) -> str:
    one = "(" + ", ".join(["%s"] * len(columns.split(","))) + ")"
    return ", ".join([one] * rows)


class RawRuns:
    """What the ceiling's jobs share: an asyncmy pool, an httpx client, a Redis client."""

    def __init__(self, settings: Settings, page_url: str) -> None:
        self.settings = settings
        self.page_url = page_url
        self.channel = events_channel(settings.redis_prefix)

    async def open(self) -> None:
        self.pool = await asyncmy.create_pool(
            **asyncmy_login(self.settings.effective_database_url), maxsize=self.settings.worker_max_jobs + 4,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )  # fmt: skip
        self.http = httpx.AsyncClient(timeout=10, trust_env=False)
        self.redis = await create_pool(redis_settings(self.settings))

    async def close(self) -> None:
        await self.http.aclose()
        self.pool.close()
        await self.pool.wait_closed()
        await self.redis.aclose()

    async def publish(self, events: list[dict[str, Any]]) -> None:
        # One message per transaction, as the server sends them (docs/architecture.md).
        encoded = [json.dumps({**e, "at": e["at"].isoformat()}, separators=(",", ":")) for e in events]
        await self.redis.publish(
            self.channel, encoded[0] if len(encoded) == 1 else "[" + ",".join(encoded) + "]"
        )

    async def run(self, run_id: int) -> None:
        async with self.pool.acquire() as conn:
            async with conn.cursor() as cur:
                await cur.execute(FIRST_START, (run_id,))
                await cur.fetchone()
            await conn.rollback()
            claimed = await self._claim(conn, run_id)
        if claimed is None:
            return
        attempt, workspace_id, seq = claimed
        reads = []
        for _ in range(3):
            started = datetime.now(UTC)
            response = await self.http.get(self.page_url)
            reads.append(
                ({"status": response.status_code, "body": response.text, "truncated": False}, started)
            )
        async with self.pool.acquire() as conn:
            await self._finish(conn, run_id, workspace_id, attempt, seq, reads)

    async def _claim(self, conn: Any, run_id: int) -> tuple[int, int, int] | None:
        async with conn.cursor() as cur:
            await cur.execute(LOCK_RUN, (run_id,))
            row = await cur.fetchone()
            if row[3] != "QUEUED":
                await conn.rollback()
                return None
            now = row[-1]
            workspace_id, agent_id, attempt, seq = row[1], row[2], row[17] + 1, row[23] + 1
            await cur.execute(AGENT, (agent_id,))
            await cur.fetchone()
            event = self._event(workspace_id, run_id, seq, "RUN_STATUS_CHANGED", "RUNNING", None,
                                {"from": "QUEUED", "to": "RUNNING", "reason": "claimed by ceiling"}, now)  # fmt: skip
            await cur.execute(f"INSERT INTO run_events ({EVENT_COLUMNS}) VALUES {_values(EVENT_COLUMNS, 1)}",
                              _flat([event]))  # fmt: skip
            await cur.execute(CLAIM_UPDATE, ("RUNNING", "[]", attempt, "ceiling", now + timedelta(seconds=30),
                                             seq, now, now, run_id))  # fmt: skip
        await conn.commit()
        await self.publish([event])
        return attempt, workspace_id, seq

    async def _finish(self, conn: Any, run_id: int, workspace_id: int, attempt: int, seq: int,
                      reads: list[tuple[dict[str, Any], datetime]]) -> None:  # fmt: skip
        async with conn.cursor() as cur:
            await cur.execute(LOCK_RUN, (run_id,))
            now = (await cur.fetchone())[-1]
            steps = [
                (workspace_id, run_id, i + 1, i, "http.get", json.dumps({"url": self.page_url}), "SUCCEEDED",
                 "ALLOW", None, json.dumps(result), None, attempt, now, started, now)
                for i, (result, started) in enumerate(reads)
            ] + [(workspace_id, run_id, 4, 3, None, None, "SUCCEEDED", None, None, '"done"', None, None,
                  now, now, now)]  # fmt: skip
            await cur.execute(
                f"INSERT INTO run_steps ({STEP_COLUMNS}) VALUES {_values(STEP_COLUMNS, 4)} RETURNING id",
                [v for step in steps for v in step],
            )
            step_ids = [r[0] for r in await cur.fetchall()]
            events = []
            for step_id, step in zip(step_ids, steps, strict=True):
                if step[4] is not None:
                    seq += 1
                    events.append(self._event(workspace_id, run_id, seq, "STEP_STARTED", "SUCCEEDED", step_id,
                                              {"seq": step[2], "tool": step[4], "decision": "ALLOW"}, now))  # fmt: skip
                seq += 1
                events.append(self._event(workspace_id, run_id, seq, "STEP_FINISHED", "SUCCEEDED", step_id,
                                          {"seq": step[2], "tool": step[4], "status": "SUCCEEDED"}, now))  # fmt: skip
            seq += 1
            events.append(self._event(workspace_id, run_id, seq, "RUN_STATUS_CHANGED", "SUCCEEDED", None,
                                      {"from": "RUNNING", "to": "SUCCEEDED"}, now))  # fmt: skip
            await cur.execute(
                f"INSERT INTO run_events ({EVENT_COLUMNS}) VALUES {_values(EVENT_COLUMNS, len(events))}",
                _flat(events),
            )
            await cur.execute(FINISH_UPDATE, ("SUCCEEDED", '"done"', None, None, 4, seq, now, now, run_id))
        await conn.commit()
        await self.publish(events)

    @staticmethod
    def _event(workspace_id: int, run_id: int, seq: int, type: str, status: str | None,
               step_id: int | None, payload: dict[str, Any], now: datetime) -> dict[str, Any]:  # fmt: skip
        return {"workspace_id": workspace_id, "root_run_id": run_id, "seq": seq, "run_id": run_id,
                "parent_run_id": None, "type": type, "status": status, "step_id": step_id, "payload": payload,
                "at": now}  # fmt: skip


_EVENT_KEYS = [name.strip() for name in EVENT_COLUMNS.split(",")]


def _flat(events: list[dict[str, Any]]) -> list[Any]:
    return [json.dumps(e[k]) if k == "payload" else e[k] for e in events for k in _EVENT_KEYS]


async def ceiling(settings: Settings, page_url: str, run_ids: list[int], watch: Any) -> tuple[float, float]:
    """Run ``run_ids`` (QUEUED, with no job) through the raw script as arq jobs.
    ``watch(ids)`` awaits their SUCCEEDED events. Returns (runs/s, CPU ms per run)."""
    raw = RawRuns(settings, page_url)
    await raw.open()
    queue = f"{settings.redis_prefix}:ceiling"

    async def raw_run(ctx: dict[str, Any], run_id: int) -> None:
        await raw.run(run_id)

    pool = await create_pool(redis_settings(settings), default_queue_name=queue)
    for run_id in run_ids:
        await pool.enqueue_job("raw_run", run_id, _queue_name=queue)
    worker = Worker(
        functions=[func(raw_run, name="raw_run")], queue_name=queue, redis_settings=redis_settings(settings), burst=True,
        poll_delay=settings.worker_poll_delay_s, max_jobs=settings.worker_max_jobs, keep_result=0,
        handle_signals=False,
    )  # fmt: skip
    watcher = asyncio.create_task(watch(set(run_ids)))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    cpu = time.process_time()
    try:
        await worker.main()
        done: dict[int, float] = await watcher
        used = time.process_time() - cpu
    finally:
        await worker.close()
        await pool.aclose()
        await raw.close()
    if len(done) < len(run_ids):
        raise RuntimeError(f"ceiling: only {len(done)} of {len(run_ids)} runs succeeded")
    return len(done) / (max(done.values()) - started), used * 1000 / len(done)
