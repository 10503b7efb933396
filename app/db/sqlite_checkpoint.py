"""WAL checkpoints off the event loop (docs/operating/sqlite.md).

A checkpoint copies the pages the WAL holds into the database file and syncs both: the
one ``fsync`` of ``synchronous=NORMAL``, which can take milliseconds. SQLite runs one, by
default, inside the ``COMMIT`` that takes the WAL past 1,000 pages, on whichever thread made
the commit: the event loop's, with ``app.db.sqlite_driver``. So that driver's connections
never checkpoint (``wal_autocheckpoint=0``), and every ``CHECKPOINT_EVERY_COMMITS`` commits
of the process to a database file, a daemon thread opens a connection of its own and runs a
passive checkpoint: it takes no lock the writers or readers wait for, and copies only what
no reader still needs. SQLite still checkpoints when the last connection to the file closes.
"""

from __future__ import annotations

import sqlite3
import threading

CHECKPOINT_EVERY_COMMITS = 100  # a run's commit writes a few pages: ~ SQLite's 1,000 pages

_lock = threading.Lock()
_commits: dict[str, int] = {}
_running: set[str] = set()


def committed(database: str) -> None:
    """Count a commit to ``database``; start a checkpoint when enough have been made and
    none is running."""
    with _lock:
        count = _commits.get(database, 0) + 1
        if count < CHECKPOINT_EVERY_COMMITS or database in _running:
            _commits[database] = count
            return
        _commits[database] = 0
        _running.add(database)
    threading.Thread(
        target=_checkpoint, args=(database,), name="enverif-sqlite-checkpoint", daemon=True
    ).start()


def _checkpoint(database: str) -> None:
    try:
        raw = sqlite3.connect(database, timeout=0, check_same_thread=False)
        try:
            raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            raw.close()
    except sqlite3.Error:
        pass  # the next one will try again; a commit never depends on a checkpoint
    finally:
        with _lock:
            _running.discard(database)
