"""``enverif runs start | list | show | cancel`` (and the old ``enverif run start``) as an
operator runs them: the real command in its own process, on the session's database."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import orm
from app.graphql.ids import from_global_id, to_global_id
from tests.conftest import DB_KIND
from tests.integration.test_holds import HELD
from tests.support.cli import Enverif, assert_one_line_error, cli_env, in_thread, run_enverif
from tests.support.runs import get_run, scripted_agent, start_run, wait_run
from tests.support.trees import waiting_parent_with_child


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    "spelling", [["runs", "start"], ["run", "start"]], ids=["runs-start", "old-run-start"]
)
async def test_start_queues_a_manual_run_that_a_worker_executes(
    enverif: Enverif, gql: Any, workspace: Any, worker: Any, spelling: list[str]
) -> None:
    name = f"cli-greeter-{uuid.uuid4().hex[:6]}"
    await scripted_agent(gql, workspace.admin, steps=[{"final": "hi {{ input.who }}"}], name=name)
    started = _json(
        await in_thread(
            enverif,
            *spelling,
            "--workspace",
            workspace.name,
            "--agent",
            name,
            "--input",
            '{"who": "ops"}',
            "--json",
        )
    )
    assert started["status"] == "QUEUED"
    run = await wait_run(gql, workspace.viewer, started["run_id"])
    assert (run["status"], run["trigger"], run["result"]) == ("SUCCEEDED", "MANUAL", "hi ops")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agent", "nobody"], "no agent named 'nobody' in workspace"),
        (["--agent", "x", "--input", "{not json"], "--input is not valid JSON"),
    ],
)
async def test_start_refuses_with_one_line(
    enverif: Enverif, workspace: Any, args: list[str], needle: str
) -> None:
    assert_one_line_error(
        await in_thread(enverif, "runs", "start", "--workspace", workspace.name, *args), needle
    )


async def test_list_shows_the_workspace_runs_newest_first_with_filters(
    enverif: Enverif,
    gql: Any,
    workspace: Any,
    make_workspace: Any,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    first = await scripted_agent(gql, workspace.admin, steps=[{"final": "a"}])
    second = await scripted_agent(gql, workspace.admin, steps=[{"final": "b"}])
    older = await start_run(gql, workspace.operator, first)
    newer = await start_run(gql, workspace.operator, second)
    parent, _step, child = await waiting_parent_with_child(sessionmaker, from_global_id(first, "Agent"))
    other = await make_workspace()  # its runs are never listed here
    await start_run(gql, other.operator, await scripted_agent(gql, other.admin, steps=[{"final": "c"}]))
    ids = {to_global_id("Run", pk) for pk in (parent, child)} | {older, newer}

    listed = _json(await in_thread(enverif, "runs", "list", "--workspace", workspace.name, "--json"))
    assert listed["workspace"] == workspace.name and listed["has_more"] is False
    assert [r["id"] for r in listed["runs"]] == sorted(ids, key=lambda g: -from_global_id(g, "Run"))
    by_id = {r["id"]: r for r in listed["runs"]}
    assert by_id[to_global_id("Run", child)] | {"created_at": None} == {
        "id": to_global_id("Run", child), "agent": by_id[older]["agent"], "status": "QUEUED",
        "trigger": "DELEGATION", "parent_run_id": to_global_id("Run", parent),
        "root_run_id": to_global_id("Run", parent), "depth": 1, "created_at": None,
        "started_at": None, "finished_at": None, "error": None,
    }  # fmt: skip

    async def ids_of(*args: str) -> list[str]:
        body = _json(await in_thread(enverif, "runs", "list", "--workspace", workspace.name, "--json", *args))
        return [r["id"] for r in body["runs"]]

    assert set(await ids_of("--status", "WAITING_CHILD")) == {to_global_id("Run", parent)}
    assert set(await ids_of("--status", "WAITING_CHILD", "--status", "QUEUED")) == ids
    assert set(await ids_of("--roots-only")) == ids - {to_global_id("Run", child)}
    agent_name = by_id[newer]["agent"]
    assert await ids_of("--agent", agent_name) == [newer]
    limited = _json(
        await in_thread(enverif, "runs", "list", "--workspace", workspace.name, "--json", "--limit", "1")
    )
    assert len(limited["runs"]) == 1 and limited["has_more"] is True

    table = await in_thread(enverif, "runs", "list", "--workspace", workspace.name)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "id", "agent", "status", "trigger", "depth", "parent_run_id", "created_at", "finished_at"
    ]  # fmt: skip
    assert all(run_id in table.stdout for run_id in ids)
    none = await in_thread(enverif, "runs", "list", "--workspace", other.name, "--status", "FAILED")
    assert none.returncode == 0 and "no runs like that" in none.stdout


async def test_show_prints_a_run_with_its_steps_and_children(
    enverif: Enverif, gql: Any, workspace: Any, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    parent, step_id, child = await waiting_parent_with_child(sessionmaker, from_global_id(agent, "Agent"))
    parent_id, child_id = to_global_id("Run", parent), to_global_id("Run", child)

    for run_id in (parent_id, str(parent)):  # the GraphQL id, or the database id
        body = _json(
            await in_thread(enverif, "runs", "show", run_id, "--workspace", workspace.name, "--json")
        )
        run = body["run"]
        assert (run["id"], run["status"], run["trigger"], run["depth"]) == (
            parent_id,
            "WAITING_CHILD",
            "API",
            0,
        )
        [step] = run["steps"]
        assert step["id"] == to_global_id("RunStep", step_id)
        assert (step["seq"], step["tool"], step["status"], step["child_run_id"]) == (
            1, "agents.delegate", "WAITING_CHILD", child_id
        )  # fmt: skip
        assert run["children"] == [{"id": child_id, "agent": run["agent"], "status": "QUEUED"}]

    child_body = _json(
        await in_thread(enverif, "runs", "show", child_id, "--workspace", workspace.name, "--json")
    )
    assert child_body["run"]["parent_run_id"] == parent_id and child_body["run"]["delegation_task"] == "t"

    human = await in_thread(enverif, "runs", "show", parent_id, "--workspace", workspace.name)
    assert human.returncode == 0, human.stderr
    assert f"Run {parent_id}" in human.stdout and "WAITING_CHILD" in human.stdout
    assert "agents.delegate" in human.stdout and child_id in human.stdout


@pytest.mark.usefixtures("worker")
async def test_show_prints_why_a_run_is_held_and_its_agents_quota(
    enverif: Enverif, gql: Any, workspace: Any
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}], name=f"held-{workspace.name}",
                                 budget={"maxConcurrentRuns": 2})  # fmt: skip
    await gql.ok('mutation { pauseWorkspace(reason: "ops freeze") { pausedAt } }', token=workspace.admin)
    run_id = await start_run(gql, workspace.operator, agent)
    deadline = asyncio.get_running_loop().time() + 15
    while not (await gql.ok(HELD, {"id": run_id}, token=workspace.viewer))["run"]["heldReason"]:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)

    shown = await in_thread(enverif, "runs", "show", run_id, "--workspace", workspace.name, "--json")
    run = _json(shown)["run"]
    assert (run["status"], run["held_reason"]) == ("QUEUED", "workspace paused: ops freeze")
    [quota] = [b for b in run["budget"] if b["name"] == "maxConcurrentRuns"]
    assert (quota["limit"], quota["used"], quota["remaining"]) == (2, 0, 2)
    assert quota["imposed_by"] == f"agent 'held-{workspace.name}'"
    human = await in_thread(enverif, "runs", "show", run_id, "--workspace", workspace.name)
    assert human.returncode == 0, human.stderr
    assert "  held      workspace paused: ops freeze\n" in human.stdout
    assert "  budget    maxConcurrentRuns 0/2 (2 left" in human.stdout


async def test_cancel_cancels_the_run_and_its_descendants_once(
    enverif: Enverif, gql: Any, workspace: Any, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent = await scripted_agent(gql, workspace.admin, steps=[{"final": "x"}])
    parent, _step, child = await waiting_parent_with_child(sessionmaker, from_global_id(agent, "Agent"))
    parent_id = to_global_id("Run", parent)
    cancelled = _json(
        await in_thread(
            enverif,
            "runs",
            "cancel",
            parent_id,
            "--workspace",
            workspace.name,
            "--reason",
            "ops said so",
            "--json",
        )
    )
    assert cancelled == {"run_id": parent_id, "status": "CANCELLED"}
    assert (await get_run(gql, workspace.viewer, to_global_id("Run", child)))["status"] == "CANCELLED"
    async with sessionmaker() as session:
        assert (await session.get_one(orm.Run, parent)).cancel_reason == "ops said so"
    # A terminal run cannot be cancelled again: the chokepoint says so, in one line.
    again = await in_thread(enverif, "runs", "cancel", parent_id, "--workspace", workspace.name)
    assert_one_line_error(again, "already CANCELLED")


async def test_another_workspaces_run_is_not_found_and_stays_as_it_is(
    enverif: Enverif, gql: Any, workspace: Any, make_workspace: Any
) -> None:
    other = await make_workspace()
    theirs = await start_run(
        gql, other.operator, await scripted_agent(gql, other.admin, steps=[{"final": "c"}])
    )
    for command in ("show", "cancel"):
        proc = await in_thread(enverif, "runs", command, theirs, "--workspace", workspace.name)
        assert_one_line_error(proc, f"no run {theirs} in workspace {workspace.name!r}")
    assert (await get_run(gql, other.viewer, theirs))["status"] == "QUEUED"
    assert_one_line_error(
        await in_thread(enverif, "runs", "show", "QWdlbnQ6MQ", "--workspace", workspace.name),
        "is not a run id",
    )


UNKNOWN_WORKSPACE_COMMANDS = [
    ["runs", "list"],
    ["runs", "show", "UnVuOjE"],
    ["runs", "cancel", "UnVuOjE"],
    ["runs", "start", "--agent", "a"],
    ["run", "start", "--agent", "a"],
    ["token", "list"],
    ["token", "create", "--role", "viewer"],
    ["schedules", "list"],
]


async def test_an_unknown_workspace_is_named_as_such(enverif: Enverif) -> None:
    missing = f"nowhere-{uuid.uuid4().hex[:6]}"
    # Side by side: each is a process of its own that reads the database and answers.
    answers = await asyncio.gather(
        *(in_thread(enverif, *command, "--workspace", missing) for command in UNKNOWN_WORKSPACE_COMMANDS)
    )
    for command, proc in zip(UNKNOWN_WORKSPACE_COMMANDS, answers, strict=True):
        assert f"no workspace named {missing!r}" in proc.stderr, (command, proc.stderr)
        assert_one_line_error(proc, f"no workspace named {missing!r}")


@pytest.mark.parametrize(
    "command",
    [
        ["workspace", "create", "early"],
        ["token", "list", "--workspace", "w"],
        ["runs", "list", "--workspace", "w"],
        ["runs", "start", "--workspace", "w", "--agent", "a"],
        ["schedules", "tick"],
        ["worker", "--burst"],
        ["serve", "--port", "0"],
        ["migrate", "--revision", "no-such-revision"],
    ],
    ids=lambda c: "-".join(c[:2]),
)
# The embedded defaults whatever the leg: once (in the SQLite leg) is enough.
@pytest.mark.skipif(DB_KIND != "sqlite", reason="uses the embedded SQLite; runs in the sqlite leg")
def test_a_command_that_fails_leaves_no_enverif_folder_behind(tmp_path: Path, command: list[str]) -> None:
    """In a fresh folder, with the embedded defaults, a command that cannot work (nothing is
    migrated yet, or the revision is unknown) creates neither ``.enverif/`` nor a database."""
    env = cli_env(tmp_path / ".enverif")
    proc = run_enverif(*command, env=env, cwd=tmp_path)
    # (migrate logs what alembic does at INFO before it fails: the error is its last line.)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("enverif: error: ") and "migrat" in last, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_python_m_app_cli_is_the_command_too(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "runs", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert all(action in proc.stdout for action in ("start", "list", "show", "cancel", "watch"))
