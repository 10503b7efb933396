"""Run throughput and latency, against a baseline measured in the same process.

    .venv/bin/python bench/throughput.py [--runs 500] [--latency-runs 50] [--only procs,e2e]
                                         [--server URL] [--profile FILE] [--db sqlite]

1. Baselines (always run): raw arq no-op jobs/s through one worker with the same tuning as
   ours; the write floor (``bench/floor.py``: 3 GETs and 3 INSERT+COMMIT per run with the
   database's plain driver, 16 in flight; on MariaDB with mariadbd's CPU per run); and on
   MariaDB the ceiling (``bench/ceiling.py``): the READ scenario's runs done by a raw
   asyncmy script as arq jobs (the worker's exact statements, the GETs, the publishes).
2. ``inproc``: N runs of a 3-call scripted agent (three ``http.get`` calls to a local server
   in another process, then a final answer) through one worker; runs/s and the ratio to (1).
   The same with three ``webhook.post`` calls (each step row written before its call).
3. ``procs``: the READ and the write scenario through 1 and then 2 ``enverif worker``
   processes (stopped with SIGSTOP while the queue fills, resumed together); runs/s, the
   READ figure's share of the ceiling, the write figure's share of the floor. Over the timed
   window, where the machine's CPU went (``bench/cpu.py``): cores busy on average, and CPU ms
   per run of the worker processes, the page server, mariadbd (printed beside the floor's for
   the write scenario), redis-server, this process (it subscribes to every event) and the
   rest. The 2-process scaling is printed beside its bound: the runs/s the machine would reach
   with every core busy at the 1-process CPU per run, over the 1-process runs/s. A bound near
   1 means one worker process already keeps the machine busy, and a second has no core to use.
4. ``e2e``: ``startRun`` over HTTP against ``enverif serve`` (a pooled client, 8 requests in
   flight) with one worker process, until every run SUCCEEDED; runs/s, the ratio to the
   ceiling (the READ agent, MariaDB) or to the floor (the write agent, SQLite), and where the
   CPU went as in (3), the API process too.
5. ``latency``: p50/p95 from ``startRun`` to ``SUCCEEDED`` of a 1-call run, with a worker
   waiting; completion is seen on the live event channel, as a subscriber would see it.

6. ``inflight``: the write agent (three ``webhook.post`` calls) with 16 runs in flight (the
   worker's ``worker_max_jobs``): each of 16 starters starts a run and waits for it to
   succeed before starting the next, through the in-process worker; runs/s, p50/p95 from
   ``startRun`` to ``SUCCEEDED``, this process's CPU per run (worker, starters and
   subscriber), and the ratio to the floor.

``--only`` runs some of (2)-(6) (comma list; a profiler run can be limited to what it needs);
the JSON report then holds the baselines and what ran, and ends with the targets of what ran,
each beside the figure measured and whether it was met. The benchmark runs on uvloop, as
``enverif worker`` does. MariaDB by default (a fresh schema is created and dropped); with
``--db sqlite``, a fresh database file in a temporary directory (WAL, as Enverif opens it),
``inproc``, ``inflight`` and ``e2e`` by default, with the floor in place of the ceiling.
Redis at 127.0.0.1:6379. The machine's figures count everything running on it: run it on a
quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arq import Worker
from arq.connections import create_pool
from sqlalchemy import select

from app.db.orm import Agent
from app.domain.actors import SYSTEM
from app.domain.agents import Role
from app.domain.runs import RunTrigger
from app.events.publish import raw_events
from app.keys import events_channel
from app.services import auth, runs
from app.services.agents import version_row
from app.services.runtime import open_runtime, redis_settings
from app.settings import Settings
from bench.ceiling import ceiling
from bench.cpu import CpuMeter, CpuShare, machine_busy_s, pids_named
from bench.floor import mariadb_floor, sqlite_floor
from bench.support import create_database
from workers.main import build_worker, stop_worker

ENVERIF = str(Path(sys.executable).parent / "enverif")

PAGE_SERVER = """
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
async def page(request):
    return PlainTextResponse("ok")
async def hook(request):
    await request.body()
    return PlainTextResponse("received")
