"""What every ``enverif`` command shares: its failures, its settings, the database and Redis
with their failures turned into one line each, and the shapes of its output.

Expected failures raise ``CliError`` (or a service's ``EnverifError``); ``app.cli.main``
prints them as ``enverif: error: ...`` on stderr and exits ``EXIT_USAGE``, argparse's code
for a bad command line, so a script tells "you asked for something that cannot be" (2) from
"something broke" (1, with a traceback) without parsing text.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.db import migrate
from app.db.session import create_engine
from app.settings import ClientSettings, Settings, load_client_settings, load_settings

if TYPE_CHECKING:
    from app.domain.actors import Actor
    from app.services.auth import Principal
    from app.services.runtime import Runtime

EXIT_USAGE = 2  # expected failures share argparse's exit code for a bad command line

T = TypeVar("T")


def machine_admin(workspace_id: int) -> Principal:
    """Who a command acts as: whoever can read the database holds every key anyway. Its
    changes are recorded as the CLI, named by the operating-system user who ran it."""
    from app.domain.actors import ActorKind
    from app.domain.agents import Role
    from app.services.auth import Principal

    return Principal(
        workspace_id=workspace_id, role=Role.ADMIN, token_id=0, actor_kind=ActorKind.CLI,
        actor_name=cli_actor().name,
    )  # fmt: skip


class CliError(Exception):
    """An expected failure: its message is the whole story for the operator."""


# -- the parser's conventions ----------------------------------------------------------------


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default, unless the help already names it (a
    default that comes from a setting is written out: "default: ENVERIF_PORT or 8000").
    Flags and options without a default say nothing more."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        if (
            action.option_strings
            and action.nargs != 0
            and action.default not in (None, argparse.SUPPRESS)
            and "default" not in help_text
        ):
            help_text += " (default: %(default)s)"
        return help_text


def add_command(commands: Any, name: str, help_text: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` starts with the line the command list shows for it."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=kwargs.pop("description", help_text), formatter_class=HelpFormatter,
        **kwargs,
    )  # fmt: skip
    return parser


def add_workspace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, metavar="NAME", help="the workspace, by name")


def add_json(parser: argparse.ArgumentParser, shape: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {shape} as JSON (one object on stdout)")


# -- settings ------------------------------------------------------------------------------


def settings(*, log: bool = True, **overrides: Any) -> Settings:
    """Load settings; ``log`` turns on logging at ``ENVERIF_LOG_LEVEL`` (else warnings only)."""
    try:
        loaded = load_settings(**overrides)
    except ValidationError as exc:
        raise CliError(describe_settings_error(exc)) from None
    logging.basicConfig(
        level=loaded.log_level.upper() if log else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return loaded


def client_settings() -> ClientSettings:
    """``ENVERIF_URL`` and ``ENVERIF_TOKEN``: how the API's clients (``runs watch``) reach it."""
    try:
        return load_client_settings()
    except ValidationError as exc:
        raise CliError(describe_settings_error(exc)) from None


def describe_settings_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = err.get("loc") or ()
        if loc:
            name = f"ENVERIF_{str(loc[0]).upper()}"
            # Never echo URLs or tokens back: they may carry a password.
            secret = "url" in name.lower() or "token" in name.lower()
            got = "" if secret else f" (got {err.get('input')!r})"
            msg = msg if msg.startswith(name) else f"{name}: {msg}{got}"
        parts.append(msg)
    return "invalid setting: " + "; ".join(parts)


def listen_address(args: argparse.Namespace, loaded: Settings) -> tuple[str, int]:
    host = args.host if args.host is not None else loaded.host
    port = args.port if args.port is not None else loaded.port
    if not 0 <= port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, not {port}")
    return host, port


def safe_db_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except SQLAlchemyError:
        return "<unparseable database URL>"


def safe_redis_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# -- the database --------------------------------------------------------------------------


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip() or type(orig).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def database_errors(url: str) -> Iterator[None]:
    try:
        yield
    except DBAPIError as exc:
        text = first_line(exc)
        if "no such table" in text or "doesn't exist" in text:
            raise CliError(
                f"the database {safe_db_url(url)} has no Enverif tables; run `enverif migrate`"
            ) from None
        raise CliError(f"cannot use the database {safe_db_url(url)}: {text}") from None
    except (OSError, SQLAlchemyError) as exc:
        raise CliError(f"cannot use the database {safe_db_url(url)}: {first_line(exc)}") from None


def missing_sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL that does not exist yet (opening it would create it)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    path = Path(parsed.database)
    return None if path.exists() else path


