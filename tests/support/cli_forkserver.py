"""A fork server for the ``enverif`` command in tests: one Python process that has imported
``app.cli`` (and the database drivers, the API and the worker) once, then forks a child per
command.

Starting ``enverif`` costs about a second of CPU, most of it imports (SQLAlchemy, alembic,
pydantic), and ``enverif serve`` or ``worker`` three to four (Starlette, strawberry, arq, the
engine); the integration suite runs a few hundred commands and some sixty such processes per
database leg on a machine with two cores. A forked child is still a process of its own: its
own pid, environment, working directory, stdin, stdout and stderr (the client's own file
descriptors, passed over the socket, so what C code writes is caught too), signals, exit
status, and the same ``sys.exit(main())`` the console script does. What it skips is only the
interpreter start and the imports. ``tests/support/cli.py`` talks to it;
``ENVERIF_TEST_CLI_EXEC=1`` runs the installed script instead, and so does a command whose
``PYTHON*`` variables differ from the session's (they act at interpreter start).

This process never starts a thread or an event loop (it checks before each fork): a fork
copies only the forking thread, and a loop's selector and self-pipe would be shared with
the child.

Protocol, one connection per command on a unix socket: the client sends one byte carrying
three file descriptors (the child's stdin, stdout and stderr), then one JSON line (``args``,
``env``, ``cwd``). The server answers with the child's pid on a line, with a pidfd of the
child alongside (so the client signals that process and no other, even once it is reaped),
then, when the child ends, its status as ``subprocess.Popen.returncode`` gives it (the exit
code, or minus the signal that killed it).

Run as ``python cli_forkserver.py SOCKET_PATH``; it prints ``ready`` once it listens.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import sys
import threading
import traceback

# sys.path[0] is this file's folder (tests/support, whose workers.py would shadow the
# ``workers`` package); the console script has its own folder there instead.
sys.path[0] = os.path.dirname(sys.executable)

# The imports every command pays for; a child that needs more imports it itself.
import sqlalchemy.dialects.mysql.asyncmy  # noqa: E402
import sqlalchemy.dialects.sqlite.aiosqlite  # noqa: E402, F401
import uvicorn  # noqa: E402, F401
import uvloop  # noqa: E402, F401

import app.cli  # noqa: E402
import app.db.migrate  # noqa: E402
import app.dev.demo  # noqa: E402
import app.dev.stack  # noqa: E402
import app.main  # noqa: E402
import workers.main  # noqa: E402, F401


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the command, run it, exit with its code."""
    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[call-overload]
    sys.argv = ["enverif", *request["args"]]  # type: ignore[misc]
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
    os._exit(code & 0xFF)


def _read_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the client went away mid-request")
        data += chunk
    return json.loads(data), fds


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    # The live children: pidfd (readable once the child ends) -> (pid, the client's connection).
    children: dict[int, tuple[int, socket.socket]] = {}
    while True:
        # The test session holds our stdin: when it ends (or dies), so do we.
        readable, _, _ = select.select([listener, sys.stdin, *children], [], [])
        for pidfd in [fd for fd in readable if isinstance(fd, int)]:
            pid, conn = children.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            try:
                conn.sendall(f"{_returncode(status)}\n".encode())
            except OSError:
                pass  # the client closed its handle without waiting
            conn.close()
        if sys.stdin in readable:
            return
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _read_request(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        assert threading.active_count() == 1, "the fork server must not fork with threads running"
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                conn.close()
                for pidfd, (_, other) in children.items():
                    os.close(pidfd)
                    other.close()
                _child(request, fds)
            finally:
                os._exit(70)  # only reached if _child itself failed
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(conn, [f"{pid}\n".encode()], [pidfd])
        except OSError:
            pass  # the client is gone; the child still runs, and is reaped when it ends
        children[pidfd] = (pid, conn)


if __name__ == "__main__":
    serve(sys.argv[1])
