"""The ``enverif`` command.

    enverif dev [--host H] [--port P] [--reset] [--verbose]   API + worker + demo workspace
    enverif serve [--host H] [--port P]             the API (uvicorn)
    enverif worker [--burst]                        an arq worker
    enverif worker --check [--this-host]            exit 0 when a worker is alive (supervisors)
    enverif run start --workspace W --agent A [--input JSON] [--json]   start a run (MANUAL)
    enverif runs watch RUN_ID [--after-seq N] [--json] [--url URL] [--token T]   the live tree
    enverif migrate [--revision REV | --downgrade REV]
    enverif workspace create NAME [--json]          prints the workspace's first admin token
    enverif token create --workspace NAME --role viewer|operator|admin [--name NAME]
                         [--expires-at ISO] [--json]
    enverif token list --workspace NAME [--json]    never prints a token's secret
    enverif token revoke --workspace NAME (--id ID | --name NAME) [--json]
    enverif schedules tick [--json]                 fire the schedules that are due now
    enverif schedules list --workspace NAME [--json]

Expected failures (a name taken, a workspace unknown, a bad setting, a database or Redis that
does not answer) print one line ``enverif: error: ...`` on stderr and exit 2; no traceback.
Output meant for scripts (``--json``) is exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from importlib import metadata
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import migrate
from app.db.session import create_engine, create_sessionmaker
from app.domain.errors import EnverifError
from app.graphql.ids import to_global_id
from app.settings import Settings, load_settings

EXIT_USAGE = 2  # expected failures share argparse's exit code for a bad command line
EXIT_FAILED = 1  # something broke that we did not foresee (logged with its traceback)


class CliError(Exception):
    """An expected failure: its message is the whole story for the operator."""


# -- settings, database and Redis, with failures turned into one-line messages -------------


def _settings(*, log: bool = True, **overrides: Any) -> Settings:
    """Load settings; ``log`` turns on logging at ``ENVERIF_LOG_LEVEL`` (else warnings only)."""
    try:
        settings = load_settings(**overrides)
    except ValidationError as exc:
        raise CliError(_describe_settings_error(exc)) from None
    logging.basicConfig(
        level=settings.log_level.upper() if log else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return settings


def _listen_address(args: argparse.Namespace, settings: Settings) -> tuple[str, int]:
    host = args.host if args.host is not None else settings.host
    port = args.port if args.port is not None else settings.port
    if not 0 <= port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, not {port}")
    return host, port


def _describe_settings_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = err.get("loc") or ()
        if loc:
            name = f"ENVERIF_{str(loc[0]).upper()}"
            # Never echo URLs back: they may carry a password.
            got = "" if "url" in name.lower() else f" (got {err.get('input')!r})"
            msg = msg if msg.startswith(name) else f"{name}: {msg}{got}"
        parts.append(msg)
    return "invalid setting: " + "; ".join(parts)


def _safe_db_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except SQLAlchemyError:
        return "<unparseable database URL>"


def _safe_redis_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip() or type(orig).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def _database_errors(url: str) -> Iterator[None]:
    try:
        yield
    except DBAPIError as exc:
        text = _first_line(exc)
        if "no such table" in text or "doesn't exist" in text:
            raise CliError(
                f"the database {_safe_db_url(url)} has no Enverif tables; run `enverif migrate`"
            ) from None
        raise CliError(f"cannot use the database {_safe_db_url(url)}: {text}") from None
    except (OSError, SQLAlchemyError) as exc:
        raise CliError(f"cannot use the database {_safe_db_url(url)}: {_first_line(exc)}") from None


async def _current_revision(engine: AsyncEngine) -> str | None:
    # alembic announces its dialect at INFO on every look; only migrations are news.
    alembic_log = logging.getLogger("alembic.runtime.migration")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        alembic_log.setLevel(level)


def _head_revisions() -> tuple[str, ...]:
    return tuple(ScriptDirectory.from_config(migrate.alembic_config()).get_heads())


async def _check_database(engine: AsyncEngine, url: str) -> None:
    """The database answers and is migrated to the head revision."""
    with _database_errors(url):
        current = await _current_revision(engine)
    if current is None:
        raise CliError(f"the database {_safe_db_url(url)} has no Enverif tables; run `enverif migrate`")
    heads = _head_revisions()
    if current not in heads:
        raise CliError(
            f"the database {_safe_db_url(url)} is at revision {current}, not the latest "
            f"({', '.join(heads)}); run `enverif migrate`"
        )


async def _check_redis(settings: Settings) -> None:
    from redis import RedisError
    from redis.asyncio import Redis

    from app.dev.embedded import ensure_embedded_redis

    if settings.uses_embedded_redis:
        try:
            ensure_embedded_redis(settings)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            raise CliError(
                f"cannot start the embedded Redis under {settings.home.resolve()}: {exc}"
            ) from None
    client = Redis.from_url(settings.effective_redis_url, socket_connect_timeout=5)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        raise CliError(
            f"cannot reach Redis at {_safe_redis_url(settings.effective_redis_url)}: {exc}"
        ) from None
    finally:
        await client.aclose()


async def _with_engine(settings: Settings, fn: Callable[[AsyncEngine], Any], *, check: bool = True) -> Any:
    url = settings.effective_database_url
    engine = create_engine(url)
    try:
        if check:
            await _check_database(engine, url)
        with _database_errors(url):
            return await fn(engine)
    finally:
        await engine.dispose()


# -- commands ------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _settings()

    async def run(engine: AsyncEngine) -> str | None:
        if args.downgrade:
            await migrate.downgrade(engine, args.downgrade)
        else:
            await migrate.upgrade(engine, args.revision)
        return await _current_revision(engine)

    try:
        current = asyncio.run(_with_engine(settings, run, check=False))
    except CommandError as exc:  # e.g. an unknown revision
        raise CliError(f"migration failed: {exc}") from None
    url = _safe_db_url(settings.effective_database_url)
    print(f"database {url} is at revision {current or 'base (no tables)'}")
    return 0


def cmd_workspace_create(args: argparse.Namespace) -> int:
    from app.services import auth

    settings = _settings(log=False)

    async def run(engine: AsyncEngine) -> tuple[int, str]:
        async with create_sessionmaker(engine)() as session:
            workspace, token = await auth.create_workspace(session, name=args.name)
        return workspace.id, token

    workspace_id, token = asyncio.run(_with_engine(settings, run))
    global_id = to_global_id("Workspace", workspace_id)
    if args.json:
        print(json.dumps({"workspace_id": global_id, "token": token}))
    else:
        print(f"Created workspace {args.name!r} (id {global_id}).")
        print("Its admin token, shown only this once:")
        print(token)
    return 0


def print_table(columns: tuple[str, ...], rows: list[list[str]]) -> None:
    """A header and rows, each column padded to its widest cell."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    for cells in [list(columns), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip())


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def cmd_run_start(args: argparse.Namespace) -> int:
    """Start a run by hand (trigger MANUAL): the workspace's admin acting from the machine."""
    from sqlalchemy import select

    from app.db.orm import Agent, Workspace
    from app.domain.agents import Role
    from app.domain.runs import RunTrigger
    from app.services import runs
    from app.services.auth import Principal
    from app.services.runtime import open_runtime

    try:
        run_input = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    settings = _settings(log=False)

    async def run() -> tuple[int, str]:
        await _preflight(settings)
        rt = await open_runtime(settings)
        try:
            with _database_errors(settings.effective_database_url):
                async with rt.sessionmaker() as session:
                    row = (
                        await session.execute(
                            select(Workspace.id, Agent.id)
                            .join(Agent, Agent.workspace_id == Workspace.id)
                            .where(Workspace.name == args.workspace, Agent.name == args.agent)
                        )
                    ).first()
                if row is None:
                    raise CliError(f"no agent named {args.agent!r} in workspace {args.workspace!r}")
                principal = Principal(workspace_id=row[0], role=Role.ADMIN, token_id=0)
                started = await runs.start_run(
                    rt, principal, agent_id=row[1], input=run_input, trigger=RunTrigger.MANUAL
                )
            return started.id, started.status
        finally:
            await rt.close()

    run_id, status = asyncio.run(run())
    global_id = to_global_id("Run", run_id)
    if args.json:
        print(json.dumps({"run_id": global_id, "status": status}))
    else:
        print(f"Started run {global_id} of agent {args.agent!r} ({status}).")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from app.dev import stack as dev

    settings = _settings()
    host, port = _listen_address(args, settings)

    async def run() -> None:
        await _preflight(settings)
        sock = dev.bind_socket(host, port)
        url = dev.base_url(sock)
        await dev.run_stack(
            settings, sock, worker=None, on_ready=lambda: print(f"Enverif API at {url}/graphql", flush=True)
        )

    _run_stack(run, fast_loop=True)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.main import run_worker

    if args.check:
        return _check_workers(_settings(log=False), this_host=args.this_host)
    settings = _settings()

    async def run() -> None:
        from app.dev import stack as dev

        if args.burst:
            await _preflight(settings)  # a one-shot run fails fast: a script awaits its answer
        else:
            await _preflight_when_reachable(settings)
        await dev.run_stack(settings, None, worker=lambda: run_worker(settings, burst=args.burst))

    _run_stack(run, fast_loop=True)
    return 0


