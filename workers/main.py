"""The arq worker: settings, start-up, and staying up through outages.

Who runs what is decided by the database lease (``services.runs.claim``), not by arq. arq's
own bookkeeping is made to follow it, because arq's defaults let a dead worker wedge the
queue (docs/architecture.md): a worker reads only the oldest ``queue_read_limit`` entries and skips
every entry whose in-progress key exists, and a SIGKILLed worker leaves its in-progress keys
for ``job_timeout + 10 s``. So:

- in-progress keys live for ``ENVERIF_LEASE_S`` only, and this process renews the keys of
  the jobs it is running (``_keep_jobs_marked``). A killed worker's keys expire within one
  lease, like its runs' leases; a long run stays marked because its worker is alive, not
  because arq was told to wait an hour;
- the sweeper is an asyncio task of every worker process on its own timer, not an arq cron
  job behind the queue it repairs, and it removes queue entries and in-progress keys that
  the database says are stale (``services.sweeper``);
- ``run_worker`` never exits on a connection error: it waits for Redis at start-up and
  restarts arq's poll loop (``Worker.main`` raises when Redis goes away) with backoff, and
  polls again as soon as Redis answers (``_poll``);
- arq's wrapper around a job (``run_job``) raises when it cannot record the job's end in
  Redis, and arq's poll loop re-raises that error whenever it next collects finished jobs,
  long after Redis came back: one stale error per job that ended during an outage, each of
  which used to restart the loop. ``EnverifWorker.run_job`` keeps such errors to itself
  (the job's queue entry and in-progress key are cleaned up by their TTL and the sweeper);
- arq's ``start_jobs`` takes a concurrency slot before its Redis round trips, and a failure
  among them (Redis lost) would keep that slot taken for the life of the process, since the
  same ``Worker`` is reused across restarts: ``EnverifWorker.start_jobs`` marks jobs in
  progress with one script and takes slots only for the jobs it marked;
- a worker whose poll loop is not polling (an outage, a bug) says so in its heartbeat, and
  ``/healthz`` and ``enverif worker --check`` do not count it (``app.services.health``).

Stopping (SIGTERM, a rolling restart) is ``stop_worker``'s: stop taking jobs, let the running
ones finish their step within ``ENVERIF_WORKER_STOP_GRACE_S``, hand back the runs that did not,
and only then close what the jobs use. arq's own stop (``Worker.close``, its signal handler)
cancels its wrappers around the jobs instead, which cuts short their bookkeeping in Redis (the
shielded ``finish_job`` goes on unattended, and is cut off when the pool closes: ``Unclosed
Pipeline client``) and cancels the jobs a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.cron import cron
from arq.utils import timestamp_ms
from arq.worker import Worker, func

from app.engine.mcp_client import McpConnections
from app.engine.providers import Providers
from app.engine.tools.registry import default_registry
from app.events.stops import LiveRuns
from app.events.subscriber import RECONNECT, Backoff, RedisSubscriber
from app.keys import queue_name, run_stops_channel, schedules_cron_name
from app.outages import is_outage
from app.services import health
from app.services.runtime import Runtime, open_runtime, redis_settings
from app.services.sweeper import sweeper_loop
from app.settings import Settings
from workers.jobs import execute_run, fire_schedules

log = logging.getLogger(__name__)

# arq counts starts, not failures: a run job only fails on infrastructure errors (the run
# itself records its own failures), so allow many restarts before arq gives up on a job.
RUN_JOB_MAX_TRIES = 100
# A poll loop that has not finished a turn for this long is not polling (see app.services.health):
# a turn is one Redis round trip or a few, so this is an outage, a stall or a bug.
POLL_STALL_S = health.HEARTBEAT_TTL_S
# Stopping: the poll loop stops at its next turn, one Redis round trip and one poll delay
# away unless Redis does not answer. Cancelled jobs each hand their run back in one short
# transaction, and arq then records their end in Redis.
POLL_STOP_S = 5.0
HAND_BACK_S = 10.0


class PollStopped(Exception):
    """Ends ``Worker.main()`` at the poll loop's next turn once the worker is stopping."""