routes = [Route("/page", page), Route("/hook", hook, methods=["POST"])]
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port={port}, log_level="error")
"""


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def baseline_arq(settings: Settings, n: int) -> float:
    queue = f"{settings.redis_prefix}:noop"
    pool = await create_pool(redis_settings(settings), default_queue_name=queue)
    for _ in range(n):
        await pool.enqueue_job("noop", _queue_name=queue)
    worker = Worker(
        functions=[noop],
        queue_name=queue,
        redis_settings=redis_settings(settings),
        burst=True,
        poll_delay=settings.worker_poll_delay_s,
        max_jobs=settings.worker_max_jobs,
        keep_result=0,
        handle_signals=False,
    )
    started = time.perf_counter()
    await worker.main()
    elapsed = time.perf_counter() - started
    await worker.close()
    await pool.aclose()
    return n / elapsed


# Every agent's budget (``--budget``; docs/concepts/budgets.md), to measure what enforcing one costs.
BUDGET: dict[str, Any] = {}


async def make_agent(
    rt: Any, workspace_id: int, name: str, steps: list[dict[str, Any]], policy: dict[str, Any] | None = None
) -> int:
    from app.clock import utcnow

    async with rt.sessionmaker() as session, session.begin():
        agent = Agent(
            workspace_id=workspace_id,
            name=name,
            description=None,
            instructions="benchmark",
            status="ACTIVE",
            model={"provider": "scripted", "steps": steps},
            tools=["http.get", "webhook.post"],
            policy=policy or {},
            budget=BUDGET or None,
            memory_max_items=5,
            memory_max_chars=1000,
            created_at=utcnow(),
            updated_at=utcnow(),
        )
        session.add(agent)
        await session.flush()
        session.add(version_row(agent, SYSTEM, agent.created_at))
        return agent.id


async def queued_runs(rt: Any, agent_id: int, n: int) -> list[int]:
    """``n`` QUEUED runs of the agent with no job enqueued (for the ceiling's own jobs)."""
    from app.services.transitions import NewRun, NewTree

    ids = []
    async with rt.sessionmaker() as session, session.begin():
        agent = await session.get_one(Agent, agent_id)
        for _ in range(n):
            tree = NewTree(session)  # the path every run takes, minus its job after commit
            run = await tree.create_run(NewRun(agent=agent, trigger=RunTrigger.API))
            await tree.finish()
            ids.append(run.id)
    return ids


def _finished(event: dict[str, Any]) -> bool:
    return event.get("type") == "RUN_STATUS_CHANGED" and event.get("status") == "SUCCEEDED"


async def wait_statuses(rt: Any, run_ids: set[int], timeout_s: float) -> dict[int, float]:
    """Wall-clock time each run reached SUCCEEDED, seen on the live event channel."""
    done: dict[int, float] = {}
    pubsub = rt.redis.pubsub()
    await pubsub.subscribe(events_channel(rt.settings.redis_prefix))
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < len(run_ids) and time.monotonic() < deadline:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if not msg:
                # A second of quiet: a publish may have been lost (they are best effort and
                # time out on a starved machine); the database has the truth.
                await _succeeded_in_db(rt, run_ids - done.keys(), done)
                continue
            for event in raw_events(msg["data"]):
                if event.get("run_id") in run_ids and _finished(event):
                    done[event["run_id"]] = time.perf_counter()
    finally:
        await pubsub.aclose()
    return done


async def _succeeded_in_db(rt: Any, pending: set[int], done: dict[int, float]) -> None:
    if not pending:
        return
    from app.db.orm import Run

    async with rt.read_sessionmaker() as session:
        found = await session.scalars(select(Run.id).where(Run.id.in_(pending), Run.status == "SUCCEEDED"))
        now = time.perf_counter()
        for run_id in found:
            done[run_id] = now


async def throughput(
    rt: Any, principal: Any, agent_id: int, n: int, worker: Any, profile: str | None = None
) -> tuple[float, float]:
    """Queue ``n`` runs with the worker paused, then let it drain them (like the baseline).
    Returns (runs/s, worker-process CPU ms per run)."""
    worker.allow_pick_jobs = False
    ids = {(await runs.start_run(rt, principal, agent_id=agent_id, input=None)).id for _ in range(n)}
    watcher = asyncio.create_task(wait_statuses(rt, ids, timeout_s=600))
    await asyncio.sleep(0.2)
    profiler = None
    if profile:
        import cProfile

        # CPU time, not wall time: on a busy machine a wall-clock profile charges the time
        # other processes ran to whichever function made a system call.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    started = time.perf_counter()
    cpu_started = time.process_time()
    worker.allow_pick_jobs = True
    done = await watcher
    cpu_ms = (time.process_time() - cpu_started) * 1000 / max(len(done), 1)
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    if len(done) < n:
        raise RuntimeError(f"only {len(done)} of {n} runs succeeded")
    return len(done) / (max(done.values()) - started), cpu_ms


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "ENVERIF_DATABASE_URL": settings.effective_database_url,
        "ENVERIF_REDIS_URL": settings.effective_redis_url,
        "ENVERIF_REDIS_PREFIX": settings.redis_prefix,
        "ENVERIF_HTTP_ALLOW_PRIVATE_NETWORKS": "true",
        "ENVERIF_SWEEP_INTERVAL_S": "30",
        "ENVERIF_LOG_LEVEL": "warning",
    }


