"""``enverif runs start | list | show | cancel | watch``: runs from the command line.

``start``, ``list``, ``show`` and ``cancel`` act like ``token`` and ``schedules``: on the
database named by ``ENVERIF_*``, in the workspace named by ``--workspace``, through the same
services as the API, as the workspace's admin acting from the machine (a shell that can read
the database needs no token). ``watch`` is a client of the API instead (``ENVERIF_URL``,
``ENVERIF_TOKEN``): the live tree comes from the API's subscription (``app.cli.watch``).

``enverif run start`` is the old spelling of ``runs start``, kept working but no longer
listed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from app.cli import common
from app.cli.common import CliError, machine_admin
from app.cli.watch.reconnect import DEFAULT_MAX_FAILURES, STABLE_S
from app.domain.runs import RunStatus, RunTrigger
from app.graphql.ids import parse_global_id, to_global_id
from app.settings import DEFAULT_API_URL

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

    from app.db import orm
    from app.services.runtime import Runtime

# The ORM and the services load only when a command runs: `enverif --help` (and `runs
# watch`, which needs neither) should not pay for importing the whole server.

DEFAULT_LIMIT = 20
MAX_LIMIT = 1_000


def run_pk(value: str) -> int:
    """A run id as the API shows it (or a plain database id) as the database id."""
    if value.isdigit():
        return int(value)
    parsed = parse_global_id(value)
    if parsed is None or parsed[0] != "Run":
        raise CliError(f"{value!r} is not a run id (the id GraphQL shows, e.g. from startRun)")
    return parsed[1]


async def _agent_id(session: AsyncSession, *, workspace_id: int, workspace: str, name: str) -> int:
    from app.db import orm

    found = await session.scalar(
        select(orm.Agent.id).where(orm.Agent.workspace_id == workspace_id, orm.Agent.name == name)
    )
    if found is None:
        raise CliError(f"no agent named {name!r} in workspace {workspace!r}")
    return found


def _gid(type_name: str, pk: int | None) -> str | None:
    return None if pk is None else to_global_id(type_name, pk)


def describe_run(run: orm.Run, agent: str) -> dict[str, Any]:
    return {
        "id": to_global_id("Run", run.id),
        "agent": agent,
        "status": run.status,
        "trigger": run.trigger,
        "parent_run_id": _gid("Run", run.parent_run_id),
        "root_run_id": _gid("Run", run.root_run_id),
        "depth": run.depth,
        "created_at": common.iso(run.created_at),
        "started_at": common.iso(run.started_at),
        "finished_at": common.iso(run.finished_at),
        "error": run.error,
    }


# -- start ---------------------------------------------------------------------------------


def cmd_start(args: argparse.Namespace) -> int:
    """Start a run by hand (trigger MANUAL)."""
    from app.services import runs

    try:
        run_input = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    settings = common.settings(log=False)

    async def start(rt: Runtime) -> orm.Run:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            agent_id = await _agent_id(
                session, workspace_id=workspace_id, workspace=args.workspace, name=args.agent
            )
        return await runs.start_run(
            rt, machine_admin(workspace_id), agent_id=agent_id, input=run_input, trigger=RunTrigger.MANUAL
        )

    started = asyncio.run(common.with_runtime(settings, start))
    return _print_outcome(args, started, f"Started run {{id}} of agent {args.agent!r} ({{status}}).")


def _print_outcome(args: argparse.Namespace, run: orm.Run, text: str) -> int:
    """What start and cancel print: ``{"run_id", "status"}`` with --json, else ``text``."""
    global_id = to_global_id("Run", run.id)
    if args.json:
        print(json.dumps({"run_id": global_id, "status": run.status}))
    else:
        print(text.format(id=global_id, status=run.status))
    return 0


# -- list and show -------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from app.db.session import create_sessionmaker
    from app.services import reads

    if not 1 <= args.limit <= MAX_LIMIT:
        raise CliError(f"--limit must be between 1 and {MAX_LIMIT}, not {args.limit}")
    statuses = [RunStatus(s) for s in args.status] if args.status else None
    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> tuple[list[dict[str, Any]], bool]:
        async with create_sessionmaker(engine)() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            agent_id = None
            if args.agent is not None:
                agent_id = await _agent_id(
                    session, workspace_id=workspace_id, workspace=args.workspace, name=args.agent
                )
            page = await reads.list_runs(
                session,
                workspace_id=workspace_id,
                page=reads.PageRequest(limit=args.limit),
                statuses=statuses,
                agent_id=agent_id,
                roots_only=args.roots_only,
            )
            names = await _agent_names(session, {r.agent_id for r in page.rows})
        return [describe_run(r, names[r.agent_id]) for r in page.rows], page.has_next

    listed, more = asyncio.run(common.with_engine(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, "runs": listed, "has_more": more}))
        return 0
    columns = ("id", "agent", "status", "trigger", "depth", "parent_run_id", "created_at", "finished_at")
    like_that = " like that" if statuses or args.agent else ""
    common.print_rows(columns, listed, empty=f"Workspace {args.workspace!r} has no runs{like_that}.")
    if more:
        print(f"(newest {len(listed)} shown; --limit shows more)")
    return 0


async def _agent_names(session: AsyncSession, ids: set[int]) -> dict[int, str]:
    from app.db import orm

    if not ids:
        return {}
    rows = await session.execute(select(orm.Agent.id, orm.Agent.name).where(orm.Agent.id.in_(ids)))
    return {agent_id: name for agent_id, name in rows.tuples()}


def cmd_show(args: argparse.Namespace) -> int:
    from app.db.session import create_sessionmaker
    from app.domain.errors import NotFound
    from app.services import runs

    run_id = run_pk(args.run_id)
    settings = common.settings(log=False)

    async def run(engine: AsyncEngine) -> dict[str, Any]:
        async with create_sessionmaker(engine)() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
            try:
                row = await runs.get_run(session, workspace_id=workspace_id, run_id=run_id)
            except NotFound:
                raise CliError(f"no run {args.run_id} in workspace {args.workspace!r}") from None
            return await _describe_tree_node(session, row)

    shown = asyncio.run(common.with_engine(settings, run))
    if args.json:
        print(json.dumps({"workspace": args.workspace, "run": shown}))
        return 0
    _print_run(shown)
    return 0


async def _describe_tree_node(session: AsyncSession, run: orm.Run) -> dict[str, Any]:
    """The run with its input, result, steps and direct children."""
    from app.db import orm

    steps = (
        await session.scalars(
            select(orm.RunStep).where(orm.RunStep.run_id == run.id).order_by(orm.RunStep.seq)
        )
    ).all()
    approvals = {
        a.id: a for a in await session.scalars(select(orm.Approval).where(orm.Approval.run_id == run.id))
    }
    children = (
        await session.scalars(select(orm.Run).where(orm.Run.parent_run_id == run.id).order_by(orm.Run.id))
    ).all()
    names = await _agent_names(session, {run.agent_id, *(c.agent_id for c in children)})
    described = describe_run(run, names[run.agent_id])
    described |= {
        "error_code": run.error_code,
        "held_reason": run.held_reason,
        "usage": run.usage or {},
        "tree_usage": run.tree_usage or {},
        "budget": await _describe_budget(session, run),
        "input": run.input,
        "result": run.result,
        "cancel_reason": run.cancel_reason,
        "delegation_task": run.delegation_task,
        "steps": [_describe_step(s, approvals.get(s.approval_id) if s.approval_id else None) for s in steps],
        "children": [
            {"id": to_global_id("Run", c.id), "agent": names[c.agent_id], "status": c.status}
            for c in children
        ],
    }
    return described


async def _describe_budget(session: AsyncSession, run: orm.Run) -> list[dict[str, Any]]:
    """The run's effective limits, as ``Run.budget`` shows them (docs/concepts/budgets.md)."""
    from app.clock import utcnow
    from app.db import orm
    from app.domain.budgets import concurrency_effective, concurrency_limit, effective
    from app.domain.runs import RunStatus
    from app.services.transitions.usage import ledger

    chain = [run]
    while chain[-1].parent_run_id is not None:
        chain.append(await session.get_one(orm.Run, chain[-1].parent_run_id))
    now = utcnow()
    limits = effective([ledger(common.settings(log=False), r, now) for r in reversed(chain)])
    if concurrency_limit(run.budget) is not None:
        running = await session.scalar(
            select(func.count())
            .select_from(orm.Run)
            .where(orm.Run.agent_id == run.agent_id, orm.Run.status == RunStatus.RUNNING.value)
        )
        quota = concurrency_effective(run.budget, run_id=run.id, running=int(running or 0))
        if quota is not None:
            limits[quota.key] = quota
    return [
        {"name": f.key, "limit": f.limit, "used": f.used, "remaining": f.remaining, "imposed_by": f.imposed_by,
         "imposed_on_run_id": to_global_id("Run", f.run_id)}
        for f in limits.values()
    ]  # fmt: skip


