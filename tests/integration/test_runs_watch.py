"""``enverif runs watch``: the live tree in a terminal, as an operator runs it (issue 11).

Everything is real and out of process: ``enverif serve`` (uvicorn) and ``enverif worker`` as
subprocesses on the test's database and Redis, and the watch command itself in a
pseudo-terminal (pexpect), talking to the API over HTTP and graphql-transport-ws.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from app.db import orm
from app.graphql.ids import to_global_id
from app.settings import Settings
from tests.conftest import DB_KIND
from tests.integration.test_delegation import agents, delegate, root_id_of
from tests.support.cli import run_enverif, spawn_enverif
from tests.support.graphql import pk
from tests.support.proxy import TcpProxy
from tests.support.runs import DECIDE, PENDING_APPROVALS, scripted_agent, start_run, wait_run
from tests.support.workers import ENVERIF, spawn_worker, stop_processes, worker_env

TIMEOUT_S = 60


def spawn_api(
    settings: Settings, port: int = 0, log: Path | None = None, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """An ``enverif serve`` process (on a free port by default, with ``env`` on top of the
    test's settings, its log appended to ``log``); returns it and its /graphql URL."""
    with open(log or os.devnull, "ab") as stderr:
        server = spawn_enverif(
            ["serve", "--host", "127.0.0.1", "--port", str(port)],
            env=worker_env(settings, **env),
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert server.stdout is not None
    line = server.stdout.readline().decode()
    found = re.search(r"(http://\S+/graphql)", line)
    if not found:
        server.kill()
        raise AssertionError(f"enverif serve printed {line!r}")
    return server, found.group(1)


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[str]:
    """``enverif serve`` and ``enverif worker`` processes, shared by the module's tests that
    leave them running (each watches runs of its own workspace); yields the API's /graphql URL."""
    server, url = spawn_api(settings)
    started = [server, spawn_worker(settings)]
    try:
        yield url
    finally:
        stop_processes(started)


def _watch_env(token: str | None, **env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ENVERIF_")}
    if token is not None:
        clean["ENVERIF_TOKEN"] = token
    return clean | env


def watch(*args: str, token: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    return run_enverif(
        "runs", "watch", *args, env=_watch_env(token, **env), cwd=Path.cwd(), timeout_s=TIMEOUT_S
    )


def spawn_watch(*args: str, token: str, stderr: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ENVERIF, "runs", "watch", *args],
        env=_watch_env(token),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


async def three_level_tree(gql: Any, workspace: Any) -> tuple[dict[str, str], str]:
    """root -> mid -> leaf, the leaf waiting for an approval of its http.get."""
    names = await agents(
        gql,
        workspace.admin,
        {
            "leaf": {
                "steps": [{"call": "http.get", "args": {"url": "http://127.0.0.1:9/x"}}, {"final": "leaf"}],
                "policy": {"rules": [{"tool": "http.get", "decision": "REQUIRE_APPROVAL"}]},
            }
        },
    )
    names |= await agents(
        gql, workspace.admin, {"mid": {"steps": [delegate(names["leaf"], "deep"), {"final": "mid"}]}}
    )
    names |= await agents(
        gql, workspace.admin, {"root": {"steps": [delegate(names["mid"], "top"), {"final": "root"}]}}
    )
    run_id = await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["root"]))
    return names, run_id


async def pending_approval(gql: Any, workspace: Any) -> str:
    """The tree's one pending approval, once the leaf has asked for it."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        data = await gql.ok(PENDING_APPROVALS, token=workspace.viewer)
        edges = data["approvals"]["edges"]
        if edges:
            return str(edges[0]["node"]["id"])
        assert time.monotonic() < deadline, "no approval was requested"
        await asyncio.sleep(0.1)


async def test_watch_draws_a_live_three_level_tree_in_a_terminal_and_exits_when_it_completes(
    api, gql, workspace
) -> None:
    names, run_id = await three_level_tree(gql, workspace)
    term = pexpect.spawn(
        ENVERIF,
        ["runs", "watch", run_id, "--url", api],
        env=_watch_env(workspace.viewer),
        dimensions=(40, 160),
        encoding="utf-8",
        codec_errors="replace",
        timeout=TIMEOUT_S,
    )
    try:
        # The tree grows to three levels and stops at the leaf's approval, drawn in place.
        await term.expect("approval pending", async_=True)
        approval = await pending_approval(gql, workspace)
        screen = term.before or ""
        await gql.ok(DECIDE, {"id": approval, "approve": False, "reason": "no"}, token=workspace.operator)
        await term.expect("stream complete: root SUCCEEDED", async_=True)
        screen += term.before or ""
        await term.expect(pexpect.EOF, async_=True)
    finally:
        term.close(force=True)
    assert term.exitstatus == 0, screen
    for name in names.values():
        assert name in screen, f"{name} not drawn:\n{screen}"
    assert "WAITING_APPROVAL" in screen
    assert "\x1b[2K" in screen or "\x1b[1A" in screen, "the tree was not redrawn in place"
    done = await wait_run(gql, workspace.viewer, run_id)
    assert done["status"] == "SUCCEEDED"


async def test_watch_json_prints_the_whole_ordered_log_then_exits(api, gql, workspace) -> None:
    _names, run_id = await three_level_tree(gql, workspace)
    await gql.ok(
        DECIDE, {"id": await pending_approval(gql, workspace), "approve": True}, token=workspace.operator
    )
    await wait_run(gql, workspace.viewer, run_id, timeout_s=TIMEOUT_S)
    # The API's URL from ENVERIF_URL, as the token from ENVERIF_TOKEN.
    proc = watch(run_id, "--json", token=workspace.viewer, ENVERIF_URL=api)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert {e["type"] for e in events} >= {"RUN_CREATED", "STEP_STARTED", "APPROVAL_REQUESTED"}
    assert len({e["runId"] for e in events}) == 3
    assert events[-1]["runId"] == run_id and events[-1]["status"] == "SUCCEEDED"

    # --after-seq: exactly the rest of the log.
    after = watch(run_id, "--url", api, "--json", "--after-seq", "5", token=workspace.viewer)
    assert after.returncode == 0, after.stderr
    assert [json.loads(line) for line in after.stdout.splitlines()] == events[5:]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_watch_refuses_with_one_clear_line(api, gql, workspace, make_workspace) -> None:
    other = await make_workspace()
    _names, run_id = await three_level_tree(gql, workspace)
    cases = [
        ((run_id, "--url", api), "evf_not_a_real_token", "UNAUTHENTICATED"),
        ((run_id, "--url", api), None, "ENVERIF_TOKEN"),
        ((run_id, "--url", api), other.viewer, "NOT_FOUND"),
        ((to_global_id("Run", 10**9), "--url", api), workspace.viewer, "NOT_FOUND"),
        (("not-an-id", "--url", api), workspace.viewer, "is not a run id"),
        ((run_id, "--max-retries", "0", "--url", api), workspace.viewer, "--max-retries must be 1 or more"),
        ((run_id, "--url", f"http://127.0.0.1:{_closed_port()}/graphql"), workspace.viewer, "cannot reach"),
    ]
    for args, token, needle in cases:
        proc = watch(*args, token=token)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    bad_url = watch(run_id, token=workspace.viewer, ENVERIF_URL="127.0.0.1:8000/graphql")
    assert bad_url.returncode == 2 and "ENVERIF_URL must be an http(s):// or ws(s):// URL" in bad_url.stderr
    assert "Traceback" not in bad_url.stderr and "127.0.0.1:8000" not in bad_url.stderr


@pytest.mark.timeout(300)  # three processes start, one twice
async def test_watch_resumes_after_the_server_restarts_without_missing_or_repeating(
    settings, processes, gql, workspace
) -> None:
    server, url = spawn_api(settings, port=_closed_port())
    processes.extend([server, spawn_worker(settings)])
    _names, run_id = await three_level_tree(gql, workspace)
    watcher = spawn_watch(run_id, "--url", url, "--json", token=workspace.viewer)
    processes.append(watcher)  # type: ignore[arg-type]
    assert watcher.stdout is not None and watcher.stderr is not None
    events = []
    while not any(e["type"] == "APPROVAL_REQUESTED" for e in events):
        line = await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), TIMEOUT_S)
        assert line, f"watch ended early: {watcher.stderr.read()}"
        events.append(json.loads(line))

    # The API goes away mid-run (a crash: no close frame) and comes back on the same port;
    # meanwhile the tree moves on.
    server.kill()
    await asyncio.to_thread(server.wait)
    await gql.ok(
        DECIDE, {"id": await pending_approval(gql, workspace), "approve": True}, token=workspace.operator
    )
    restarted, _ = spawn_api(settings, port=int(url.rsplit(":", 1)[1].split("/")[0]))
    processes.append(restarted)

    # Read on through the same buffered pipe (communicate() would skip what it holds).
    while line := await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), TIMEOUT_S):
        events.append(json.loads(line))
    await asyncio.wait_for(asyncio.to_thread(watcher.wait), TIMEOUT_S)
    stderr = watcher.stderr.read()
    assert watcher.returncode == 0, stderr
    assert "connection lost; resuming after seq" in stderr
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["runId"] == run_id and events[-1]["status"] == "SUCCEEDED"


async def test_watch_gives_up_after_max_retries_failed_tries_in_a_row(
    settings, processes, gql, workspace, tmp_path
) -> None:
    server, url = spawn_api(settings)
    processes.extend([server, spawn_worker(settings)])
    _names, run_id = await three_level_tree(gql, workspace)
    watcher = spawn_watch(run_id, "--url", url, "--json", "--max-retries", "2", token=workspace.viewer)
    processes.append(watcher)  # type: ignore[arg-type]
    assert watcher.stdout is not None and watcher.stderr is not None
    assert await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), TIMEOUT_S)
    server.kill()  # and it stays away
    await asyncio.wait_for(asyncio.to_thread(watcher.wait), TIMEOUT_S)
    said = watcher.stderr.read()
    assert watcher.returncode == 2, said
    *notes, last = said.strip().splitlines()
    assert notes[0].startswith("enverif: connection lost; resuming after seq")
    assert (
        last.startswith("enverif: error: cannot reach the Enverif API")
        and "gave up after 2 tries in a row" in last
    )
    assert f"enverif runs watch {run_id} --after-seq" in last and "Traceback" not in said


async def two_approval_tree(gql: Any, workspace: Any) -> str:
    """root -> mid -> leaf; the leaf's http.get waits for an approval, and once the leaf and
    mid are done the root's own http.get waits for another."""
    ask = {"rules": [{"tool": "http.get", "decision": "REQUIRE_APPROVAL"}]}
    get = {"call": "http.get", "args": {"url": "http://127.0.0.1:9/x"}}
    names = await agents(gql, workspace.admin, {"leaf": {"steps": [get, {"final": "leaf"}], "policy": ask}})
    names |= await agents(
        gql, workspace.admin, {"mid": {"steps": [delegate(names["leaf"], "deep"), {"final": "mid"}]}}
    )
    names |= await agents(
        gql,
        workspace.admin,
        {"root": {"steps": [delegate(names["mid"], "top"), get, {"final": "root"}], "policy": ask}},
    )
    return await start_run(gql, workspace.operator, await root_id_of(gql, workspace.admin, names["root"]))


@pytest.mark.skipif(DB_KIND != "mysql", reason="the API's database is cut by a proxy in front of MariaDB")
@pytest.mark.timeout(300)  # three processes start, the API twice
async def test_watch_rides_out_a_database_outage_and_a_server_restart(
    settings, processes, gql, workspace, sessionmaker, tmp_path
) -> None:
    """The API answers UNAVAILABLE for ~5 s (its database connections go through a proxy
    that drops them; the worker's do not, so the tree goes on meanwhile), later the API is
    killed and started again: the watcher resumes each time after the last seq it printed,
    prints every event of the tree exactly once, in order, and exits 0 when it completes."""
    database = make_url(settings.effective_database_url)
    proxy = await TcpProxy(database.host or "127.0.0.1", database.port or 3306).start()
    through_proxy = database.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    port = _closed_port()
    # Off the event loop, which serves the proxy the API starts through.
    api_log = tmp_path / "api.log"
    server, url = await asyncio.to_thread(
        spawn_api, settings, port, api_log, ENVERIF_DATABASE_URL=through_proxy
    )
    processes.extend([server, spawn_worker(settings)])
    run_id = await two_approval_tree(gql, workspace)
    notes = tmp_path / "watch.stderr"
    with notes.open("w") as stderr:
        watcher = spawn_watch(run_id, "--url", url, "--json", token=workspace.viewer, stderr=stderr)
    processes.append(watcher)  # type: ignore[arg-type]
    assert watcher.stdout is not None
    events: list[dict[str, Any]] = []

    async def read_until(approvals: int) -> None:
        while sum(e["type"] == "APPROVAL_REQUESTED" for e in events) < approvals:
            line = await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), TIMEOUT_S)  # type: ignore[union-attr]
            assert line, f"watch ended early: {notes.read_text()}"
            events.append(json.loads(line))

    try:
        await read_until(1)
        # The database goes away for the API. The leaf's approval is decided (by an API that
        # still reaches it), the worker carries the tree on to the root's approval, and the
        # API, told by Redis, cannot read the database to go on: UNAVAILABLE.
        proxy.down()
        outage_started = time.monotonic()
        await gql.ok(
            DECIDE, {"id": await pending_approval(gql, workspace), "approve": False}, token=workspace.operator
        )
        deadline = time.monotonic() + TIMEOUT_S
        while "UNAVAILABLE" not in notes.read_text():
            assert watcher.poll() is None, (
                f"watch exited {watcher.returncode}: {notes.read_text()}\n{api_log.read_text()}"
            )
            assert time.monotonic() < deadline, f"no UNAVAILABLE seen: {notes.read_text()}"
            await asyncio.sleep(0.1)
        await asyncio.sleep(max(0.0, 5.0 - (time.monotonic() - outage_started)))
        assert watcher.poll() is None, notes.read_text()
        proxy.up()
        await read_until(2)

        # The API is killed (no close frame) and comes back on the same port.
        server.kill()
        await asyncio.to_thread(server.wait)
        await gql.ok(
            DECIDE, {"id": await pending_approval(gql, workspace), "approve": False}, token=workspace.operator
        )
        restarted, _ = await asyncio.to_thread(
            spawn_api, settings, port, api_log, ENVERIF_DATABASE_URL=through_proxy
        )
        processes.append(restarted)
        while line := await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), TIMEOUT_S):
            events.append(json.loads(line))
        await asyncio.wait_for(asyncio.to_thread(watcher.wait), TIMEOUT_S)
    finally:
        await proxy.stop()
    said = notes.read_text()
    assert watcher.returncode == 0, said
    assert "the server is unavailable (UNAVAILABLE" in said and "connection lost; resuming after seq" in said
    async with sessionmaker() as session:
        logged = list(
            await session.scalars(
                select(orm.RunEvent.seq)
                .where(orm.RunEvent.root_run_id == pk(run_id))
                .order_by(orm.RunEvent.seq)
            )
        )
    assert [e["seq"] for e in events] == logged == list(range(1, len(logged) + 1))
    assert events[-1]["runId"] == run_id and events[-1]["status"] == "SUCCEEDED"