def _spawn(settings: Settings, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([ENVERIF, *args], env=_env(settings))


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


async def process_throughput(
    rt: Any, principal: Any, agent_id: int, n: int, processes: int, groups: dict[str, list[int] | None]
) -> tuple[float, CpuShare]:
    """``n`` runs through ``processes`` worker processes, frozen while the queue fills.
    Returns runs/s and where the machine's CPU went (the worker processes and ``groups``)."""
    procs = [_spawn(rt.settings, "worker") for _ in range(processes)]
    try:
        await asyncio.sleep(4.0)  # start-up: imports, connections, the first sweep
        for p in procs:
            p.send_signal(signal.SIGSTOP)
        ids = {(await runs.start_run(rt, principal, agent_id=agent_id, input=None)).id for _ in range(n)}
        watcher = asyncio.create_task(wait_statuses(rt, ids, timeout_s=600))
        await asyncio.sleep(0.2)
        meter = CpuMeter({"workers": [p.pid for p in procs], **groups})
        meter.start()
        started = time.perf_counter()
        for p in procs:
            p.send_signal(signal.SIGCONT)
        done = await watcher
        share = meter.stop(len(done))
    finally:
        _stop(procs)
    if len(done) < n:
        raise RuntimeError(f"only {len(done)} of {n} runs succeeded")
    return len(done) / (max(done.values()) - started), share


async def end_to_end(
    rt: Any, agent_id: int, token: str, n: int, port: int, groups: dict[str, list[int] | None]
) -> tuple[float, CpuShare]:
    """startRun over HTTP (8 in flight on a pooled client) until every run SUCCEEDED.
    Returns runs/s and where the machine's CPU went (the API, the worker and ``groups``)."""
    import httpx

    from app.graphql.ids import from_global_id, to_global_id

    settings = rt.settings
    api = _spawn(settings, "serve", "--port", str(port))
    worker = _spawn(settings, "worker")
    mutation = "mutation($a: ID!) { startRun(agentId: $a) { id } }"
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                     headers={"Authorization": f"Bearer {token}"}) as client:  # fmt: skip
            # Start-up (imports) can take many seconds on a busy machine.
            for _ in range(1200):
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("enverif serve did not answer /healthz within 120 s")
            await asyncio.sleep(3.0)  # the worker's start-up
            ids: set[int] = set()
            pending = asyncio.Queue[int]()
            for i in range(n):
                pending.put_nowait(i)
            # Runs are known once started; the watcher picks up ids as they are added.
            done: dict[int, float] = {}
            pubsub = rt.redis.pubsub()
            await pubsub.subscribe(events_channel(settings.redis_prefix))

            async def starter() -> None:
                while not pending.empty():
                    pending.get_nowait()
                    body = (await client.post("/graphql", json={"query": mutation,
                                                                "variables": {"a": to_global_id("Agent", agent_id)}})).json()  # fmt: skip
                    ids.add(from_global_id(body["data"]["startRun"]["id"], "Run"))

            meter = CpuMeter({"api": [api.pid], "workers": [worker.pid], **groups})
            meter.start()
            started = time.perf_counter()
            starters = [asyncio.create_task(starter()) for _ in range(8)]
            deadline = time.monotonic() + 600
            while (len(done) < n) and time.monotonic() < deadline:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg:
                    for event in raw_events(msg["data"]):
                        if _finished(event):
                            done[event["run_id"]] = time.perf_counter()
                else:
                    await _succeeded_in_db(rt, ids - done.keys(), done)
            await asyncio.gather(*starters)
            share = meter.stop(n)
            await pubsub.aclose()
    finally:
        _stop([worker, api])
    finished = [t for run_id, t in done.items() if run_id in ids]
    if len(finished) < n:
        raise RuntimeError(f"only {len(finished)} of {n} runs succeeded")
    return n / (max(finished) - started), share


SCENARIOS = ("inproc", "procs", "e2e", "latency", "inflight")
SQLITE_SCENARIOS = ["inproc", "inflight", "e2e"]

# The targets, each printed at the end beside what this run measured. Issue 28's are ratios
# to a baseline measured in the same run (the ceiling, the write floor).
TARGETS = {
    "inproc": {"runs_per_s_3_read_calls": ">= 60 (aim 100)"},
    "procs": {
        "ratio_to_ceiling_3_read_calls_1_worker_process": ">= 0.5",
        "runs_per_s_3_webhook_calls_1_worker_process": ">= 80",
        "scaling_2_vs_1_worker_processes": ">= 1.6",
        "ratio_to_floor_3_webhook_calls_1_worker_process": ">= 0.45",
        "mariadbd_cpu_ms_per_run_3_webhook_calls_1_worker_process": "<= 1",
    },
    "e2e": {"ratio_to_arq_noop_end_to_end": ">= 0.10", "ratio_to_ceiling_end_to_end_3_read_calls": ">= 0.45"},
    "latency": {"p50_start_to_succeeded_ms_1_call": "<= 35"},
    "inflight": {},
}
SQLITE_TARGETS = {
    "inflight": {
        "ratio_to_floor_3_webhook_calls_16_in_flight": ">= 0.40",
        "p95_start_to_succeeded_ms_3_webhook_calls_16_in_flight": "<= 100",
    },
    "e2e": {"ratio_to_floor_end_to_end_3_webhook_calls": ">= 0.25"},
}


