"""``enverif migrate``: the database schema, upgraded (or downgraded) with alembic.

The one command that creates a SQLite database (and the folders it sits in, ``ENVERIF_HOME``
for the embedded one). When it fails, what it created goes again: an empty database left
behind would look to every later command like a broken one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic.util.exc import CommandError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cli import common
from app.cli.common import CliError
from app.db import migrate


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = common.settings()

    async def run(engine: AsyncEngine) -> str | None:
        if args.downgrade:
            if await common.current_revision(engine) in common.head_revisions():
                # Before 'e2c7a9f4b1d3' every audit event is chained: seal what is pending,
                # so the downgrade keeps them all (docs/concepts/audit.md).
                from app.db.session import create_sessionmaker
                from app.services import audit

                while await audit.seal_pending(create_sessionmaker(engine)):
                    pass
            await migrate.downgrade(engine, args.downgrade)
        else:
            await migrate.upgrade(engine, args.revision)
        return await common.current_revision(engine)

    with _undone_on_failure(common.missing_sqlite_file(settings.effective_database_url)):
        try:
            current = asyncio.run(common.with_engine(settings, run, check=False))
        except CommandError as exc:  # e.g. an unknown revision
            raise CliError(f"migration failed: {exc}") from None
    url = common.safe_db_url(settings.effective_database_url)
    print(f"database {url} is at revision {current or 'base (no tables)'}")
    return 0


@contextlib.contextmanager
def _undone_on_failure(new_file: Path | None) -> Iterator[None]:
    """On failure, remove ``new_file`` (a SQLite database this command is about to create),
    its journals, and the folders above it that did not exist before."""
    if new_file is None:
        yield
        return
    new_dirs = [d for d in new_file.parents if not d.exists()]
    try:
        yield
    except BaseException:
        if new_dirs:
            shutil.rmtree(new_dirs[-1], ignore_errors=True)
        else:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{new_file}{suffix}").unlink(missing_ok=True)
        raise


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "migrate", "migrate the database schema (alembic)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--revision", default="head", help="upgrade to this revision")
    target.add_argument(
        "--downgrade",
        metavar="REVISION",
        help="downgrade to REVISION instead ('base' drops every table; default: upgrade to --revision)",
    )
    p.set_defaults(handler=cmd_migrate)
