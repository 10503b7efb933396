"""``enverif dev``: the whole stack in one process, plus a demo workspace to try it on.

One event loop runs two tasks — the API (uvicorn) and the worker (arq) — against the
embedded SQLite and Redis under ``ENVERIF_HOME`` unless ``ENVERIF_*`` say otherwise. The same
``run_stack`` serves ``enverif serve`` (API only).

Signals: we own SIGINT/SIGTERM for the whole process. uvicorn's own capture would stop only
the API and then re-raise the signal after its shutdown (killing the process before the
worker closed); arq's would stop only the worker. Whichever task ends first — by a signal or
by failing — stops the other, so the process never keeps half a stack running.

Seeding is idempotent: the ``demo`` workspace and its agents are reused when present (the
agents are put back to their demo definition, whose URLs carry this start's port), and a
fresh admin token is minted on every start because tokens are stored hashed and cannot be
shown again.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.clock import utcnow
from app.db.orm import Agent, Memory, Workspace
from app.dev.prospector import prospector_specs, seed_schedule
from app.domain.agents import DEFAULT_MEMORY_MAX_CHARS, DEFAULT_MEMORY_MAX_ITEMS, AgentStatus, Role
from app.domain.errors import Conflict
from app.domain.policy import validate_policy
from app.services import auth, memories
from app.settings import Settings

log = logging.getLogger(__name__)

DEMO_WORKSPACE = "demo"
DEV_TOKEN_NAME = "enverif dev"
# How long open connections (websocket subscriptions, slow requests) may hold up shutdown.
GRACEFUL_SHUTDOWN_S = 5
# How long each half may take to stop before it is cancelled; the worker gets its jobs' grace
# (ENVERIF_WORKER_STOP_GRACE_S) on top, for it lets them finish their step first.
STOP_TIMEOUT_S = 15.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StackError(Exception):
    """The stack could not start, or one of its halves died: a message for the operator."""


# -- the demo workspace -------------------------------------------------------------------


@dataclass(frozen=True)
class DemoAgent:
    name: str
    description: str
    instructions: str
    model: dict[str, Any]
    tools: list[str]
    policy: dict[str, Any] = field(default_factory=dict)


def demo_agents(base_url: str) -> list[DemoAgent]:
    """The demo agents; ``base_url`` is where this dev stack answers (its /dev routes)."""
    return [
        DemoAgent(
            name="researcher",
            description="Fetches the demo page and posts a summary of it to the demo webhook.",
            instructions="Read the page, then post a one-line summary of it to the webhook.",
            model={
                "provider": "scripted",
                "steps": [
                    {"call": "http.get", "args": {"url": f"{base_url}/dev/page"}},
                    {
                        "call": "webhook.post",
                        "args": {
                            "url": f"{base_url}/dev/webhook",
                            "payload": {"summary": "{{ results[-1].body[:80] }}"},
                        },
                    },
                    {"final": {"fetched": "{{ results[0].status }}", "posted": "{{ results[1].status }}"}},
                ],
            },
            tools=["http.get", "webhook.post"],
            # webhook.post is EXTERNAL_WRITE and needs approval by its risk class anyway;
            # the rule says so where an operator reading the policy will look.
            policy={"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL"}]},
        ),
        DemoAgent(
            name="lead-researcher",
            description="Researches a company by delegating the enrichment to the enricher.",
            instructions="Hand the enrichment of the company in the input to the enricher, then report.",
            model={
                "provider": "scripted",
                "steps": [
                    {"call": "agents.list", "args": {}},
                    {
                        "call": "agents.delegate",
                        "args": {
                            "agent": "enricher",
                            "task": "Enrich {{ input.company | default('acme.example') }}",
                        },
                    },
                    {
                        "final": {
                            "enrichment": "{{ results[1].result }}",
                            "childRun": "{{ results[1].runId }}",
                        }
                    },
                ],
            },
            tools=["agents.*"],
        ),
        DemoAgent(
            name="enricher",
            description="Enrichment specialist: fetches the demo page and posts what it found to the demo webhook.",
            instructions="Fetch the page about the company in the task, then post the findings.",
            model={
                "provider": "scripted",
                "steps": [
                    {"call": "http.get", "args": {"url": f"{base_url}/dev/page"}},
                    {
                        "call": "webhook.post",
                        "args": {
                            "url": f"{base_url}/dev/webhook",
                            "payload": {"task": "{{ input.task }}", "summary": "{{ results[0].body[:80] }}"},
                        },
                    },
                    {"final": {"fetched": "{{ results[0].status }}", "posted": "{{ results[1].status }}"}},
                ],
            },
            tools=["http.get", "webhook.post"],
            policy={"rules": [{"tool": "webhook.post", "decision": "REQUIRE_APPROVAL"}]},
        ),
        DemoAgent(
            name="scout",
            description="Carries decisions between runs: looks up its memory, then remembers the input's decision.",
            instructions="Search your memory for the topic, then remember the decision you were given.",
            model={
                "provider": "scripted",
                "steps": [
                    {"call": "memory.search", "args": {"query": "{{ input.topic | default('customer') }}"}},
                    {
                        "call": "memory.remember",
                        "args": {
                            "key": "{{ input.key | default('latest-decision') }}",
                            "value": "{{ input.decision | default('Prioritise EU fintech leads this quarter') }}",
                            "tags": ["decision"],
                            "importance": 0.8,
                        },
                    },
                    {
                        "final": {
                            "injected": "{{ memories | map(attribute='key') | list }}",
                            "found": "{{ results[0].memories | map(attribute='key') | list }}",
                            "remembered": "{{ results[1] }}",
                        }
                    },
                ],
            },
            tools=["memory.*"],
        ),
        DemoAgent(
            name="greeter",
            description="Greets whoever is named in the input, in one turn.",
            instructions="Greet the person named in the input.",
            model={
                "provider": "scripted",
                "steps": [{"final": "Hello, {{ input.name | default('world') }}!"}],
            },
            tools=[],
        ),
        # Appended last so the other demo agents keep their ids: a three-level tree
        # (research-director -> lead-researcher -> enricher) whose grandchild waits for approval.
        DemoAgent(
            name="research-director",
            description="Runs a research programme: hands the company to the lead researcher, who delegates the enrichment.",
            instructions="Hand the research of the company in the input to the lead researcher, then report.",
            model={
                "provider": "scripted",
                "steps": [
                    {
                        "call": "agents.delegate",
                        "args": {
                            "agent": "lead-researcher",
                            "task": "Research {{ input.company | default('acme.example') }}",
                            "input": {"company": "{{ input.company | default('acme.example') }}"},
                        },
                    },
                    {"final": {"research": "{{ results[0].result }}", "childRun": "{{ results[0].runId }}"}},
                ],
            },
            tools=["agents.*"],
        ),
        # The scheduled one and its specialist (app/dev/prospector.py).
        *[DemoAgent(**spec) for spec in prospector_specs(base_url)],
    ]


@dataclass(frozen=True)
class DemoSeed:
    workspace_id: int
    workspace: str
    token: str
    agents: list[str]


async def seed_demo(
    sessionmaker: async_sessionmaker[AsyncSession], *, base_url: str, reset: bool = False
) -> DemoSeed:
    """Create or reuse the demo workspace, mint a fresh admin token, and (re)write the agents."""
    if reset:
        async with sessionmaker() as session:
            # Every table hangs off workspaces with ON DELETE CASCADE: runs, steps, events,
            # memories, tokens and schedules of the demo go with it.
            await session.execute(delete(Workspace).where(Workspace.name == DEMO_WORKSPACE))
            await session.commit()

    token: str | None = None
    async with sessionmaker() as session:
        workspace = await session.scalar(select(Workspace).where(Workspace.name == DEMO_WORKSPACE))
    if workspace is None:
        try:
            async with sessionmaker() as session:
                workspace, token = await auth.create_workspace(session, name=DEMO_WORKSPACE)
        except Conflict:
            pass  # another `enverif dev` on this database created it just now: reuse it
    if token is None:
        async with sessionmaker() as session:
            token = await auth.create_token(
                session,
                workspace_name=DEMO_WORKSPACE,
                role=Role.ADMIN,
                # Token names are unique per workspace and every start mints one: stamp it.
                name=f"{DEV_TOKEN_NAME} {utcnow():%Y-%m-%d %H:%M:%S.%f}",
            )
            workspace = await session.scalar(select(Workspace).where(Workspace.name == DEMO_WORKSPACE))
    assert workspace is not None

    specs = demo_agents(base_url)
    async with sessionmaker() as session:
        for spec in specs:
            await _upsert_agent(session, workspace_id=workspace.id, spec=spec)
        await session.commit()
    async with sessionmaker() as session, session.begin():
        await _seed_memories(session, workspace_id=workspace.id)
        await seed_schedule(session, workspace_id=workspace.id)
    return DemoSeed(
        workspace_id=workspace.id, workspace=DEMO_WORKSPACE, token=token, agents=[s.name for s in specs]
    )


async def _upsert_agent(session: AsyncSession, *, workspace_id: int, spec: DemoAgent) -> None:
    policy = validate_policy(spec.policy)
    wanted: dict[str, Any] = {
        "description": spec.description,
        "instructions": spec.instructions,
        "status": AgentStatus.ACTIVE.value,
        "model": spec.model,
        "tools": spec.tools,
        "policy": policy,
        "memory_max_items": DEFAULT_MEMORY_MAX_ITEMS,
        "memory_max_chars": DEFAULT_MEMORY_MAX_CHARS,
    }
    agent = await session.scalar(
        select(Agent).where(Agent.workspace_id == workspace_id, Agent.name == spec.name)
    )
    now = utcnow()
    if agent is None:
        session.add(
            Agent(workspace_id=workspace_id, name=spec.name, created_at=now, updated_at=now, **wanted)
        )
        return
    changed = False
    for key, value in wanted.items():
        if getattr(agent, key) != value:
            setattr(agent, key, value)
            changed = True
    if changed:
        agent.updated_at = now


# Memories the demo starts with: (agent, key, value, tags, importance). Written only when
# missing, so whatever the demo's runs and operators changed since stays as it is.
DEMO_MEMORIES = [
    ("scout", "icp", "Ideal customer: B2B SaaS in the EU, 50-500 employees", ["icp"], 0.9),
]


async def _seed_memories(session: AsyncSession, *, workspace_id: int) -> None:
    for agent_name, key, value, tags, importance in DEMO_MEMORIES:
        agent = await session.scalar(
            select(Agent).where(Agent.workspace_id == workspace_id, Agent.name == agent_name)
        )
        if agent is None:
            continue
        present = await session.scalar(
            select(Memory.id).where(Memory.agent_id == agent.id, Memory.key == key)
        )
        if present is not None:
            continue
        # Neither a run nor a token wrote it: its first revision names nobody.
        await memories.remember(
            session,
            workspace_id=workspace_id,
            agent_id=agent.id,
            key=key,
            value=value,
            tags=tags,
            importance=importance,
            now=utcnow(),
            max_value_chars=len(value),
        )


# -- listening ----------------------------------------------------------------------------


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the API's socket up front: a taken port is a clear error before anything starts,
    and ``--port 0`` yields the real port for the URLs we print and seed."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise StackError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise StackError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def base_url(sock: socket.socket) -> str:
    """The URL a client on this machine uses to reach the bound socket."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


