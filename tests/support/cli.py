"""The ``enverif`` command as an operator runs it, for tests: the installed console script (or
``python -m app.cli`` outside a venv) in its own process, with only the ``ENVERIF_*``
variables a test gives it, on the session's database and Redis.

``enverif`` is a fixture (registered in ``tests/conftest.py``); ``in_thread`` runs it off the
event loop for async tests whose in-process app or worker must keep running meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
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
    return subprocess.run(
        [*ENVERIF, *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


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