async def _preflight_when_reachable(settings: Settings) -> None:
    """The preflight check, for a worker that may start before its database or Redis does (a
    host booting, a restart): while either does not answer it waits (with backoff) instead of
    exiting. Anything else (a database that is not migrated, a bad URL) is still an error."""
    from workers.main import Backoff

    backoff = Backoff()
    warned = False
    while True:
        outage = await _unreachable(settings)
        if outage is None:
            try:
                await _preflight(settings)
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
    import os

    from app.dev import stack as dev
    from app.dev.embedded import embedded_redis_running, stop_embedded_redis

    # Quiet by default: the banner is the last thing printed at start-up and stays on screen
    # (no access log, no per-job lines); warnings and errors still show. --verbose or
    # ENVERIF_LOG_LEVEL show everything.
    quiet: dict[str, Any] = (
        {} if args.verbose or "ENVERIF_LOG_LEVEL" in os.environ else {"log_level": "warning"}
    )
    settings = _settings(dev_mode=True, graphiql=True, http_allow_private_networks=True, **quiet)
    host, port = _listen_address(args, settings)
    # The embedded Redis daemonizes; the one this command starts is stopped when it stops.
    owns_redis = settings.uses_embedded_redis and not embedded_redis_running(settings)

    async def run() -> None:
        from workers.main import run_worker

        sock = dev.bind_socket(host, port)
        url = dev.base_url(sock)
        await _check_redis(settings)
        db_url = settings.effective_database_url
        engine = create_engine(db_url)
        try:
            with _database_errors(db_url):
                await migrate.upgrade(engine)
                seed = await dev.seed_demo(create_sessionmaker(engine), base_url=url, reset=args.reset)
        finally:
            await engine.dispose()
        await dev.run_stack(
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


def cmd_runs_watch(args: argparse.Namespace) -> int:
    import os

    from app.cli.watch.client import WatchError, watch

    token = args.token or os.environ.get("ENVERIF_TOKEN")
    if not token:
        raise CliError("no token: pass --token TOKEN or set ENVERIF_TOKEN (a viewer token is enough)")
    if args.after_seq < 0:
        raise CliError(f"--after-seq must be 0 or more, not {args.after_seq}")
    try:
        return asyncio.run(
            watch(url=args.url, token=token, run_id=args.run_id, after_seq=args.after_seq, as_json=args.json)
        )
    except WatchError as exc:
        raise CliError(str(exc)) from None


def _dev_banner(url: str, seed: Any, settings: Settings) -> str:
    query = json.dumps({"query": "{ agents(first: 10) { edges { node { id name status } } } }"})
    where = "embedded" if settings.uses_embedded_redis else _safe_redis_url(settings.effective_redis_url)
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
            f"  Database   {_safe_db_url(settings.effective_database_url)}",
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
            f"  ENVERIF_TOKEN={seed.token} \\",
            f"    enverif runs watch RUN_ID --url {url}/graphql",
            "",
            "Press Ctrl-C to stop (API, worker and the embedded Redis it started). --verbose logs more.",
            "",
        ]
    )


