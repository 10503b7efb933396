"""``enverif audit list | verify | prune --workspace W``: the audit trail from the command
line (docs/concepts/audit.md), read straight from the database like ``token`` and
``schedules``. Each seals the workspace's pending events first.

``verify`` walks the workspace's hash chain from its first event and exits 1, naming the
first broken seq, when an event was edited or removed; 0 when the chain holds. ``prune
--before DATE`` removes the oldest events and records a checkpoint that ``verify`` starts from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from app.cli import common
from app.cli.common import CliError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

    from app.db.orm import AuditEvent

EXIT_BROKEN = 1
MAX_LIMIT = 1_000
T = TypeVar("T")


def _on_sealed_chain(
    args: argparse.Namespace, use: Callable[[async_sessionmaker[AsyncSession], int], Awaitable[T]]
) -> T:
    """Seal the named workspace's pending events, then ``use(sessions, workspace_id)``."""
    from app.db.session import create_sessionmaker
    from app.services import audit

    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> T:
        sessions = create_sessionmaker(engine)
        async with sessions() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
        await audit.seal(sessions, workspace_id=workspace_id)
        return await use(sessions, workspace_id)

    return asyncio.run(common.with_engine(settings, run))


def cmd_list(args: argparse.Namespace) -> int:
    from app.services import audit
    from app.services.reads import PageRequest

    if not 1 <= args.limit <= MAX_LIMIT:
        raise CliError(f"--limit must be between 1 and {MAX_LIMIT}, not {args.limit}")
    limit = args.limit

    async def listed(sessions: async_sessionmaker[AsyncSession], workspace_id: int) -> list[dict[str, Any]]:
        async with sessions() as session:
            page = await audit.list_events(
                session, workspace_id=workspace_id, filter=audit.AuditFilter(action=args.action),
                page=PageRequest(limit=limit, after_id=None),
            )  # fmt: skip
        return [_describe(e) for e in page.rows]

    events = _on_sealed_chain(args, listed)
    if args.json:
        print(json.dumps({"workspace": args.workspace, "events": events}))
        return 0
    columns = ("seq", "at", "actor", "action", "object", "summary")
    common.print_rows(columns, events, empty=f"Workspace {args.workspace!r} has no audit events.")
    return 0


def _describe(event: AuditEvent) -> dict[str, Any]:
    from app.graphql.ids import to_global_id

    actor = event.actor_kind + (f":{event.actor_name}" if event.actor_name else "")
    return {
        "seq": event.seq,
        "at": common.iso(event.at),
        "actor": actor,
        "action": event.action,
        "object": None if event.object_id is None else to_global_id(event.object_type, event.object_id),
        "summary": event.summary,
        "diff": event.diff,
        "hash": event.hash,
    }


def cmd_verify(args: argparse.Namespace) -> int:
    from app.services import audit

    async def verified_chain(sessions: async_sessionmaker[AsyncSession], workspace_id: int) -> audit.Verified:
        async with sessions() as session:
            return await audit.verify(session, workspace_id=workspace_id)

    verified = _on_sealed_chain(args, verified_chain)
    broken = verified.broken
    if args.json:
        print(json.dumps({
            "workspace": args.workspace, "ok": broken is None, "events": verified.events,
            "broken_seq": None if broken is None else broken.seq, "why": None if broken is None else broken.why,
        }))  # fmt: skip
    elif broken is None:
        print(f"The audit chain of {args.workspace!r} holds ({verified.events} events).")
    else:
        print(f"The audit chain of {args.workspace!r} is broken at seq {broken.seq}: {broken.why}.")
    return 0 if broken is None else EXIT_BROKEN


def parse_before(text: str) -> datetime:
    """``--before``: an ISO date (midnight UTC) or date and time (UTC unless it says)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or date and time: {text!r}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def cmd_prune(args: argparse.Namespace) -> int:
    from app.services import audit

    async def pruned_chain(sessions: async_sessionmaker[AsyncSession], workspace_id: int) -> audit.Pruned:
        return await audit.prune(
            sessions, workspace_id=workspace_id, before=args.before, actor=common.cli_actor()
        )

    pruned = _on_sealed_chain(args, pruned_chain)
    if args.json:
        print(
            json.dumps(
                {"workspace": args.workspace, "pruned": pruned.events, "through_seq": pruned.through_seq}
            )
        )
    elif pruned.events:
        print(f"Pruned {pruned.events} audit events of {args.workspace!r} up to seq {pruned.through_seq}.")
    else:
        print(f"Workspace {args.workspace!r} has no audit events older than {args.before.isoformat()}.")
    return 0


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "audit", "the audit trail: who changed what")
    sub = p.add_subparsers(dest="action_name", metavar="ACTION", required=True)
    c = common.add_command(sub, "list", "list a workspace's audit events, newest first")
    common.add_workspace(c)
    c.add_argument("--action", help="only events of this action, e.g. agent.update (default: all)")
    c.add_argument("--limit", type=int, default=50, metavar="N", help=f"at most N events (1-{MAX_LIMIT})")
    common.add_json(c, '{"workspace", "events": [...]}')
    c.set_defaults(handler=cmd_list)
    c = common.add_command(sub, "verify", "check the workspace's hash chain; exit 1 at the first break")
    common.add_workspace(c)
    common.add_json(c, '{"workspace", "ok", "events", "broken_seq", "why"}')
    c.set_defaults(handler=cmd_verify)
    c = common.add_command(sub, "prune", "remove events older than a date; verify goes on from a checkpoint")
    common.add_workspace(c)
    c.add_argument("--before", required=True, type=parse_before, metavar="DATE",
                   help="remove the oldest events, those before DATE (ISO, e.g. 2026-06-01; UTC)")  # fmt: skip
    common.add_json(c, '{"workspace", "pruned", "through_seq"}')
    c.set_defaults(handler=cmd_prune)