class EnverifWorker(Worker):
    """arq's Worker with a poll loop that stops between two turns (cancelling ``main()``
    could cut a turn short after it marked a job in progress but before it started the job,
    which would then wait a lease for another worker), that never re-raises a job's stale
    bookkeeping error, and that never leaks a concurrency slot. See the module docstring."""

    def __init__(self, *, stop_grace_s: float, **options: Any) -> None:
        super().__init__(**options)
        self.stop_grace_s = stop_grace_s
        # Also the jobs' ``ctx["stopping"]``: run jobs hand their run back at the next step.
        self.stopping = asyncio.Event()
        self.ctx["stopping"] = self.stopping
        self.last_poll_s = time.monotonic()
        # Jobs whose end could not be recorded in Redis since the last turn that worked.
        self.unrecorded_jobs = 0
        # Called after every turn of the poll loop that worked (``_poll`` resets its backoff).
        self.on_poll_ok: list[Callable[[], None]] = []

    @property
    def polling(self) -> bool:
        """The poll loop finished a turn recently: it is taking jobs and running arq's cron."""
        return time.monotonic() - self.last_poll_s < POLL_STALL_S + self.poll_delay_s

    async def _poll_iteration(self) -> None:
        if self.stopping.is_set():
            raise PollStopped
        await super()._poll_iteration()
        self.last_poll_s = time.monotonic()
        if self.unrecorded_jobs:
            log.warning(
                "worker: Redis is back; %d job(s) that ended while it was away could not record "
                "their end there (their queue entries expire and are swept)",
                self.unrecorded_jobs,
            )
            self.unrecorded_jobs = 0
        for hook in self.on_poll_ok:
            hook()

    async def run_job(self, job_id: str, score: int) -> None:
        # arq's poll loop calls ``result()`` on every finished wrapper: an error raised here
        # would surface there later, as if Redis had just failed again.
        try:
            await super().run_job(job_id, score)
        except Exception as exc:
            if not is_outage(exc):
                log.exception("worker: arq's bookkeeping of job %s failed", job_id)
                return
            # Redis went away around the job's start or end. Not started: its in-progress key
            # expires within a lease and the job is taken again. Ended: the run's outcome is
            # in the database already; the queue entry left behind is swept.
            self.unrecorded_jobs += 1
            log.debug(
                "worker: job %s: Redis unavailable for its bookkeeping (%s)", job_id, type(exc).__name__
            )

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        # arq marks each job in progress with WATCH, EXISTS, ZSCORE, then MULTI/PSETEX/EXEC: four
        # round trips per job, paid again for every job at the queue's head another worker
        # has just taken. One script does the same checks for the whole head atomically and
        # marks as many jobs as this process has free slots: one round trip per poll
        # (docs/performance.md). A slot (arq's semaphore and job counter) is taken only for a
        # job Redis has marked ours, with nothing in between that can suspend, so no failure
        # or cancellation can leave one taken.
        #
        # arq reads up to ``queue_read_limit`` jobs of the queue's head on each poll, the jobs
        # being run included. This process's own running jobs are skipped without asking
        # Redis, even one whose in-progress key lapsed (renewals missed under load or a Redis
        # blip): taken again here, arq would run the same job twice in one process, and its
        # second end would find the first one's bookkeeping gone (a KeyError in its wrapper);
        # another worker may take it, its claim is fenced.
        free = self.max_jobs - self.job_counter
        waiting = [job_id.decode() for job_id in job_ids if not self._running_here(job_id)]
        if free <= 0 or not waiting:
            return
        taken = await self.pool.eval(  # type: ignore[misc]  # redis-py types sync and async alike
            _TAKE_JOBS,
            1 + len(waiting),
            self.queue_name,
            *(in_progress_key_prefix + job_id for job_id in waiting),
            str(timestamp_ms()),
            str(int(self.in_progress_timeout_s * 1000)),
            str(free),
            *waiting,
        )
        for job_id, score in zip(taken[::2], taken[1::2], strict=True):
            job_id = job_id.decode()
            # Never waits: the semaphore has one permit more than ``max_jobs`` and at most
            # ``free`` jobs were marked.
            await self.sem.acquire()
            self.job_counter += 1
            task = self.loop.create_task(self.run_job(job_id, int(float(score))))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task

    def _running_here(self, job_id: bytes) -> bool:
        running = self.tasks.get(job_id.decode())
        return running is not None and not running.done()