def _describe_step(step: orm.RunStep, approval: orm.Approval | None) -> dict[str, Any]:
    return {
        "id": to_global_id("RunStep", step.id),
        "seq": step.seq,
        "tool": step.tool,
        "status": step.status,
        "decision": step.decision,
        "decision_reason": step.decision_reason,
        "arguments": step.arguments,
        "result": step.result,
        "error": step.error,
        "child_run_id": _gid("Run", step.child_run_id),
        "approval": None
        if approval is None
        else {
            "id": to_global_id("Approval", approval.id),
            "status": approval.status,
            "reason": approval.reason,
        },
        "started_at": common.iso(step.started_at),
        "finished_at": common.iso(step.finished_at),
    }


def _print_run(run: dict[str, Any]) -> None:
    def js(value: Any) -> str:
        return "-" if value is None else json.dumps(value)

    print(f"Run {run['id']} of agent {run['agent']!r}: {run['status']} (trigger {run['trigger']})")
    for label, key in (("created", "created_at"), ("started", "started_at"), ("finished", "finished_at")):
        print(f"  {label:<9} {run[key] or '-'}")
    if run["parent_run_id"]:
        print(f"  parent    {run['parent_run_id']} (root {run['root_run_id']}, depth {run['depth']})")
    if run["delegation_task"]:
        print(f"  task      {run['delegation_task']}")
    print(f"  input     {js(run['input'])}")
    print(f"  result    {js(run['result'])}")
    if run["held_reason"]:
        print(f"  held      {run['held_reason']}")
    if run["error"]:
        print(f"  error     {run['error']}" + (f" ({run['error_code']})" if run["error_code"] else ""))
    usage, tree = run["usage"], run["tree_usage"]
    tokens = usage.get("inputTokens", 0) + usage.get("outputTokens", 0)
    tree_tokens = tree.get("inputTokens", 0) + tree.get("outputTokens", 0)
    print(f"  usage     {tokens} tokens, ${usage.get('costUsd', 0):.4f}, {usage.get('turns', 0)} turns, "
          f"{usage.get('toolCalls', 0)} tool calls, {usage.get('children', 0)} children")  # fmt: skip
    print(f"  subtree   {tree_tokens} tokens, ${tree.get('costUsd', 0):.4f}, {tree.get('runs', 1)} runs")
    for limit in run["budget"]:
        print(f"  budget    {limit['name']} {limit['used']:g}/{limit['limit']:g} "
              f"({limit['remaining']:g} left, set by {limit['imposed_by']})")  # fmt: skip
    if run["cancel_reason"]:
        print(f"  cancelled {run['cancel_reason']}")
    if run["steps"]:
        print("Steps:")
        columns = ("seq", "tool", "status", "decision", "child_run_id", "approval")
        rows = [
            [
                str(s["seq"]),
                s["tool"] or "(answer)",
                s["status"],
                s["decision"] or "-",
                s["child_run_id"] or "-",
                f"{s['approval']['id']} {s['approval']['status']}" if s["approval"] else "-",
            ]
            for s in run["steps"]
        ]
        common.print_table(columns, rows)
    if run["children"]:
        print("Children:")
        common.print_table(
            ("id", "agent", "status"), [[c["id"], c["agent"], c["status"]] for c in run["children"]]
        )


