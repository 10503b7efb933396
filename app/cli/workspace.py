"""``enverif workspace create NAME``: a new tenant and its first admin token (shown once)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.cli import common
from app.db.session import create_sessionmaker
from app.graphql.ids import to_global_id


def cmd_create(args: argparse.Namespace) -> int:
    from app.services import auth

    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> tuple[int, str]:
        async with create_sessionmaker(engine)() as session:
            workspace, token = await auth.create_workspace(session, name=args.name, actor=common.cli_actor())
        return workspace.id, token

    workspace_id, token = asyncio.run(common.with_engine(settings, run))
    global_id = to_global_id("Workspace", workspace_id)
    if args.json:
        print(json.dumps({"workspace_id": global_id, "token": token}))
    else:
        print(f"Created workspace {args.name!r} (id {global_id}).")
        print("Its admin token, shown only this once:")
        print(token)
    return 0


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "workspace", "manage workspaces")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = common.add_command(sub, "create", "create a workspace and print its first admin token")
    c.add_argument("name", metavar="NAME", help="unique; 1-100 letters, digits, '_', '.' and '-'")
    common.add_json(c, '{"workspace_id", "token"}')
    c.set_defaults(handler=cmd_create)