# KEYS: the queue, then each job's in-progress key; ARGV: now (ms), the in-progress TTL (ms),
# how many jobs to take at most, then the job ids. What arq's ``start_jobs`` checks of each
# job (not in progress anywhere, still queued, due), in order, stopping once enough are
# taken. Returns [job id, score, ...] for the jobs it marked in progress.
_TAKE_JOBS = """
local now, ttl, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local taken = {}
for i = 2, #KEYS do
    if #taken >= 2 * limit then break end
    if redis.call('EXISTS', KEYS[i]) == 0 then
        local job_id = ARGV[i + 2]
        local score = redis.call('ZSCORE', KEYS[1], job_id)
        if score and tonumber(score) <= now then
            redis.call('PSETEX', KEYS[i], ttl, '1')
            taken[#taken + 1] = job_id
            taken[#taken + 1] = score
        end
    end
end
return taken
"""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def build_worker(
    settings: Settings, *, burst: bool = False, runtime: Runtime | None = None, **overrides: Any
) -> EnverifWorker:
    """An arq Worker for this deployment. Its start-up hook opens the runtime (unless one is
    given) and starts the process's background tasks: sweeper, heartbeat, in-progress marks.
    The hook may run more than once (``run_worker`` restarts ``main()``); it is idempotent."""

    async def on_startup(ctx: dict[str, Any]) -> None:
        if "runtime" not in ctx:
            ctx["runtime"] = await open_runtime(settings, worker=True)
            ctx["owns_runtime"] = True
        if "registry" not in ctx:
            ctx["registry"] = default_registry(settings)
        if "providers" not in ctx:
            # One guarded HTTP client and one template renderer pool for all runs of this worker.
            ctx["providers"] = Providers(settings)
        if "mcp" not in ctx:
            # One session per MCP server for all runs of this worker, opened on first use.
            ctx["mcp"] = McpConnections(settings)
        ctx.setdefault("owner", worker_id())
        if ctx["runtime"].output_watch is None:
            # Live output only for runs someone watches (app.events.output).
            ctx["runtime"].output_watch = {}
        if "live_runs" not in ctx:
            # Stop notices (a cancel, a pause) reach the runs this process executes at once.
            live = LiveRuns()
            subscriber = RedisSubscriber(settings)
            subscriber.add(run_stops_channel(settings.redis_prefix), live)
            await subscriber.start()
            ctx["live_runs"], ctx["stops_subscriber"] = live, subscriber
        if "background" not in ctx:
            rt: Runtime = ctx["runtime"]
            ctx["background"] = [
                asyncio.create_task(sweeper_loop(rt), name="enverif-sweeper"),
                asyncio.create_task(
                    health.heartbeat_loop(
                        rt, ctx["owner"], lambda: len(worker.tasks), polling=lambda: worker.polling
                    ),
                    name="enverif-heartbeat",
                ),
                asyncio.create_task(_keep_jobs_marked(worker, rt), name="enverif-in-progress"),
            ]

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        await _stop_background(ctx)
        if "stops_subscriber" in ctx:
            await ctx.pop("stops_subscriber").stop()
            ctx.pop("live_runs", None)
        if "providers" in ctx:
            await ctx.pop("providers").aclose()
        if "mcp" in ctx:
            await ctx.pop("mcp").aclose()
        if "registry" in ctx:
            await ctx.pop("registry").aclose()
        if ctx.pop("owns_runtime", False):
            await ctx.pop("runtime").close()

    ctx: dict[str, Any] = {}
    if runtime is not None:
        ctx["runtime"] = runtime
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
        # Schedules fire from an arq cron job (docs/concepts/schedules.md): every minute on the
        # minute, and once as the worker starts, so fire times missed while no worker ran are
        # served at once.
        "cron_jobs": [
            cron(
                fire_schedules,
                name=schedules_cron_name(settings.redis_prefix),
                second=0,
                microsecond=0,
                run_at_startup=True,
                timeout=settings.job_timeout_s,
            )
        ],
        "redis_settings": redis_settings(settings),
        "redis_pool": runtime.redis if runtime is not None else None,
        "ctx": ctx,
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
    worker = EnverifWorker(stop_grace_s=settings.worker_stop_grace_s, **options)
    # arq sets every in-progress key for its longest job timeout + 10 s and offers no option
    # for it (it reads this attribute when it starts a job). One lease is enough: this process
    # renews the keys of its own jobs, and a dead process's keys must not outlive its leases.
    worker.in_progress_timeout_s = in_progress_ttl_s(settings)
    return worker