# -- cancel --------------------------------------------------------------------------------


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a run and its live descendants, as ``cancelRun`` does."""
    from app.domain.errors import NotFound
    from app.services import runs

    run_id = run_pk(args.run_id)
    settings = common.settings(log=False)

    async def cancel(rt: Runtime) -> orm.Run:
        async with rt.sessionmaker() as session:
            workspace_id = await common.workspace_id(session, args.workspace)
        try:
            return await runs.cancel_run(rt, machine_admin(workspace_id), run_id=run_id, reason=args.reason)
        except NotFound:
            raise CliError(f"no run {args.run_id} in workspace {args.workspace!r}") from None

    cancelled = asyncio.run(common.with_runtime(settings, cancel))
    return _print_outcome(args, cancelled, "Cancelled run {id} and its runs still going ({status}).")


# -- watch ---------------------------------------------------------------------------------


def cmd_watch(args: argparse.Namespace) -> int:
    from app.cli.watch.client import WatchError, watch
    from app.cli.watch.reconnect import Reconnects

    client = common.client_settings()
    token = args.token or (client.token.get_secret_value() if client.token else None)
    if not token:
        raise CliError("no token: pass --token TOKEN or set ENVERIF_TOKEN (a viewer token is enough)")
    if args.after_seq < 0:
        raise CliError(f"--after-seq must be 0 or more, not {args.after_seq}")
    if args.max_retries < 1:
        raise CliError(f"--max-retries must be 1 or more, not {args.max_retries}")
    try:
        return asyncio.run(
            watch(
                url=args.url or client.url,
                token=token,
                run_id=args.run_id,
                after_seq=args.after_seq,
                as_json=args.json,
                reconnects=Reconnects(max_failures=args.max_retries),
            )
        )
    except WatchError as exc:
        raise CliError(str(exc)) from None


# -- the parser ----------------------------------------------------------------------------


def _add_start(sub: Any, **kwargs: Any) -> None:
    c = common.add_command(
        sub, "start", "start a run of an agent (trigger MANUAL); a worker executes it", **kwargs
    )
    common.add_workspace(c)
    c.add_argument("--agent", required=True, metavar="NAME", help="the agent, by name")
    c.add_argument("--input", metavar="JSON", help="the run input, as JSON (default: none, null)")
    common.add_json(c, '{"run_id", "status"}')
    c.set_defaults(handler=cmd_start)


def _add_run_id(c: argparse.ArgumentParser) -> None:
    c.add_argument("run_id", metavar="RUN_ID", help="the run's GraphQL id (or database id)")


def add_parser(commands: Any) -> None:
    p = common.add_command(commands, "runs", "start, list, show, cancel and watch runs")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_start(sub)

    c = common.add_command(sub, "list", "list a workspace's runs, newest first")
    common.add_workspace(c)
    c.add_argument(
        "--status",
        action="append",
        choices=[s.value for s in RunStatus],
        metavar="STATUS",
        help=f"only runs in this status ({', '.join(s.value for s in RunStatus)}); repeat for several "
        "(default: every status)",
    )
    c.add_argument("--agent", metavar="NAME", help="only this agent's runs (default: every agent's)")
    c.add_argument("--roots-only", action="store_true", help="only root runs, not delegated children")
    c.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, metavar="N", help=f"at most N runs (1-{MAX_LIMIT})"
    )
    common.add_json(c, '{"workspace", "runs": [...], "has_more"}')
    c.set_defaults(handler=cmd_list)

    c = common.add_command(sub, "show", "a run: its input, result, steps and children")
    _add_run_id(c)
    common.add_workspace(c)
    common.add_json(c, '{"workspace", "run": {..., "steps": [...], "children": [...]}}')
    c.set_defaults(handler=cmd_show)

    c = common.add_command(sub, "cancel", "cancel a run and its runs still going (as cancelRun does)")
    _add_run_id(c)
    common.add_workspace(c)
    c.add_argument("--reason", metavar="TEXT", help="recorded on the runs (default: 'cancelled by operator')")
    common.add_json(c, '{"run_id", "status"}')
    c.set_defaults(handler=cmd_cancel)

    c = common.add_command(
        sub, "watch", "draw a run tree live until its root ends (runTree subscription, over the API)"
    )
    c.add_argument("run_id", metavar="RUN_ID", help="any run of the tree: its GraphQL id (or database id)")
    c.add_argument("--after-seq", type=int, default=0, metavar="N", help="only events after seq N")
    c.add_argument("--json", action="store_true", help="print each event as one JSON object per line")
    c.add_argument("--url", help=f"the API's /graphql URL (default: ENVERIF_URL or {DEFAULT_API_URL})")
    c.add_argument("--token", help="an API token; viewer is enough (default: ENVERIF_TOKEN)")
    c.add_argument(
        "--max-retries",
        type=int,
        default=DEFAULT_MAX_FAILURES,
        metavar="N",
        help=(
            "give up after N tries in a row to resume a lost stream (UNAVAILABLE, a dropped "
            f"connection, a restarting server); one that delivers an event or stays up {STABLE_S:.0f} s "
            "starts the count again"
        ),
    )
    c.set_defaults(handler=cmd_watch)


def add_deprecated_parser(commands: Any) -> None:
    """``enverif run start``: the spelling before ``runs start``. Hidden from the command
    list (argparse lists only the subcommands given a ``help``), still runs."""
    p = commands.add_parser(
        "run",
        description="Deprecated: the old spelling of `enverif runs start`.",
        formatter_class=common.HelpFormatter,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_start(sub, description="Deprecated: use `enverif runs start`, which this is.")
