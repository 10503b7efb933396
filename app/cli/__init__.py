"""The ``enverif`` command: the parser and ``main`` (the console script ``enverif``).

    enverif dev [--host H] [--port P] [--reset] [--verbose]   API + worker + demo workspace
    enverif serve [--host H] [--port P]             the API (uvicorn)
    enverif worker [--burst]                        an arq worker
    enverif worker --check [--this-host]            exit 0 when a worker is alive (supervisors)
    enverif migrate [--revision REV | --downgrade REV]
    enverif workspace create NAME [--json]          prints the workspace's first admin token
    enverif token create | list | revoke --workspace NAME ...
    enverif schedules tick [--json] | list --workspace NAME [--json]
    enverif runs start | list | show | cancel --workspace NAME ...
    enverif mcp list | add | sync | remove --workspace NAME ...
    enverif runs watch RUN_ID [--after-seq N] [--json] [--url URL] [--token T]   the live tree

One module per command group (``processes``: dev, serve, worker; ``migrate``; ``workspace``;
``tokens``; ``mcp``; ``schedules``; ``runs``, with ``watch/`` for the live tree), each adding its
parsers; what they share is in ``common``. Expected failures (a name taken, a workspace
unknown, a bad setting, a database or Redis that does not answer) print one line
``enverif: error: ...`` on stderr and exit 2; no traceback. Output meant for scripts
(``--json``) is exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from typing import NoReturn

from app.cli import audit, common, mcp, migrate, processes, runs, schedules, tokens, workspace
from app.cli.common import EXIT_USAGE, CliError
from app.domain.errors import EnverifError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enverif",
        description="Enverif: a GraphQL API server for running LLM agents durably.",
        formatter_class=common.HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    processes.add_parser(commands)
    migrate.add_parser(commands)
    workspace.add_parser(commands)
    tokens.add_parser(commands)
    mcp.add_parser(commands)
    runs.add_deprecated_parser(commands)
    schedules.add_parser(commands)
    runs.add_parser(commands)
    audit.add_parser(commands)
    return parser


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
