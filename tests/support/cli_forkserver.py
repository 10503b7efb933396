"""A fork server for the ``enverif`` command in tests: one Python process that has imported
``app.cli`` (and the database drivers) once, then forks a child per command.

Starting ``enverif`` costs about a second of CPU, most of it imports (SQLAlchemy, alembic,
pydantic); the integration suite runs a few hundred commands per database leg on a machine
with two cores. A forked child is still a process of its own: its own environment, working
directory, stdin (``/dev/null``), stdout and stderr (files at the OS level, so what C code
writes is caught too), exit code, and the same ``sys.exit(main())`` the console script does.
What it skips is only the interpreter start and the imports. ``tests/support/cli.py`` talks to
it; ``ENVERIF_TEST_CLI_EXEC=1`` runs the installed script instead, and so does a command
whose ``PYTHON*`` variables differ from the session's (they act at interpreter start).

Protocol, one connection per command on a unix socket: the client sends one JSON line
(``args``, ``env``, ``cwd``, ``stdout``, ``stderr``: file paths); the child answers with its
pid, then its exit code, one line each. A connection that closes without a code is a child
that was killed.

Run as ``python cli_forkserver.py SOCKET_PATH``; it prints ``ready`` once it listens.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import socket
import sys
import traceback

# sys.path[0] is this file's folder (tests/support, whose workers.py would shadow the
# ``workers`` package); the console script has its own folder there instead.
sys.path[0] = os.path.dirname(sys.executable)

# The imports every command pays for; a child that needs more imports it itself.
import sqlalchemy.dialects.mysql.asyncmy  # noqa: E402
import sqlalchemy.dialects.sqlite.aiosqlite  # noqa: E402, F401

import app.cli  # noqa: E402
import app.db.migrate  # noqa: E402


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(conn: socket.socket) -> None:
    """In the forked child: become the command, run it, report its exit code, exit."""
    request = json.loads(conn.makefile("rb").readline())
    conn.sendall(f"{os.getpid()}\n".encode())
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["enverif", *request["args"]]
    try:
        code = app.cli.main()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # as the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    # What a normal interpreter exit runs (logging.shutdown among them), then the streams.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        conn.sendall(f"{code}\n".encode())
    finally:
        os._exit(code & 0xFF)


def _reap() -> None:
    """Wait for the children that ended (their exit code went over their connection), so
    their CPU time counts in this process's, and so in the test session's."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        # The test session holds our stdin: when it ends (or dies), so do we.
        readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        _reap()
        if sys.stdin in readable:
            return
        if not readable:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                _child(conn)
            finally:
                os._exit(70)  # only reached if _child itself failed
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
