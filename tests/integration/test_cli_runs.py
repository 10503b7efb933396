"""``enverif run start``: an operator starting a run from the machine (trigger MANUAL)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli import ENVERIF, _env
from tests.support.runs import create_agent, wait_run


@pytest.fixture
def run_start(settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    # Off the event loop: the in-process worker must keep running (on SQLite a worker frozen
    # inside its write transaction would hold the lock the command needs).
    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(_run, *args)

    def _run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "ENVERIF_DATABASE_URL": settings.effective_database_url,
            "ENVERIF_REDIS_URL": settings.effective_redis_url,
            "ENVERIF_REDIS_PREFIX": settings.redis_prefix,
        }
        return subprocess.run(
            [*ENVERIF, "run", "start", *args],
            env=_env(tmp_path / "home", **env),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


async def test_run_start_queues_a_manual_run_that_a_worker_executes(
    gql, workspace, worker, run_start
) -> None:
    agent = await create_agent(
        gql, workspace.admin, steps=[{"final": "hi {{ input.who }}"}], name="cli-greeter"
    )
    proc = await run_start(
        "--workspace", workspace.name, "--agent", "cli-greeter", "--input", '{"who": "ops"}', "--json"
    )
    assert proc.returncode == 0, proc.stderr
    started = json.loads(proc.stdout)
    assert started["status"] == "QUEUED"
    run = await wait_run(gql, workspace.viewer, started["run_id"])
    assert (run["status"], run["trigger"], run["result"]) == ("SUCCEEDED", "MANUAL", "hi ops")
    assert agent


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agent", "nobody"], "no agent named 'nobody'"),
        (["--agent", "x", "--input", "{not json"], "--input is not valid JSON"),
    ],
)
async def test_run_start_refuses_with_one_line(workspace, run_start, args: list[str], needle: str) -> None:
    proc = await run_start("--workspace", workspace.name, *args)
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