async def test_watch_prints_the_models_live_output(api, gql, workspace) -> None:
    """Over a pipe, each turn's streamed text is one OUTPUT line once the turn ends."""
    final = "Everything checked: " + "fine, " * 20
    agent = await scripted_agent(
        gql,
        workspace.admin,
        steps=[{"call": "http.get", "args": {"url": "http://127.0.0.1:9/x"}}, {"final": final}],
        policy={"rules": [{"tool": "http.get", "decision": "REQUIRE_APPROVAL"}]},
    )
    run_id = await start_run(gql, workspace.operator, agent)
    await wait_run(gql, workspace.viewer, run_id, "WAITING_APPROVAL", timeout_s=TIMEOUT_S)
    proc = spawn_watch(run_id, "--url", api, token=workspace.viewer)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any("WAITING_APPROVAL" in line for line in lines):  # replayed: it follows now
            lines.append(await asyncio.to_thread(proc.stdout.readline))
        await asyncio.sleep(0.5)  # its runOutput subscription is in place
        await gql.ok(
            DECIDE, {"id": await pending_approval(gql, workspace), "approve": True}, token=workspace.operator
        )
        out, err = await asyncio.to_thread(proc.communicate, timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    (output,) = [line for line in out.splitlines() if " OUTPUT " in line]
    assert output.rstrip().endswith(final.rstrip())
