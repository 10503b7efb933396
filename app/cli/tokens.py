"""``enverif token create | list | revoke``: a workspace's API tokens, from the command line.

Secrets are printed once, at creation, and never again (``list`` shows everything else).
A revocation is announced to running API processes at once (``app.services.token_cache``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.cli import common
from app.cli.common import CliError
from app.db.session import create_sessionmaker
from app.graphql.ids import to_global_id
from app.settings import Settings


def cmd_create(args: argparse.Namespace) -> int:
    from app.services import auth

    role = auth.parse_role(args.role)
    expires_at = _parse_expiry(args.expires_at)
    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> auth.IssuedToken:
        async with create_sessionmaker(engine)() as session:
            return await auth.issue_token(
                session, workspace_name=args.workspace, role=role, name=args.name, expires_at=expires_at,
                actor=common.cli_actor(),
            )  # fmt: skip

    issued: auth.IssuedToken = asyncio.run(common.with_engine(settings, run))
    if args.json:
        described = _describe_token(issued.row)
        print(json.dumps({"token": issued.secret, "workspace": args.workspace, **described}))
    else:
        until = f", expires {common.iso(issued.row.expires_at)}" if issued.row.expires_at else ""
        print(
            f"Created {role.value} token {issued.row.name!r} for workspace {args.workspace!r}{until}, "
            "shown only this once:"
        )
        print(issued.secret)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from app.services import auth

    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> list[dict[str, Any]]:
        async with create_sessionmaker(engine)() as session:
            rows = await auth.workspace_tokens(session, workspace_name=args.workspace)
            return [_describe_token(row) for row in rows]

    tokens: list[dict[str, Any]] = asyncio.run(common.with_engine(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, "tokens": tokens}))
        return 0
    columns = ("id", "name", "role", "state", "created_at", "expires_at", "last_used_at")
    common.print_rows(columns, tokens, empty=f"Workspace {args.workspace!r} has no tokens.")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from app.graphql.ids import parse_global_id
    from app.services import auth

    token_id: int | None = None
    if args.id is not None:
        parsed = parse_global_id(args.id)
        if parsed is None or parsed[0] != "ApiToken":
            raise CliError(f"no token with id {args.id!r} in workspace {args.workspace!r}")
        token_id = parsed[1]
    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> dict[str, Any]:
        async with create_sessionmaker(engine)() as session:
            row = await auth.revoke_token(
                session, workspace_name=args.workspace, token_id=token_id, name=args.name,
                actor=common.cli_actor(),
            )  # fmt: skip
        await _announce_revocation(settings, row.id)
        return _describe_token(row)

    token: dict[str, Any] = asyncio.run(common.with_engine(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, **token}))
    else:
        print(f"Revoked token {token['name']!r} ({token['id']}) of workspace {args.workspace!r}.")
    return 0


async def _announce_revocation(settings: Settings, token_id: int) -> None:
    """Running API processes drop the token from their caches now (app.services.token_cache)."""
    import redis.asyncio as aioredis

    from app.services.token_cache import publish_revocation

    client: aioredis.Redis = aioredis.Redis.from_url(settings.effective_redis_url, socket_connect_timeout=5)
    try:
        await publish_revocation(client, settings, token_id)
    finally:
        await client.aclose()


def _parse_expiry(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"--expires-at is not an ISO 8601 date and time: {value!r}") from None
    if parsed.tzinfo is None:
        raise CliError(f"--expires-at needs a timezone, e.g. {value}Z or {value}+02:00")
    return parsed


def _describe_token(row: Any) -> dict[str, Any]:
    """A token for display: everything but its secret (and the secret's prefix)."""
    from app.clock import utcnow
    from app.domain.tokens import token_state

    return {
        "id": to_global_id("ApiToken", row.id),
        "name": row.name,
        "role": row.role,
        "state": token_state(revoked_at=row.revoked_at, expires_at=row.expires_at, now=utcnow()).value,
        "created_at": common.iso(row.created_at),
        "expires_at": common.iso(row.expires_at),
        "last_used_at": common.iso(row.last_used_at),
        "revoked_at": common.iso(row.revoked_at),
    }


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "token", "manage API tokens")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = common.add_command(sub, "create", "create an API token for a workspace")
    common.add_workspace(c)
    c.add_argument("--role", required=True, metavar="ROLE", help="viewer, operator or admin")
    c.add_argument("--name", help="unique in the workspace (default: generated, e.g. viewer-1a2b3c4d)")
    c.add_argument(
        "--expires-at",
        metavar="ISO",
        help="when it stops working, with a timezone, e.g. 2027-01-31T00:00:00Z (default: never)",
    )
    common.add_json(c, '{"token", "workspace", "id", "name", "role", ...}')
    c.set_defaults(handler=cmd_create)
    c = common.add_command(sub, "list", "list a workspace's tokens (never their secrets)")
    common.add_workspace(c)
    common.add_json(c, '{"workspace", "tokens": [...]}')
    c.set_defaults(handler=cmd_list)
    c = common.add_command(sub, "revoke", "revoke a token: it stops working everywhere within seconds")
    common.add_workspace(c)
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", metavar="ID", help="the token's id, as `token list` shows it")
    which.add_argument("--name", metavar="NAME", help="the token's name")
    common.add_json(c, "the revoked token")
    c.set_defaults(handler=cmd_revoke)