def in_progress_ttl_s(settings: Settings) -> float:
    return settings.lease_s


async def _keep_jobs_marked(worker: Worker, rt: Runtime) -> None:
    """Renew the in-progress keys of the jobs this process is running, every third of
    their TTL (the same rhythm as the database lease)."""
    ttl_ms = int(in_progress_ttl_s(rt.settings) * 1000)
    while True:
        await asyncio.sleep(ttl_ms / 3000)
        running = [job_id for job_id, task in list(worker.tasks.items()) if not task.done()]
        if not running:
            continue
        try:
            async with rt.redis.pipeline(transaction=False) as pipe:
                for job_id in running:
                    pipe.pexpire(in_progress_key_prefix + job_id, ttl_ms)
                await pipe.execute()
        except Exception as exc:
            # Redis away: the keys may expire and another worker may take a job again; its
            # claim then finds the run RUNNING under our lease and does nothing.
            log.debug("could not renew in-progress keys: %s", type(exc).__name__)


async def _stop_background(ctx: dict[str, Any]) -> None:
    tasks: list[asyncio.Task[None]] = ctx.pop("background", [])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if "runtime" in ctx and "owner" in ctx:
        rt: Runtime = ctx["runtime"]
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await health.forget(rt.redis, rt.settings.redis_prefix, ctx["owner"])


async def stop_worker(worker: EnverifWorker, poll: asyncio.Task[None]) -> None:
    """Stop ``worker``, whose poll loop is the task ``poll``, as SIGTERM should; its runtime
    and Redis pool stay open, for the caller to close afterwards:

    1. stop taking jobs: the poll loop ends at its next turn;
    2. let the running jobs finish their current step, for up to ``worker.stop_grace_s``: a
       run job then hands its run back to the queue (``engine.loop``), other jobs just end;
    3. cancel the jobs still running (the job, not arq's wrapper around it): each hands its
       run back at once, and arq's wrapper still records the job's end in Redis;
    4. wait for arq's wrappers, so that nothing uses the runtime once this returns.
    """
    worker.stopping.set()
    _, late = await asyncio.wait({poll}, timeout=POLL_STOP_S)
    for task in late:
        task.cancel()  # Redis does not answer; there is no turn of the loop to cut short
    await asyncio.gather(poll, return_exceptions=True)
    running = {t for t in worker.tasks.values() if not t.done()}
    if running:
        _, running = await asyncio.wait(running, timeout=worker.stop_grace_s)
    if running:
        log.info("worker: %d job(s) still running after the grace; handing their runs back", len(running))
        for job in list(worker.job_tasks.values()):
            job.cancel()
        _, running = await asyncio.wait(running, timeout=HAND_BACK_S)
    if running:
        log.warning(
            "worker: %d job(s) did not end within %.0f s of being cancelled", len(running), HAND_BACK_S
        )
        for task in running:
            task.cancel()
    # Also collects the outcome of the wrappers that ended, for nobody else will. Bounded: a
    # stop must end even when the database or Redis stopped answering a job's last write.
    wrappers = set(worker.tasks.values())
    if wrappers:
        _, stuck = await asyncio.wait(wrappers, timeout=HAND_BACK_S)
        if stuck:
            log.warning("worker: %d job(s) still had not ended; leaving them", len(stuck))
        await asyncio.gather(*(t for t in wrappers if t.done()), return_exceptions=True)
    worker.tasks.clear()