# -- running ------------------------------------------------------------------------------


class _ApiServer(uvicorn.Server):
    """uvicorn without its signal capture: ``run_stack`` owns SIGINT/SIGTERM (module docstring)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve_api(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit:
        # uvicorn exits the process when the app's lifespan fails to start; it has logged why.
        raise StackError("the API failed to start (see the log above)") from None


# Allocations (net of frees) between young-generation collections: CPython's 700 makes a
# thousand subscribers' fan-out collect every few deliveries.
GC_THRESHOLD_0 = 10_000


def _exempt_startup_objects_from_gc() -> None:
    """What is alive once the stack has started (modules, the GraphQL schema, the mappers,
    the engines) lives as long as the process: ``gc.freeze`` puts it out of the cyclic
    collector's reach. A full collection then scans only what requests, runs and
    subscriptions allocated since; with a thousand live subscribers such a collection took
    190-340 ms of frozen event loop (bench/events.py), a latency spike for every client.
    Reference counting still frees these objects; only cycles among them stay."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])


async def run_stack(
    settings: Settings,
    sock: socket.socket | None,
    *,
    worker: Callable[[], Coroutine[Any, Any, None]] | None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve the API on ``sock`` and/or run ``worker()`` until a signal, or until one ends.

    A worker that ends by itself (``--burst`` drained the queue) is a normal stop; the API
    ending by itself, or either half raising, is a ``StackError``.
    """
    loop = asyncio.get_running_loop()
    server: _ApiServer | None = None
    if sock is not None:
        from app.main import create_app

        server = _ApiServer(
            uvicorn.Config(
                app=create_app(settings),
                log_level=settings.log_level,
                lifespan="on",
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                ws_per_message_deflate=settings.ws_per_message_deflate,
            )
        )
    stop = asyncio.Event()
    signals_seen = 0

    def _on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if server is not None and signals_seen > 1:
            server.force_exit = True  # a second Ctrl-C: stop waiting for open connections
        stop.set()

    def _own_signals() -> None:
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, _on_signal)

    _own_signals()
    api_task = asyncio.create_task(_serve_api(server, sock), name="enverif-api") if server and sock else None
    worker_task = asyncio.create_task(worker(), name="enverif-worker") if worker else None
    # arq's Worker installs its own loop signal handlers when it is built, in the worker task's
    # first step. They would stop only the worker's jobs, not this process: once that first
    # step has run (one trip round the loop), take the signals back.
    await asyncio.sleep(0)
    _own_signals()
    tasks = {t for t in (api_task, worker_task) if t is not None}
    stop_task = asyncio.create_task(stop.wait(), name="enverif-stop")
    done: set[asyncio.Task[Any]] = set()
    try:
        if server is not None and api_task is not None:
            # uvicorn offers `started` only as a flag, no event to await.
            while not server.started and not api_task.done() and not stop.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        if (server is None or server.started) and not stop.is_set():
            _exempt_startup_objects_from_gc()
            if on_ready is not None:
                on_ready()
        done, _ = await asyncio.wait({*tasks, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if server is not None:
            server.should_exit = True
        if worker_task is not None and not worker_task.done():
            worker_task.cancel()
        stop_task.cancel()
        stop_timeout_s = STOP_TIMEOUT_S + (settings.worker_stop_grace_s if worker_task is not None else 0)
        _, pending = await asyncio.wait(tasks, timeout=stop_timeout_s)
        for late in pending:
            log.warning("%s did not stop within %.0f s; cancelling it", late.get_name(), stop_timeout_s)
            late.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)
    if stop_task in done:
        return
    halves: list[tuple[asyncio.Task[None] | None, str]] = [(api_task, "API"), (worker_task, "worker")]
    for task, what in halves:
        if task is None or task not in done or task.cancelled():
            continue
        exc = task.exception()
        if isinstance(exc, StackError):
            raise exc
        if exc is not None:
            log.error("the %s stopped with an error", what, exc_info=exc)
            raise StackError(f"the {what} stopped unexpectedly: {exc}") from None
        if task is api_task:
            raise StackError("the API stopped unexpectedly (see the log above)")