def targets_beside(report: dict[str, Any], targets: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each target with the figure this run measured for it, and whether it was met."""
    out: dict[str, dict[str, Any]] = {}
    for key, target in targets.items():
        measured = report.get(key)
        op, bound = target.split()[:2]
        if measured is None:
            met = None
        else:
            met = measured >= float(bound) if op == ">=" else measured <= float(bound)
        out[key] = {"target": target, "measured": measured, "met": met}
    return out


def _scenarios(value: str) -> list[str]:
    chosen = {name.strip() for name in value.split(",")}
    if not chosen <= set(SCENARIOS):
        raise argparse.ArgumentTypeError(f"choose among {','.join(SCENARIOS)}, not {value!r}")
    return [name for name in SCENARIOS if name in chosen]


@dataclass(frozen=True)
class Agents:
    reads: int  # three http.get calls, then a final answer
    writes: int  # three webhook.post calls (ALLOW), then a final answer
    one: int  # one http.get call (latency)


async def in_process(
    rt: Any, principal: Any, agents: Agents, n: int, worker: Any, profile: str | None,
    noop_rate: float, ceiling_rate: float,
) -> dict[str, Any]:  # fmt: skip
    read_rate, read_cpu = await throughput(rt, principal, agents.reads, n, worker, profile=profile)
    print(
        f"3 READ calls (http.get): {read_rate:.1f} runs/s, {read_cpu:.1f} ms worker CPU per run",
        flush=True,
    )
    write_rate, write_cpu = await throughput(
        rt, principal, agents.writes, n, worker, profile=profile and f"{profile}.write"
    )
    print(
        f"3 side-effecting calls (webhook.post): {write_rate:.1f} runs/s, {write_cpu:.1f} ms CPU/run",
        flush=True,
    )
    return {
        "runs_per_s_3_read_calls": round(read_rate, 1),
        "ratio_to_arq_noop_3_read_calls": round(read_rate / noop_rate, 4),
        "worker_cpu_ms_per_run_3_read_calls": round(read_cpu, 1),
        "runs_per_s_3_webhook_calls": round(write_rate, 1),
        "ratio_to_arq_noop_3_webhook_calls": round(write_rate / noop_rate, 4),
        "worker_cpu_ms_per_run_3_webhook_calls": round(write_cpu, 1),
        "ratio_to_ceiling_3_read_calls_in_process": round(read_rate / ceiling_rate, 3),
    }


@dataclass(frozen=True)
class Scaling:
    """One agent's runs through 1 and then 2 worker processes."""

    one_rate: float  # runs/s
    one_cpu: CpuShare
    two_rate: float
    two_cpu: CpuShare

    @property
    def measured(self) -> float:
        return self.two_rate / self.one_rate

    @property
    def bound(self) -> float:
        """The most 2 processes could give if the CPU per run stayed as with 1: the machine's
        spare cores at 1 process, not the worker, are then the limit."""
        return self.one_cpu.bound_runs_per_s / self.one_rate

    def report(self, calls: str, *, worker_cpu_keys: tuple[str, str], scaling_key: str) -> dict[str, Any]:
        """The JSON report's entries; ``worker_cpu_keys`` and ``scaling_key`` keep the names
        earlier reports gave them."""
        return {
            f"runs_per_s_{calls}_1_worker_process": round(self.one_rate, 1),
            worker_cpu_keys[0]: self.one_cpu.rounded_ms_per_run("workers"),
            f"runs_per_s_{calls}_2_worker_processes": round(self.two_rate, 1),
            worker_cpu_keys[1]: self.two_cpu.rounded_ms_per_run("workers"),
            scaling_key: round(self.measured, 2),
            scaling_key.replace("scaling", "scaling_bound", 1): round(self.bound, 2),
            **self.one_cpu.report(f"{calls}_1_worker_process"),
            **self.two_cpu.report(f"{calls}_2_worker_processes"),
        }


async def one_then_two_processes(
    rt: Any, principal: Any, agent_id: int, n: int, groups: dict[str, list[int] | None], label: str
) -> Scaling:
    """The agent's runs through 1 and then 2 worker processes; prints a line for each, the
    second with its scaling beside the bound from the 1-process CPU per run."""
    one_rate, one_cpu = await process_throughput(rt, principal, agent_id, n, 1, groups)
    print(f"{label}, 1 worker process: {one_rate:.1f} runs/s; {one_cpu.line()}", flush=True)
    two_rate, two_cpu = await process_throughput(rt, principal, agent_id, n, 2, groups)
    scaling = Scaling(one_rate, one_cpu, two_rate, two_cpu)
    print(
        f"{label}, 2 worker processes: {two_rate:.1f} runs/s, x{scaling.measured:.2f} of 1 process "
        f"(bound by the 1-process CPU per run: x{scaling.bound:.2f}); {two_cpu.line()}",
        flush=True,
    )
    return scaling


@dataclass(frozen=True)
class Floor:
    """The raw write floor measured in this run (``bench/floor.py``)."""

    runs_per_s: float
    cpu_ms_per_run: float
    mariadbd_ms_per_run: float | None = None  # MariaDB only


async def worker_processes(
    rt: Any, principal: Any, agents: Agents, n: int, groups: dict[str, list[int] | None], ceiling_rate: float,
    floor: Floor | None,
) -> dict[str, Any]:  # fmt: skip
    reads = await one_then_two_processes(rt, principal, agents.reads, n, groups, "3 READ calls")
    writes = await one_then_two_processes(rt, principal, agents.writes, n, groups, "3 webhook.post calls")
    against_floor: dict[str, Any] = {}
    if floor is not None:
        ratio = writes.one_rate / floor.runs_per_s
        # Two decimals, as the floor's: the target (1 ms) is within a tenth of the floor's figure.
        mariadbd = writes.one_cpu.rounded_ms_per_run("mariadbd", digits=2)
        print(
            f"3 webhook.post calls, 1 worker process: x{ratio:.2f} of the write floor; mariadbd "
            f"{_ms(mariadbd)} ms per run (the floor's: {_ms(floor.mariadbd_ms_per_run)} ms)",
            flush=True,
        )
        against_floor = {
            "ratio_to_floor_3_webhook_calls_1_worker_process": round(ratio, 3),
            "mariadbd_cpu_ms_per_run_3_webhook_calls_1_worker_process": mariadbd,
        }
    return {
        **reads.report(
            "3_read_calls",
            worker_cpu_keys=(
                "worker_cpu_ms_per_run_1_worker_process",
                "worker_cpu_ms_per_run_2_worker_processes",
            ),
            scaling_key="scaling_2_vs_1_worker_processes",
        ),
        "ratio_to_ceiling_3_read_calls_1_worker_process": round(reads.one_rate / ceiling_rate, 3),
        **writes.report(
            "3_webhook_calls",
            worker_cpu_keys=(
                "worker_cpu_ms_per_run_3_webhook_calls_1_worker_process",
                "worker_cpu_ms_per_run_3_webhook_calls_2_worker_processes",
            ),
            scaling_key="scaling_2_vs_1_worker_processes_webhook",
        ),
        **against_floor,
    }


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


async def through_the_api(
    rt: Any, agents: Agents, token: str, n: int, port: int, groups: dict[str, list[int] | None],
    noop_rate: float, ceiling_rate: float, floor: Floor, *, writes: bool,
) -> dict[str, Any]:  # fmt: skip
    """startRun over HTTP, through ``enverif serve`` and one ``enverif worker``: the 3-READ
    agent beside the ceiling (MariaDB), or the 3-``webhook.post`` agent beside the write
    floor (``writes``: SQLite, where the issue's end-to-end figure is a writing run's)."""
    calls = "3_webhook_calls" if writes else "3_read_calls"
    rate, cpu = await end_to_end(rt, agents.writes if writes else agents.reads, token, n, port, groups)
    baseline, name = (floor.runs_per_s, "floor") if writes else (ceiling_rate, "ceiling")
    label = "3 webhook.post calls" if writes else "3 READ calls"
    print(
        f"end to end (startRun over HTTP, 1 worker process), {label}: {rate:.1f} runs/s, "
        f"x{rate / baseline:.2f} of the {name}; {cpu.line()}",
        flush=True,
    )
    return {
        f"runs_per_s_end_to_end_api_{calls}": round(rate, 1),
        f"ratio_to_{name}_end_to_end_{calls}": round(rate / baseline, 3),
        "ratio_to_arq_noop_end_to_end": round(rate / noop_rate, 4),
        **cpu.report("end_to_end"),
    }


async def latency(rt: Any, principal: Any, agent_id: int, n: int) -> dict[str, Any]:
    """One run at a time with the worker idle and waiting."""
    latencies = []
    for _ in range(n):
        pubsub = rt.redis.pubsub()
        await pubsub.subscribe(events_channel(rt.settings.redis_prefix))
        t0 = time.perf_counter()
        run = await runs.start_run(rt, principal, agent_id=agent_id, input=None)
        deadline = t0 + 10
        while time.perf_counter() < deadline:
            # None also comes back for the (ignored) subscribe confirmation: keep reading.
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg and any(_finished(e) and e["run_id"] == run.id for e in raw_events(msg["data"])):
                latencies.append((time.perf_counter() - t0) * 1000)
                break
        else:
            raise RuntimeError(f"run {run.id} did not succeed within 10 s")
        await pubsub.aclose()
    p50, p95 = statistics.median(latencies), statistics.quantiles(latencies, n=20)[-1]
    print(f"startRun -> SUCCEEDED, 1-call run: p50 {p50:.1f} ms, p95 {p95:.1f} ms", flush=True)
    return {
        "p50_start_to_succeeded_ms_1_call": round(p50, 1),
        "p95_start_to_succeeded_ms_1_call": round(p95, 1),
    }


def document(kb: int) -> Any:
    """A run input of about ``kb`` KB of JSON, as an agent is given a document to work on: a
    list of records (None for 0)."""
    if kb <= 0:
        return None
    record = {"id": 0, "title": "a record of the document", "text": "lorem ipsum dolor sit amet " * 3,
              "tags": ["bench", "input"], "meta": {"source": "bench", "rank": 0.5}}  # fmt: skip
    each = len(json.dumps(record))
    return {"records": [record | {"id": i} for i in range(kb * 1000 // each)]}


async def in_flight(
    rt: Any, principal: Any, agent_id: int, n: int, width: int, profile: str | None = None, input: Any = None
) -> dict[str, Any]:
    """``n`` runs of the agent, ``width`` in flight: each starter starts a run (with ``input``),
    waits for its SUCCEEDED event, then starts the next. Returns runs/s, latency percentiles
    (ms) and this process's CPU ms per run; ``profile``: a CPU-time cProfile of the timed
    window."""
    finished: dict[int, asyncio.Future[float]] = {}
    loop = asyncio.get_running_loop()

    def future(run_id: int) -> asyncio.Future[float]:
        return finished.setdefault(run_id, loop.create_future())

    pubsub = rt.redis.pubsub()
    await pubsub.subscribe(events_channel(rt.settings.redis_prefix))

    async def listen() -> None:
        while True:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if msg:
                for event in raw_events(msg["data"]):
                    # A run can succeed before its startRun returns: the future is made here then.
                    if _finished(event) and not future(event["run_id"]).done():
                        future(event["run_id"]).set_result(time.perf_counter())
            else:  # a second of quiet: a publish may have been lost; the database has the truth
                pending = {i for i, f in finished.items() if not f.done()}
                done: dict[int, float] = {}
                await _succeeded_in_db(rt, pending, done)
                for run_id, at in done.items():
                    finished[run_id].set_result(at)

    latencies: list[float] = []
    left = list(range(n))

    async def starter() -> None:
        while left:
            left.pop()
            t0 = time.perf_counter()
            run = await runs.start_run(rt, principal, agent_id=agent_id, input=input)
            latencies.append((await asyncio.wait_for(future(run.id), 120) - t0) * 1000)

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0.2)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    started, cpu = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(starter() for _ in range(width)))
        elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    finally:
        if profiler is not None and profile:
            profiler.disable()
            profiler.dump_stats(profile)
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await pubsub.aclose()
    cuts = statistics.quantiles(latencies, n=20)
    return {"runs_per_s": n / elapsed, "p50_ms": statistics.median(latencies), "p95_ms": cuts[-1],
            "cpu_ms_per_run": used * 1000 / n}  # fmt: skip


async def runs_in_flight(
    rt: Any,
    principal: Any,
    agents: Agents,
    n: int,
    width: int,
    floor_rate: float | None,
    profile: str | None = None,
    input_kb: int = 0,
) -> dict[str, Any]:
    got = await in_flight(rt, principal, agents.writes, n, width, profile, document(input_kb))
    ratio = f", x{got['runs_per_s'] / floor_rate:.2f} of the floor" if floor_rate else ""
    with_input = f", a {input_kb} KB input" if input_kb else ""
    print(
        f"3 webhook.post calls{with_input}, {width} in flight: {got['runs_per_s']:.1f} runs/s{ratio}; "
        f"p50 {got['p50_ms']:.1f} ms, p95 {got['p95_ms']:.1f} ms; {got['cpu_ms_per_run']:.1f} ms CPU/run "
        "(this process: worker, starters, subscriber)",
        flush=True,
    )
    key = f"3_webhook_calls_{width}_in_flight" + (f"_{input_kb}_kb_input" if input_kb else "")
    report = {
        f"runs_per_s_{key}": round(got["runs_per_s"], 1),
        f"p50_start_to_succeeded_ms_{key}": round(got["p50_ms"], 1),
        f"p95_start_to_succeeded_ms_{key}": round(got["p95_ms"], 1),
        f"process_cpu_ms_per_run_{key}": round(got["cpu_ms_per_run"], 1),
    }
    if floor_rate:
        report[f"ratio_to_floor_{key}"] = round(got["runs_per_s"] / floor_rate, 3)
    return report


@contextlib.asynccontextmanager
async def sqlite_database() -> Any:
    """A fresh database file in a temporary directory, migrated to head: its URL and path."""
    from app.db import migrate
    from app.db.session import create_engine

    with tempfile.TemporaryDirectory(prefix="enverif-bench-") as tmp:
        path = f"{tmp}/bench.db"
        url = f"sqlite+aiosqlite:///{path}"
        engine = create_engine(url)
        try:
            await migrate.upgrade(engine)
        finally:
            await engine.dispose()
        yield url, path


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--latency-runs", type=int, default=50)
    parser.add_argument("--noop-jobs", type=int, default=2000)
    parser.add_argument("--db", choices=["mariadb", "sqlite"], default="mariadb",
                        help="sqlite: a fresh database file (WAL) instead of a MariaDB schema")  # fmt: skip
    parser.add_argument("--in-flight", type=int, default=16, help="runs in flight in the inflight scenario")
    parser.add_argument("--input-kb", type=int, default=0,
                        help="the inflight scenario's runs start with a JSON document of about this many KB "
                        "(its figures are then reported under keys ending _KB_kb_input, beside no target)")  # fmt: skip
    parser.add_argument("--server", default="mysql+asyncmy://root@127.0.0.1:3306/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--port", type=int, default=0, help="page server port (default: a free one)")
    parser.add_argument("--api-port", type=int, default=0, help="API port (default: a free one)")
    parser.add_argument(
        "--only", type=_scenarios, default=None, metavar="SCENARIOS",
        help=f"comma list among {','.join(SCENARIOS)} (default: all; with --db sqlite, "
        f"{','.join(SQLITE_SCENARIOS)}); the baselines always run",
    )  # fmt: skip
    parser.add_argument(
        "--profile",
        help="write a cProfile of the in-process READ scenario to this file (and the write one to FILE.write)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database for a post-mortem")
    parser.add_argument("--budget", type=json.loads, default={},
                        help='every agent\'s budget, JSON (docs/concepts/budgets.md): {"maxTokens": 1000000}')  # fmt: skip
    args = parser.parse_args()
    if args.input_kb and len(json.dumps(document(args.input_kb))) > runs.MAX_INPUT_BYTES:
        parser.error(
            f"--input-kb {args.input_kb}: startRun refuses an input over {runs.MAX_INPUT_BYTES} bytes"
        )
    BUDGET.update(args.budget)
    args.port = args.port or _free_port()
    args.api_port = args.api_port or _free_port()

    if args.only is None:
        args.only = SQLITE_SCENARIOS if args.db == "sqlite" else list(SCENARIOS)
    async with contextlib.AsyncExitStack() as stack:
        if args.db == "sqlite":
            url, path = await stack.enter_async_context(sqlite_database())
        else:
            url, drop_database = await create_database(args.server, keep=args.keep)
            stack.push_async_callback(drop_database)
            path = None
        await measure(args, url, path)


async def measure(args: argparse.Namespace, url: str, sqlite_path: str | None) -> None:
    settings = Settings(
        database_url=url,
        redis_url=args.redis_url,
        redis_prefix=f"enverif-bench-{uuid.uuid4().hex[:6]}",
        http_allow_private_networks=True,
        sweep_interval_s=30,
    )
    page = subprocess.Popen([sys.executable, "-c", PAGE_SERVER.format(port=args.port)])  # noqa: ASYNC220 - before any load
    rt = await open_runtime(settings)
    try:
        await asyncio.sleep(1.0)  # let the page server bind
        async with rt.sessionmaker() as session:
            workspace, admin_token = await auth.create_workspace(session, name="bench")
        principal = auth.Principal(workspace_id=workspace.id, role=Role.OPERATOR, token_id=0)
        base = f"http://127.0.0.1:{args.port}"
        get = {"call": "http.get", "args": {"url": f"{base}/page"}}
        post = {"call": "webhook.post", "args": {"url": f"{base}/hook", "payload": {"n": 1}}}
        agents = Agents(
            reads=await make_agent(rt, workspace.id, "three-reads", [get, get, get, {"final": "done"}]),
            writes=await make_agent(
                rt, workspace.id, "three-writes", [post, post, post, {"final": "done"}],
                policy={"rules": [{"tool": "webhook.post", "decision": "ALLOW"}]},
            ),
            one=await make_agent(rt, workspace.id, "one-call", [get, {"final": "done"}]),
        )  # fmt: skip
        # Besides the workers (and the API), the processes a run's CPU goes to; the bench
        # process subscribes to every event (and holds the idle in-process worker, if any).
        groups = {
            "page_server": [page.pid],
            **({} if sqlite_path else {"mariadbd": pids_named("mariadbd")}),
            "redis_server": pids_named("redis-server"),
            "bench": [os.getpid()],
        }

        noop_rate = await baseline_arq(settings, args.noop_jobs)
        print(f"baseline: raw arq no-op jobs: {noop_rate:.1f} jobs/s", flush=True)
        report: dict[str, Any] = {
            "database": args.db,
            "budget": BUDGET or None,
            "event_loop": "uvloop",
            "machine_cores": machine_busy_s()[1],
            "baseline_arq_noop_jobs_per_s": round(noop_rate, 1),
            "runs_per_scenario": args.runs,
        }
        if sqlite_path:
            floor = Floor(*await sqlite_floor(sqlite_path, f"{base}/page", args.runs, args.in_flight))
            print(f"floor (raw aiosqlite script, 3 GETs and 3 INSERT+COMMIT per run, {args.in_flight} in "
                  f"flight): {floor.runs_per_s:.1f} runs/s, {floor.cpu_ms_per_run:.1f} ms CPU/run", flush=True)  # fmt: skip
        else:
            floor = Floor(*await mariadb_floor(url, f"{base}/page", args.runs, args.in_flight))
            print(f"floor (raw asyncmy script, 3 GETs and 3 INSERT+COMMIT per run, {args.in_flight} in "
                  f"flight): {floor.runs_per_s:.1f} runs/s, {floor.cpu_ms_per_run:.1f} ms CPU/run, mariadbd "
                  f"{_ms(floor.mariadbd_ms_per_run)} ms/run", flush=True)  # fmt: skip
        report |= {
            "floor_runs_per_s": round(floor.runs_per_s, 1),
            "floor_cpu_ms_per_run": round(floor.cpu_ms_per_run, 1),
        }
        if floor.mariadbd_ms_per_run is not None:
            report["floor_mariadbd_cpu_ms_per_run"] = round(floor.mariadbd_ms_per_run, 2)
        if sqlite_path:
            # The in-process scenario's ratio to the ceiling becomes its ratio to the floor.
            ceiling_rate = floor.runs_per_s
        else:
            fresh = await queued_runs(rt, agents.reads, args.runs)
            ceiling_rate, ceiling_cpu = await ceiling(
                settings, f"{base}/page", fresh, lambda ids: wait_statuses(rt, ids, timeout_s=600)
            )
            print(f"ceiling (raw asyncmy script, 3 READ calls): {ceiling_rate:.1f} runs/s, "
                  f"{ceiling_cpu:.1f} ms CPU/run", flush=True)  # fmt: skip
            report |= {"ceiling_runs_per_s_3_read_calls": round(ceiling_rate, 1),
                       "ceiling_cpu_ms_per_run": round(ceiling_cpu, 1)}  # fmt: skip

        worker = None
        if {"inproc", "latency", "inflight"} & set(args.only):
            worker = build_worker(settings, handle_signals=False)
            worker_task = asyncio.create_task(worker.main())
        if "inproc" in args.only:
            report |= await in_process(
                rt, principal, agents, args.runs, worker, args.profile, noop_rate, ceiling_rate
            )
        if "inflight" in args.only:
            report |= await runs_in_flight(
                rt, principal, agents, args.runs, args.in_flight, floor.runs_per_s,
                args.profile and f"{args.profile}.inflight", args.input_kb,
            )  # fmt: skip
        if worker is not None:
            worker.allow_pick_jobs = False  # the in-process worker sits out the process scenarios
        if "procs" in args.only:
            report |= await worker_processes(
                rt, principal, agents, args.runs, groups, ceiling_rate, None if sqlite_path else floor
            )
        if "e2e" in args.only:
            report |= await through_the_api(
                rt, agents, admin_token, args.runs, args.api_port, groups, noop_rate, ceiling_rate, floor,
                writes=sqlite_path is not None,
            )  # fmt: skip
        if worker is not None:
            worker.allow_pick_jobs = True
            if "latency" in args.only:
                report |= await latency(rt, principal, agents.one, args.latency_runs)
            await stop_worker(worker, worker_task)
            await worker.close()  # its sweeper and heartbeat too, before the database is dropped

        targets = SQLITE_TARGETS if sqlite_path else TARGETS
        report["targets"] = targets_beside(
            report, {key: target for name in args.only for key, target in targets.get(name, {}).items()}
        )
        print(json.dumps(report, indent=2))
    finally:
        await rt.close()
        page.terminate()
        page.wait()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