async def open_runtime_when_reachable(settings: Settings) -> Runtime:
    """Open the worker's runtime, waiting (with backoff) while Redis does not answer: a
    worker started during an outage begins work when Redis returns instead of exiting."""
    backoff = Backoff(RECONNECT)
    warned = False
    while True:
        try:
            return await open_runtime(settings, worker=True)
        except Exception as exc:
            if not is_outage(exc):
                raise
            if not warned:
                log.warning("worker: Redis does not answer (%s); waiting for it", type(exc).__name__)
                warned = True
            await backoff.wait()


async def run_worker(settings: Settings, *, burst: bool = False) -> None:
    """Run until cancelled (the CLI owns SIGINT/SIGTERM and cancels this task), then stop
    as ``stop_worker`` says: the runs in flight finish their step or are handed back."""
    runtime = await open_runtime_when_reachable(settings)
    worker = build_worker(settings, burst=burst, runtime=runtime, handle_signals=False)
    poll = asyncio.create_task(_poll(worker), name="enverif-poll")
    try:
        # Not `await poll`: that would cancel the poll loop with us, wherever it is.
        await asyncio.wait({poll})
        poll.result()  # --burst: the queue is empty
    except asyncio.CancelledError:
        await stop_worker(worker, poll)
        raise
    finally:
        poll.cancel()  # only when stop_worker itself was cut short (a second cancellation)
        await asyncio.gather(poll, *worker.tasks.values(), return_exceptions=True)
        worker.tasks.clear()
        try:
            await worker.on_shutdown(worker.ctx)  # type: ignore[misc]
        finally:
            await runtime.close()


async def _poll(worker: EnverifWorker) -> None:
    """arq's poll loop, restarted when it fails: ``Worker.main()`` raises as soon as Redis
    does (a poll, a cron enqueue). Jobs already running carry on meanwhile: they need the
    database, not Redis, and their leases keep being renewed there.

    The backoff is the one every Redis reconnect follows, reset by the first turn of the
    loop that works. During an outage its waits are capped at the poll delay: trying Redis
    again costs no more than the poll it replaces, and the worker takes jobs again within a
    poll or two of Redis answering. A failure that is no outage (a bug) backs off in full."""
    backoff = Backoff(RECONNECT)
    worker.on_poll_ok.append(backoff.reset)
    while True:
        try:
            await worker.main()
            return  # --burst: the queue is empty
        except PollStopped:
            return
        except Exception as exc:
            if not is_outage(exc):
                log.exception("worker: the poll loop failed; restarting it")
                await backoff.wait()
                continue
            if backoff.attempt == 0:  # once per outage
                log.warning(
                    "worker: lost Redis (%s); polling again as soon as it answers", type(exc).__name__
                )
            await _until_redis_answers(worker, backoff)


async def _until_redis_answers(worker: EnverifWorker, backoff: Backoff) -> None:
    """Wait for Redis with a PING per backoff step, capped at the poll delay. A PING rather
    than restarting ``main()`` each time, which would log arq's start-up banner and rerun the
    start-up hook at every try."""
    while True:
        await backoff.wait(cap_s=worker.poll_delay_s)
        if worker._pool is None:
            return  # no pool yet: main() creates it, or fails as it fails
        try:
            await worker.pool.ping()
        except Exception as exc:
            if is_outage(exc):
                continue
        backoff.reset()
        return
