"""The ``enverif`` command as an operator runs it, for tests: the installed console script (or
``python -m app.cli`` outside a venv) in its own process, with only the ``ENVERIF_*``
variables a test gives it, on the session's database and Redis.

``enverif`` is a fixture (registered in ``tests/conftest.py``); ``in_thread`` runs it off the
event loop for async tests whose in-process app or worker must keep running meanwhile.

Each command is a process of its own, forked from ``tests/support/cli_forkserver.py`` (a
Python that has done the imports once): a few hundred commands per leg would otherwise spend
most of their CPU importing. ``ENVERIF_TEST_CLI_EXEC=1`` runs the installed script instead.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.conftest import REDIS_URL

_SCRIPT = Path(sys.executable).parent / "enverif"
# The installed console script when there is one (the venv of `make test`), else the module.
ENVERIF = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "app.cli"]

Enverif = Callable[..., subprocess.CompletedProcess[str]]


def cli_env(home: Path, **overrides: str) -> dict[str, str]:
    """This process's environment without its ``ENVERIF_*``, with ``ENVERIF_HOME`` and ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVERIF_")}
    env["ENVERIF_HOME"] = str(home)
    env.update(overrides)
    return env


def run_enverif(
    *args: str, env: dict[str, str], cwd: Path, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    if os.environ.get("ENVERIF_TEST_CLI_EXEC") == "1" or _python_env(env) != _python_env(os.environ):
        return subprocess.run(
            [*ENVERIF, *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    return _forkserver().run(list(args), env=env, cwd=cwd, timeout_s=timeout_s)


class ForkServer:
    """The client of ``tests/support/cli_forkserver.py``: started on first use, once per
    test session, and ended with it (it exits when its stdin closes)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="enverif-cli-"))
        self.path = str(self.directory / "fork.sock")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_forkserver.py")), self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the enverif fork server did not start (exit {self.proc.wait()})")

    def run(
        self, args: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        command = [*ENVERIF, *args]
        out, err = (self.directory / f"{uuid.uuid4().hex}.{name}" for name in ("out", "err"))
        request = {"args": args, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self.path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                conn.settimeout(timeout_s)
                with conn.makefile("r") as answers:
                    pid = int(answers.readline())
                    try:
                        line = answers.readline()
                    except TimeoutError:
                        os.kill(pid, signal.SIGKILL)
                        raise subprocess.TimeoutExpired(command, timeout_s, _read(out), _read(err)) from None
            # No exit code: the child died of a signal (the server does not know which).
            returncode = int(line) if line else -signal.SIGKILL
            return subprocess.CompletedProcess(command, returncode, _read(out), _read(err))
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def _python_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that act when an interpreter starts (PYTHONPATH and the like): a fork of
    the server started with the session's cannot honour others."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


_FORK_SERVER: ForkServer | None = None
_FORK_SERVER_LOCK = threading.Lock()


def _forkserver() -> ForkServer:
    global _FORK_SERVER
    with _FORK_SERVER_LOCK:
        if _FORK_SERVER is None or _FORK_SERVER.proc.poll() is not None:
            _FORK_SERVER = ForkServer()
            atexit.register(_FORK_SERVER.close)
        return _FORK_SERVER


@pytest.fixture
def enverif(database_url: str, redis_prefix: str, tmp_path: Path) -> Enverif:
    """Run ``enverif ARGS`` against the session's database; returns the CompletedProcess.
    Keyword arguments are ``ENVERIF_*`` variables to set (or override)."""

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        # The session's own Redis prefix: a worker started here must not see other sessions' jobs.
        merged = {
            "ENVERIF_DATABASE_URL": database_url,
            "ENVERIF_REDIS_URL": REDIS_URL,
            "ENVERIF_REDIS_PREFIX": redis_prefix,
            **env,
        }
        return run_enverif(*args, env=cli_env(tmp_path / "home", **merged), cwd=tmp_path)

    return run


async def in_thread(enverif: Enverif, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``enverif(...)`` from an async test: off the event loop, so the test's in-process app
    keeps running meanwhile. A blocked loop could freeze one of the app's background writes
    (recording a token's use) inside SQLite's one write lock, and the CLI would wait for it
    until its busy timeout."""
    return await asyncio.to_thread(enverif, *args, **env)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """An expected failure: exit 2, one ``enverif: error:`` line naming each needle, no output."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("enverif: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert proc.stdout == ""
