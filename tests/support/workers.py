"""Real ``enverif worker`` processes for tests: a SIGKILL is a real crash, no cleanup runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.cli import spawn_enverif

ENVERIF = str(Path(sys.executable).parent / "enverif")


def worker_env(settings: Settings, *, lease_s: float = 2.0, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "ENVERIF_HOME": str(settings.home),
        "ENVERIF_DATABASE_URL": settings.effective_database_url,
        "ENVERIF_REDIS_URL": settings.effective_redis_url,
        "ENVERIF_REDIS_PREFIX": settings.redis_prefix,
        "ENVERIF_LEASE_S": str(lease_s),
        "ENVERIF_SWEEP_INTERVAL_S": "1",
        "ENVERIF_HTTP_ALLOW_PRIVATE_NETWORKS": "true",
        "ENVERIF_PROVIDER_KEYS": json.dumps(settings.provider_keys),
        "ENVERIF_LOG_LEVEL": "warning",
        **extra,
    }


def spawn_worker(
    settings: Settings, *, lease_s: float = 2.0, max_jobs: int | None = None, **extra: str
) -> subprocess.Popen[bytes]:
    """A real ``enverif worker`` process on the test's database and Redis. Its stderr goes to
    a file, so a test can show why a worker exited (``exited``)."""
    if max_jobs is not None:
        extra["ENVERIF_WORKER_MAX_JOBS"] = str(max_jobs)
    env = worker_env(settings, lease_s=lease_s, **extra)
    log = tempfile.NamedTemporaryFile(prefix="enverif-worker-", suffix=".log", delete=False)
    proc = spawn_enverif(["worker"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    WORKER_LOGS[proc.pid] = log.name
    return proc


WORKER_LOGS: dict[int, str] = {}


def exited(procs: list[subprocess.Popen[bytes]]) -> str:
    """'' when every process is alive; else each exited one's code and the end of its log."""
    report = []
    for proc in procs:
        if proc.poll() is not None:
            tail = Path(WORKER_LOGS.get(proc.pid, "/dev/null")).read_text(errors="replace")[-3000:]
            report.append(f"worker {proc.pid} exited with {proc.returncode}:\n{tail}")
    return "\n".join(report)


@pytest.fixture
async def processes() -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; stopped (SIGTERM, then SIGKILL) when it ends."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    await asyncio.to_thread(stop_processes, procs)


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each process still running, then SIGKILL to any that is not gone in 15 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stderr:
            p.stderr.close()


async def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def install_plugins(
    directory: Path, entry_points: dict[str, str], *, providers: dict[str, str] | None = None
) -> dict[str, str]:
    """Make ``entry_points`` (name -> ``module:attr``) visible as ``enverif.tools`` plugins,
    and ``providers`` as ``enverif.providers`` plugins, to a worker process started with the
    returned environment additions: a distribution's metadata on its ``PYTHONPATH``, exactly
    what ``pip install`` of a plugin leaves."""
    dist = directory / "enverif_test_plugins-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: enverif-test-plugins\nVersion: 1.0\n")
    lines = ["[enverif.tools]"] + [f"{name} = {target}" for name, target in entry_points.items()]
    lines += ["[enverif.providers]"] + [f"{name} = {target}" for name, target in (providers or {}).items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (str(directory), root, os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}