async def _preflight(settings: Settings) -> None:
    await _with_engine(settings, lambda engine: asyncio.sleep(0))
    await _check_redis(settings)


def _run_stack(run: Callable[[], Any], *, fast_loop: bool = False) -> None:
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


# -- argument parsing ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enverif", description="Enverif: a GraphQL API server for running LLM agents durably."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = commands.add_parser("dev", help="API + worker + demo workspace on embedded SQLite and Redis")
    _add_listen_args(p)
    p.add_argument(
        "--reset", action="store_true", help="delete the demo workspace and everything in it first"
    )
    p.add_argument(
        "--verbose", action="store_true", help="log everything at INFO (requests, jobs); default: warnings"
    )
    p.set_defaults(handler=cmd_dev)

    p = commands.add_parser("serve", help="run the API server (uvicorn)")
    _add_listen_args(p)
    p.set_defaults(handler=cmd_serve)

    p = commands.add_parser("worker", help="run a worker (arq): executes runs, fires schedules")
    p.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    p.add_argument(
        "--check",
        action="store_true",
        help="do not run a worker: exit 0 if a worker is alive (heartbeat in Redis), 1 if not",
    )
    p.add_argument("--this-host", action="store_true", help="with --check: only count this host's workers")
    p.set_defaults(handler=cmd_worker)

    p = commands.add_parser("migrate", help="migrate the database schema (alembic)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--revision", default="head", help="upgrade to this revision (default: head)")
    target.add_argument(
        "--downgrade", metavar="REVISION", help="downgrade to REVISION ('base' drops everything)"
    )
    p.set_defaults(handler=cmd_migrate)

    p = commands.add_parser("workspace", help="manage workspaces")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a workspace and print its first admin token")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--json", action="store_true", help='print {"workspace_id", "token"} as JSON')
    c.set_defaults(handler=cmd_workspace_create)

    from app.cli import schedules as cli_schedules
    from app.cli import tokens as cli_tokens

    cli_tokens.add_parser(commands)

    p = commands.add_parser("run", help="runs")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("start", help="start a run of an agent (trigger MANUAL); a worker executes it")
    c.add_argument("--workspace", required=True, metavar="NAME")
    c.add_argument("--agent", required=True, metavar="NAME")
    c.add_argument("--input", metavar="JSON", help="the run input, as JSON")
    c.add_argument("--json", action="store_true", help='print {"run_id", "status"} as JSON')
    c.set_defaults(handler=cmd_run_start)

    cli_schedules.add_parser(commands)

    p = commands.add_parser("runs", help="watch runs through the API")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("watch", help="draw a run tree live until its root ends (runTree subscription)")
    c.add_argument("run_id", metavar="RUN_ID", help="any run of the tree: its GraphQL id (or database id)")
    c.add_argument("--after-seq", type=int, default=0, metavar="N", help="only events after seq N")
    c.add_argument("--json", action="store_true", help="print each event as one JSON object per line")
    c.add_argument("--url", default="http://127.0.0.1:8000/graphql", help="the API's /graphql URL")
    c.add_argument("--token", help="an API token (default: ENVERIF_TOKEN); viewer is enough")
    c.set_defaults(handler=cmd_runs_watch)
    return parser


def _add_listen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to listen on (default: ENVERIF_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default: ENVERIF_PORT or 8000; 0 picks one)")


def _version() -> str:
    try:
        return metadata.version("enverif")
    except metadata.PackageNotFoundError:
        return "unknown"


def _fail(message: str) -> NoReturn:
    print(f"enverif: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except CliError as exc:
        _fail(str(exc))
    except EnverifError as exc:  # a service refused: name taken, workspace unknown, bad role
        _fail(exc.message)
    except KeyboardInterrupt:
        return 130
    return code
