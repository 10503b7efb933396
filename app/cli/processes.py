"""``enverif dev``, ``enverif serve`` and ``enverif worker``: the long-running processes.

Each checks first that the database is migrated and Redis answers (one line if not), then
runs ``app.dev.stack.run_stack``, which owns the signals and stops the whole process when
either half ends. ``worker --check`` is the supervisors' liveness probe instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from sqlalchemy import text

from app.cli import common
from app.cli.common import CliError
from app.db import migrate
from app.db.session import create_engine, create_sessionmaker
from app.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    from app.dev import stack

    settings = common.settings()
    host, port = common.listen_address(args, settings)

    async def run() -> None:
        await common.preflight(settings)
        sock = stack.bind_socket(host, port)
        url = stack.base_url(sock)
        await stack.run_stack(
            settings, sock, worker=None, on_ready=lambda: print(f"Enverif API at {url}/graphql", flush=True)
        )

    _run_stack(run, fast_loop=True)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.main import run_worker

    if args.check:
        return _check_workers(common.settings(log=False), this_host=args.this_host)
    settings = common.settings()

    async def run() -> None:
        from app.dev import stack

        if args.burst:
            await common.preflight(settings)  # a one-shot run fails fast: a script awaits its answer
        else:
            await _preflight_when_reachable(settings)
        await stack.run_stack(settings, None, worker=lambda: run_worker(settings, burst=args.burst))

    _run_stack(run, fast_loop=True)
    return 0


async def _preflight_when_reachable(settings: Settings) -> None:
    """The preflight check, for a worker that may start before its database or Redis does (a
    host booting, a restart): while either does not answer it waits (with backoff) instead of
    exiting. Anything else (a database that is not migrated, a bad URL) is still an error."""
    from app.events.subscriber import Backoff

    common.require_database_file(settings.effective_database_url)
    backoff = Backoff()
    warned = False
    while True:
        outage = await _unreachable(settings)
        if outage is None:
            try:
                await common.preflight(settings)
                return
            except CliError:
                # Gone again between the two looks (a restart in progress), or a real error.
                outage = await _unreachable(settings)
                if outage is None:
                    raise
        if not warned:
            logging.getLogger("enverif.worker").warning(
                "the database or Redis does not answer (%s); waiting for it", outage
            )
            warned = True
        await backoff.wait()


async def _unreachable(settings: Settings) -> str | None:
    """The kind of outage if the database or Redis does not answer now, else None."""
    from redis.asyncio import Redis

    from app.outages import is_outage

    engine = create_engine(settings.effective_database_url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        if not settings.uses_embedded_redis:
            client = Redis.from_url(settings.effective_redis_url, socket_connect_timeout=5)
            try:
                await client.ping()
            finally:
                await client.aclose()
    except Exception as exc:
        return type(exc).__name__ if is_outage(exc) else None
    finally:
        await engine.dispose()
    return None


def _check_workers(settings: Settings, *, this_host: bool) -> int:
    """For process supervisors: 0 when a worker (on this host, with --this-host) has a live
    heartbeat in Redis, 1 otherwise. One line on stdout either way."""
    import socket

    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    from app.services.health import live_workers

    async def run() -> int:
        client = Redis.from_url(settings.effective_redis_url, socket_connect_timeout=5)
        try:
            beats = await live_workers(client, settings.redis_prefix)
        except (RedisError, OSError) as exc:
            print(f"no worker alive: cannot reach Redis ({type(exc).__name__})")
            return 1
        finally:
            await client.aclose()
        if this_host:
            host = socket.gethostname()
            beats = [b for b in beats if b.host == host]
        where = " on this host" if this_host else ""
        print(f"{len(beats)} worker{'s' if len(beats) != 1 else ''} alive{where}")
        return 0 if beats else 1

    return asyncio.run(run())


def cmd_dev(args: argparse.Namespace) -> int:
    from app.dev import demo, stack
    from app.dev.embedded import embedded_redis_running, stop_embedded_redis

    # Quiet by default: the banner is the last thing printed at start-up and stays on screen
    # (no access log, no per-job lines); warnings and errors still show. --verbose or
    # ENVERIF_LOG_LEVEL show everything.
    quiet: dict[str, Any] = (
        {} if args.verbose or "ENVERIF_LOG_LEVEL" in os.environ else {"log_level": "warning"}
    )
    settings = common.settings(dev_mode=True, graphiql=True, http_allow_private_networks=True, **quiet)
    host, port = common.listen_address(args, settings)
    # The embedded Redis daemonizes; the one this command starts is stopped when it stops.
    owns_redis = settings.uses_embedded_redis and not embedded_redis_running(settings)

    async def run() -> None:
        from workers.main import run_worker

        sock = stack.bind_socket(host, port)
        url = stack.base_url(sock)
        await common.check_redis(settings)
        db_url = settings.effective_database_url
        engine = create_engine(db_url)
        try:
            with common.database_errors(db_url):
                await migrate.upgrade(engine)
                seed = await demo.seed_demo(create_sessionmaker(engine), base_url=url, reset=args.reset)
        finally:
            await engine.dispose()
        await stack.run_stack(
            settings,
            sock,
            worker=lambda: run_worker(settings, burst=False),
            on_ready=lambda: print(_dev_banner(url, seed, settings), flush=True),
        )

    try:
        _run_stack(run)
    finally:
        if owns_redis:
            stop_embedded_redis(settings)
    print("Enverif dev stopped.", flush=True)
    return 0


def _dev_banner(url: str, seed: Any, settings: Settings) -> str:
    query = json.dumps({"query": "{ agents(first: 10) { edges { node { id name status } } } }"})
    where = (
        "embedded" if settings.uses_embedded_redis else common.safe_redis_url(settings.effective_redis_url)
    )
    return "\n".join(
        [
            "",
            "Enverif dev is running: API and worker in this process.",
            "",
            f"  GraphQL    {url}/graphql   (HTTP, and websockets for subscriptions)",
            f"  GraphiQL   {url}/graphql#token={seed.token}",
            f"  Console    {url}/console   (sign in with the token below)",
            f"  Workspace  {seed.workspace}   agents: {', '.join(seed.agents)}",
            f"  Token      {seed.token}",
            "             (admin; a fresh one is printed on every start)",
            f"  Database   {common.safe_db_url(settings.effective_database_url)}",
            f"  Redis      {where}",
            "",
            "Try it:",
            "",
            f"  curl -s {url}/graphql \\",
            f"    -H 'Authorization: Bearer {seed.token}' \\",
            "    -H 'Content-Type: application/json' \\",
            f"    -d '{query}'",
            "",
            "Watch a run's tree live (RUN_ID from startRun):",
            "",
            f"  ENVERIF_URL={url}/graphql ENVERIF_TOKEN={seed.token} \\",
            "    enverif runs watch RUN_ID",
            "",
            "Press Ctrl-C to stop (API, worker and the embedded Redis it started). --verbose logs more.",
            "",
        ]
    )


def _run_stack(run: Callable[[], Coroutine[Any, Any, None]], *, fast_loop: bool = False) -> None:
    """``fast_loop``: run on uvloop where it is installed (the API's request path and a
    worker's hot path spend a measurable share of their CPU in the event loop); the
    standard loop otherwise."""
    from app.dev.stack import StackError

    try:
        with asyncio.Runner(loop_factory=_fast_loop_factory() if fast_loop else None) as runner:
            runner.run(run())
    except StackError as exc:
        raise CliError(str(exc)) from None


def _fast_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # not built for this platform (Windows): the standard loop does
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "dev", "API + worker + demo workspace on embedded SQLite and Redis")
    _add_listen_args(p)
    p.add_argument(
        "--reset", action="store_true", help="delete the demo workspace and everything in it first"
    )
    p.add_argument(
        "--verbose", action="store_true", help="log everything at INFO (requests, jobs); default: warnings"
    )
    p.set_defaults(handler=cmd_dev)

    p = common.add_command(commands, "serve", "run the API server (uvicorn)")
    _add_listen_args(p)
    p.set_defaults(handler=cmd_serve)

    p = common.add_command(commands, "worker", "run a worker (arq): executes runs, fires schedules")
    p.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    p.add_argument(
        "--check",
        action="store_true",
        help="do not run a worker: exit 0 if a worker is alive (heartbeat in Redis), 1 if not",
    )
    p.add_argument("--this-host", action="store_true", help="with --check: only count this host's workers")
    p.set_defaults(handler=cmd_worker)


def _add_listen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to listen on (default: ENVERIF_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default: ENVERIF_PORT or 8000; 0 picks one)")