def require_database_file(url: str) -> None:
    """A command that only uses an existing database refuses before creating an empty one
    (and the folder it would sit in): a mistyped ``ENVERIF_HOME`` or a first command before
    ``enverif migrate`` leaves nothing behind."""
    if (path := missing_sqlite_file(url)) is not None:
        raise CliError(f"there is no database at {path}; run `enverif migrate` to create it")


async def current_revision(engine: AsyncEngine) -> str | None:
    # alembic announces its dialect at INFO on every look; only migrations are news.
    alembic_log = logging.getLogger("alembic.runtime.migration")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        alembic_log.setLevel(level)


def head_revisions() -> tuple[str, ...]:
    return tuple(ScriptDirectory.from_config(migrate.alembic_config()).get_heads())


async def check_database(engine: AsyncEngine, url: str) -> None:
    """The database answers and is migrated to the head revision."""
    with database_errors(url):
        current = await current_revision(engine)
    if current is None:
        raise CliError(f"the database {safe_db_url(url)} has no Enverif tables; run `enverif migrate`")
    heads = head_revisions()
    if current not in heads:
        raise CliError(
            f"the database {safe_db_url(url)} is at revision {current}, not the latest "
            f"({', '.join(heads)}); run `enverif migrate`"
        )


async def with_engine(
    loaded: Settings, fn: Callable[[AsyncEngine], Awaitable[T]], *, check: bool = True
) -> T:
    """``fn(engine)`` on the configured database; ``check``: it must exist and be migrated."""
    url = loaded.effective_database_url
    if check:
        require_database_file(url)
    engine = create_engine(url)
    try:
        if check:
            await check_database(engine, url)
        with database_errors(url):
            return await fn(engine)
    finally:
        await engine.dispose()


async def workspace_id(session: AsyncSession, name: str) -> int:
    """The id of the workspace named ``name``; an unknown one is named as such."""
    from app.db.orm import Workspace

    found = await session.scalar(select(Workspace.id).where(Workspace.name == name))
    if found is None:
        raise CliError(f"no workspace named {name!r}")
    return found


# -- Redis ---------------------------------------------------------------------------------


async def check_redis(loaded: Settings) -> None:
    from redis import RedisError
    from redis.asyncio import Redis

    from app.dev.embedded import ensure_embedded_redis

    if loaded.uses_embedded_redis:
        try:
            ensure_embedded_redis(loaded)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            raise CliError(f"cannot start the embedded Redis under {loaded.home.resolve()}: {exc}") from None
    client = Redis.from_url(loaded.effective_redis_url, socket_connect_timeout=5)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        raise CliError(f"cannot reach Redis at {safe_redis_url(loaded.effective_redis_url)}: {exc}") from None
    finally:
        await client.aclose()


async def preflight(loaded: Settings) -> None:
    """The database exists, answers and is migrated; Redis answers (the embedded one is
    started). Checked in that order, so a missing database creates no embedded Redis."""

    async def nothing(engine: AsyncEngine) -> None:
        return None

    await with_engine(loaded, nothing)
    await check_redis(loaded)


async def with_runtime(loaded: Settings, fn: Callable[[Runtime], Awaitable[T]], *, worker: bool = False) -> T:
    """``fn(runtime)`` after ``preflight``, for commands that act through the services (which
    publish events and enqueue jobs after commit). ``worker``: on the workers' terms
    (``open_runtime``)."""
    from app.services.runtime import open_runtime

    await preflight(loaded)
    rt = await open_runtime(loaded, worker=worker)
    try:
        with database_errors(loaded.effective_database_url):
            return await fn(rt)
    finally:
        await rt.close()


# -- output --------------------------------------------------------------------------------


def print_table(columns: tuple[str, ...], rows: list[list[str]]) -> None:
    """A header and rows, each column padded to its widest cell."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    for cells in [list(columns), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip())


def print_rows(columns: tuple[str, ...], rows: list[dict[str, Any]], *, empty: str) -> None:
    """``rows`` (as their ``--json`` shows them) as a table of ``columns``, "-" for nothing;
    ``empty`` when there are none."""
    if not rows:
        print(empty)
        return
    print_table(columns, [["-" if r[c] is None else str(r[c]) for c in columns] for r in rows])


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def cli_actor() -> Actor:
    """Who a command's changes are recorded as (docs/concepts/audit.md): the CLI, named by
    the operating-system user who ran it."""
    import getpass

    from app.domain.actors import Actor, ActorKind

    try:
        user: str | None = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        user = None
    return Actor(ActorKind.CLI, None, user)
