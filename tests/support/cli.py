"""The ``enverif`` command as an operator runs it, for tests: the installed console script (or
``python -m app.cli`` outside a venv) in its own process, with only the ``ENVERIF_*``
variables a test gives it, on the session's database and Redis.

``enverif`` is a fixture (registered in ``tests/conftest.py``); ``in_thread`` runs it off the
event loop for async tests whose in-process app or worker must keep running meanwhile.

Each command is a process of its own, forked from ``tests/support/cli_forkserver.py`` (a
Python that has done the imports once): a few hundred commands per leg would otherwise spend
most of their CPU importing. ``run_enverif`` runs one to its end; ``spawn_enverif`` starts a
long-running one (``serve``, ``worker``, ``dev``) and returns a handle like
``subprocess.Popen``'s. ``ENVERIF_TEST_CLI_EXEC=1`` runs the installed script instead.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import json
import os
import select
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
from typing import Any

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
    if _exec(env):
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


def spawn_enverif(
    args: list[str], *, env: Mapping[str, str], cwd: Path | str | None = None, stdin: Any = None,
    stdout: Any = None, stderr: Any = None, text: bool = False,
) -> Any:  # fmt: skip
    """``subprocess.Popen([enverif, *args], ...)`` for a long-running command (``serve``,
    ``worker``, ``dev``): a child of the fork server, with a handle like Popen's
    (``ForkedProcess``), or the installed script under ``ENVERIF_TEST_CLI_EXEC=1`` or
    different ``PYTHON*`` variables."""
    if _exec(env):
        return subprocess.Popen(
            [*ENVERIF, *args], env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text
        )
    proc = _forkserver().spawn(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr)
    if text:
        proc.stdout, proc.stderr = (
            io.TextIOWrapper(stream) if stream is not None else None for stream in (proc.stdout, proc.stderr)
        )
    return proc


def _exec(env: Mapping[str, str]) -> bool:
    return os.environ.get("ENVERIF_TEST_CLI_EXEC") == "1" or _python_env(env) != _python_env(os.environ)


class ForkedProcess:
    """A child of the fork server, with the part of ``subprocess.Popen``'s interface tests
    use: ``pid``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``,
    ``returncode`` and ``stdin``/``stdout``/``stderr`` for ``PIPE``. It is not this process's
    child: the server reaps it and sends its status over the connection, and signals go
    through a pidfd, so they reach that process or none (never a reused pid)."""

    def __init__(
        self, server: str, command: list[str], args: list[str], env: Mapping[str, str],
        cwd: Path | str | None, stdin: Any, stdout: Any, stderr: Any,
    ) -> None:  # fmt: skip
        self.args = command
        self.returncode: int | None = None
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        ours: list[int] = []  # descriptors opened here for the child, closed once sent

        def child_fd(spec: Any, inherit: int, name: str) -> int:
            if spec is None:
                return inherit
            if spec == subprocess.DEVNULL:
                ours.append(os.open(os.devnull, os.O_RDWR))
                return ours[-1]
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                mine, theirs = (write, read) if name == "stdin" else (read, write)
                setattr(self, name, os.fdopen(mine, "wb" if name == "stdin" else "rb"))
                ours.append(theirs)
                return theirs
            return spec if isinstance(spec, int) else int(spec.fileno())

        fds = [child_fd(stdin, 0, "stdin"), child_fd(stdout, 1, "stdout")]
        fds.append(fds[1] if stderr == subprocess.STDOUT else child_fd(stderr, 2, "stderr"))
        request = {"args": args, "env": dict(env), "cwd": str(cwd or os.getcwd())}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(server)
            socket.send_fds(self._conn, [b"F"], fds)
            self._conn.sendall(json.dumps(request).encode() + b"\n")
            answer, pidfds, _, _ = socket.recv_fds(self._conn, 64, 1)
        finally:
            for fd in ours:
                os.close(fd)
        if not pidfds:
            raise RuntimeError(f"the fork server did not start {command}")
        self._pidfd = pidfds[0]
        line, _, self._rest = answer.partition(b"\n")
        self.pid = int(line)

    def poll(self) -> int | None:
        if self.returncode is None and (self._rest or select.select([self._conn], [], [], 0)[0]):
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not self._rest and not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._read_status()
        assert self.returncode is not None
        return self.returncode

    def __del__(self) -> None:
        # A handle dropped before its status came (as a Popen may be): let go of the
        # connection and the pidfd without a ResourceWarning.
        if self.returncode is None and hasattr(self, "_pidfd"):
            self._conn.close()
            os.close(self._pidfd)

    def _read_status(self) -> None:
        data = self._rest
        while not data.endswith(b"\n"):
            chunk = self._conn.recv(64)
            if not chunk:  # the server is gone (the session is ending): so is its status
                break
            data += chunk
        self.returncode = int(data) if data.endswith(b"\n") else -signal.SIGKILL
        self._conn.close()
        os.close(self._pidfd)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # it has just ended; its status is on its way

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


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
        try:
            with open(os.devnull, "rb") as stdin, open(out, "wb") as stdout, open(err, "wb") as stderr:
                proc = self.spawn(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr)
            try:
                returncode = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(command, timeout_s, _read(out), _read(err)) from None
            return subprocess.CompletedProcess(command, returncode, _read(out), _read(err))
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)

    def spawn(
        self, args: list[str], *, env: Mapping[str, str], cwd: Path | str | None, stdin: Any,
        stdout: Any, stderr: Any,
    ) -> ForkedProcess:  # fmt: skip
        """A child running ``enverif ARGS``; the streams as ``subprocess.Popen`` takes them
        (``None``, ``DEVNULL``, ``PIPE``, ``STDOUT`` for stderr, a file or a descriptor)."""
        return ForkedProcess(self.path, [*ENVERIF, *args], args, env, cwd, stdin, stdout, stderr)

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
