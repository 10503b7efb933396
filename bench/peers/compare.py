"""``make bench-peers``: Enverif's durable-write run beside DBOS, LangGraph and a raw floor.

    .venv/bin/python bench/peers/compare.py [--runs 500] [--in-flight 16] [--repetitions 3]
                                            [--only floor,enverif,dbos,langgraph]

The workload of ``bench/throughput.py``'s write scenario, on each engine: a 3-call agent run
with a deterministic fake model, each call recorded durably before the next one starts, 500
runs with 16 in flight; the "tool" is a local page server on 127.0.0.1 in another process.

- ``floor``: a raw script, 3 GETs and 3 INSERT+COMMIT per run (``floor/run.py``);
- ``enverif``: ``bench/throughput.py``'s write scenario through one in-process worker
  (``enverif/run.py``, in the project's ``.venv``);
- ``dbos``: a DBOS workflow of 3 steps (``dbos/run.py``);
- ``langgraph``: a ReAct agent with a fake chat model and 3 tool calls, checkpointed at every
  superstep (``langgraph/run.py``).

Each engine runs in its own process, from its own venv (``bench/peers/<peer>/.venv``, pinned
in its ``requirements.txt``; ``make bench-peers`` creates them on first use), on a fresh
database: a SQLite file in a temporary directory, a new MariaDB database, a new PostgreSQL
database (on the server at ``--postgres-url`` if one answers there, else on a throwaway
cluster started with ``initdb``/``pg_ctl`` on loopback in a temporary directory and stopped
afterwards). Over each timed window the CPU of the engine's process (all its threads) and of
the database server's processes is measured (``bench/cpu.py``); on SQLite the database is in
the engine's process. Every configuration runs once per repetition, the repetitions one after
the other (so the load of the machine falls on all alike), and the table gives the medians;
"x floor" is the median over repetitions of runs/s over the floor's runs/s on the same
database in the same repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.cpu import CpuMeter, pids_named  # noqa: E402  (after the path entry)

PEERS = Path(__file__).resolve().parent
ENGINES = ("floor", "enverif", "dbos", "langgraph")
DATABASES = ("sqlite", "mariadb", "postgres")
# Which engine runs on which database, in the order of the table.
CONFIGURATIONS = (
    ("floor", "sqlite"), ("floor", "mariadb"), ("floor", "postgres"),
    ("enverif", "sqlite"), ("enverif", "mariadb"),
    ("dbos", "sqlite"), ("dbos", "postgres"),
    ("langgraph", "sqlite"), ("langgraph", "mariadb"),
)  # fmt: skip
DESCRIPTIONS = {
    "floor": "raw script: 3 GETs + 3 INSERT+COMMIT",
    "enverif": "Enverif worker, webhook.post x3",
    "dbos": "DBOS workflow, 3 steps",
    "langgraph": "LangGraph ReAct agent, checkpoint per superstep",
}
RUNNER_TIMEOUT_S = 900


@dataclass(frozen=True)
class Measurement:
    """One engine's timed window on one database in one repetition."""

    engine: str
    database: str
    repetition: int
    runs_per_s: float
    main_cpu_ms: float | None  # per run: the engine's process, all its threads
    db_cpu_ms: float | None  # per run: the database server's processes (None on SQLite)
    redis_cpu_ms: float | None = None  # per run, Enverif only


@dataclass(frozen=True)
class Row:
    """The medians of one engine on one database over the repetitions."""

    engine: str
    database: str
    runs_per_s: float
    ratio_to_floor: float | None
    main_cpu_ms: float | None
    db_cpu_ms: float | None
    redis_cpu_ms: float | None
    repetitions: int


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(measurements: list[Measurement]) -> list[Row]:
    """One row per (engine, database), in the order first measured: the medians over the
    repetitions, and the median ratio to the floor on the same database in the same
    repetition (None where the floor did not run on that database in any of them)."""
    floor = {(m.database, m.repetition): m.runs_per_s for m in measurements if m.engine == "floor"}
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.engine, m.database), []).append(m)
    rows = []
    for (engine, database), ms in groups.items():
        ratios: list[float | None] = [
            m.runs_per_s / floor[(database, m.repetition)] if (database, m.repetition) in floor else None
            for m in ms
        ]
        rows.append(
            Row(
                engine=engine,
                database=database,
                runs_per_s=statistics.median(m.runs_per_s for m in ms),
                ratio_to_floor=_median(ratios),
                main_cpu_ms=_median([m.main_cpu_ms for m in ms]),
                db_cpu_ms=_median([m.db_cpu_ms for m in ms]),
                redis_cpu_ms=_median([m.redis_cpu_ms for m in ms]),
                repetitions=len(ms),
            )
        )
    return rows


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _cpu(row: Row) -> str:
    if row.main_cpu_ms is None:
        return "n/a"
    text = f"{row.main_cpu_ms:.1f}"
    if row.db_cpu_ms is not None:
        text += f" + {row.db_cpu_ms:.1f}"
    elif row.database != "sqlite":
        text += " + n/a"
    if row.redis_cpu_ms is not None:
        text += f" (+ redis {row.redis_cpu_ms:.1f})"
    return text


def format_table(rows: list[Row]) -> str:
    """The Markdown table docs/performance.md carries: engine, database, runs/s, CPU ms per
    run (main process + database server; on SQLite the database is in the main process),
    ratio to the floor."""
    lines = [
        "| engine | database | runs/s | CPU ms per run (main + db) | x floor |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        ratio = "n/a" if row.ratio_to_floor is None else f"{row.ratio_to_floor:.2f}"
        lines.append(
            f"| {DESCRIPTIONS.get(row.engine, row.engine)} | {row.database} | {row.runs_per_s:.1f} "
            f"| {_cpu(row)} | {ratio} |"
        )
    return "\n".join(lines)


def format_targets(rows: list[Row]) -> str:
    """Issue 28's targets this comparison measures, each beside its figure and whether it was
    met; a target whose rows did not run (``--only``) is left out."""
    found = {(r.engine, r.database): r for r in rows}
    lines = []

    def ratio(engine: str, database: str) -> float | None:
        row = found.get((engine, database))
        return None if row is None else row.ratio_to_floor

    def say(target: str, measured: str, met: bool) -> None:
        lines.append(f"- {target}: {measured} ({'met' if met else 'not met'})")

    for database, bound in (("sqlite", 0.40), ("mariadb", 0.45)):
        got = ratio("enverif", database)
        if got is not None:
            say(f"Enverif on {database} >= {bound:.2f} x floor", f"{got:.2f}", got >= bound)
    enverif, dbos = ratio("enverif", "sqlite"), ratio("dbos", "sqlite")
    if enverif is not None and dbos is not None:
        say("Enverif ahead of DBOS on sqlite", f"{enverif:.2f} against {dbos:.2f} x floor", enverif > dbos)
    enverif_row, floor_row = found.get(("enverif", "mariadb")), found.get(("floor", "mariadb"))
    if enverif_row is not None and enverif_row.db_cpu_ms is not None:
        beside = (
            ""
            if floor_row is None or floor_row.db_cpu_ms is None
            else f" (the floor's: {floor_row.db_cpu_ms:.1f})"
        )
        say("mariadbd <= 1 ms of CPU per Enverif run", f"{enverif_row.db_cpu_ms:.1f} ms{beside}",
            enverif_row.db_cpu_ms <= 1.0)  # fmt: skip
    return "\n".join(lines)


# --- running the engines ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def peer_python(engine: str) -> Path:
    """The interpreter an engine runs on: its own venv; Enverif the project's."""
    if engine == "enverif":
        return Path(sys.executable)
    python = PEERS / engine / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run `make bench-peers`, which creates the peers' venvs")
    return python


class Databases:
    """Fresh databases for each measurement, and their server's processes."""

    def __init__(self, mariadb_url: str, postgres_url: str, workdir: Path) -> None:
        self.mariadb_url = mariadb_url.rstrip("/")
        self.postgres_url = postgres_url.rstrip("/")
        self.workdir = workdir
        self._cluster: Path | None = None
        self._postgres_data: str | None = None

    def start(self, needed: set[str]) -> None:
        if "postgres" in needed:
            if not self._postgres_answers():
                self._start_cluster()
            self.pids("postgres")

    def stop(self) -> None:
        if self._cluster is not None:
            subprocess.run(_as_postgres(["pg_ctl", "-D", str(self._cluster / "data"), "-m", "fast", "-w",
                                         "stop"]), check=False, capture_output=True)  # fmt: skip

    def _postgres_answers(self) -> bool:
        return subprocess.run(["psql", self.postgres_url + "/postgres", "-qAtc", "SELECT 1"],
                              capture_output=True, check=False).returncode == 0  # fmt: skip

    def _start_cluster(self) -> None:
        """A throwaway PostgreSQL cluster in a temporary directory, on loopback only."""
        cluster = self.workdir / "postgres"
        cluster.mkdir()
        if os.geteuid() == 0:  # initdb refuses to run as root: the cluster is postgres's
            self.workdir.chmod(0o755)  # a TemporaryDirectory is 0700
            shutil.chown(cluster, "postgres")
        port = _free_port()
        data = cluster / "data"
        subprocess.run(_as_postgres(["initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]),
                       check=True, capture_output=True)  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {cluster}"
        subprocess.run(_as_postgres(["pg_ctl", "-D", str(data), "-o", options, "-l", str(cluster / "log"),
                                     "-w", "start"]), check=True, capture_output=True)  # fmt: skip
        self._cluster = cluster
        self.postgres_url = f"postgresql://postgres@127.0.0.1:{port}"
        print(f"(no PostgreSQL answered: started a throwaway cluster on 127.0.0.1:{port})", flush=True)

    @contextlib.contextmanager
    def fresh(self, database: str) -> Iterator[str]:
        """A new empty database: its URL (a file path for SQLite); dropped afterwards."""
        name = f"bench_peers_{uuid.uuid4().hex[:8]}"
        if database == "sqlite":
            directory = Path(tempfile.mkdtemp(dir=self.workdir))
            try:
                yield str(directory / f"{name}.db")
            finally:
                shutil.rmtree(directory)
        elif database == "mariadb":
            asyncio.run(_mariadb(self.mariadb_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            try:
                yield f"{self.mariadb_url}/{name}"
            finally:
                asyncio.run(_mariadb(self.mariadb_url, f"DROP DATABASE IF EXISTS `{name}`"))
        else:
            self._psql(f"CREATE DATABASE {name}")
            try:
                yield f"{self.postgres_url}/{name}"
            finally:
                self._psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def _psql(self, sql: str) -> None:
        subprocess.run(["psql", self.postgres_url + "/postgres", "-qc", sql], check=True, capture_output=True)

    def _psql_value(self, sql: str) -> str:
        return subprocess.run(["psql", self.postgres_url + "/postgres", "-qAtc", sql], check=True,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip

    def pids(self, database: str) -> list[int] | None:
        """The database server's processes, read after the engine has opened its connections
        (PostgreSQL forks one per connection). For PostgreSQL, the postmaster of the server
        in use and its children, not every ``postgres`` process of the machine."""
        if database == "sqlite":
            return None
        if database == "mariadb":
            return pids_named("mariadbd")
        try:
            if self._postgres_data is None:
                # Read once: the backend of this very query is a child that is about to exit.
                self._postgres_data = self._psql_value(
                    "SELECT setting FROM pg_settings WHERE name = 'data_directory'"
                )
            postmaster = int((Path(self._postgres_data) / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError, subprocess.CalledProcessError):
            return None
        found = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False)
        return [postmaster, *(int(pid) for pid in found.stdout.split())]


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


async def _mariadb(server_url: str, sql: str) -> None:
    from sqlalchemy import text

    from app.db.session import create_engine

    engine = create_engine(server_url.replace("mysql://", "mysql+asyncmy://", 1) + "/")
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def measure(engine: str, database: str, repetition: int, url: str, server: str,
            args: argparse.Namespace, databases: Databases) -> Measurement:  # fmt: skip
    """One timed window: the runner's warm-up, then its runs between ``go`` and its report."""
    command = [str(peer_python(engine)), str(PEERS / engine / "run.py"), "--db", database, "--url", url,
               "--server", server, "--runs", str(args.runs), "--in-flight", str(args.in_flight)]  # fmt: skip
    runner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert runner.stdin is not None and runner.stdout is not None
    try:
        for line in runner.stdout:
            if line.strip() == "ready":
                break
            print(f"  [{engine}] {line.rstrip()}", flush=True)
        else:
            raise RuntimeError(f"{engine} on {database} exited before it was ready ({runner.wait()})")
        # One group per database process: one that exits in the window (an autovacuum
        # worker) loses its own CPU, not the whole server's.
        db_pids = databases.pids(database) or []
        groups: dict[str, list[int] | None] = {
            "main": [runner.pid],
            **{f"db {pid}": [pid] for pid in db_pids},
        }
        if engine == "enverif":
            groups["redis"] = pids_named("redis-server")
        meter = CpuMeter(groups)
        meter.start()
        runner.stdin.write("go\n")
        runner.stdin.flush()
        report = json.loads(runner.stdout.readline())
        share = meter.stop(report["runs"])
        runner.wait(timeout=RUNNER_TIMEOUT_S)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    if runner.returncode != 0:
        raise RuntimeError(f"{engine} on {database} exited with {runner.returncode}")
    per_run = share.cpu_ms_per_run
    db_ms = [ms for name, ms in per_run.items() if name.startswith("db ") and ms is not None]
    return Measurement(
        engine=engine, database=database, repetition=repetition,
        runs_per_s=report["runs"] / report["elapsed_s"],
        main_cpu_ms=per_run["main"], db_cpu_ms=sum(db_ms) if db_ms else None, redis_cpu_ms=per_run.get("redis"),
    )  # fmt: skip


def _engines(value: str) -> list[str]:
    chosen = {name.strip() for name in value.split(",")}
    if not chosen <= set(ENGINES):
        raise argparse.ArgumentTypeError(f"choose among {','.join(ENGINES)}, not {value!r}")
    return [name for name in ENGINES if name in chosen]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--only", type=_engines, default=list(ENGINES), metavar="ENGINES",
                        help=f"comma list among {','.join(ENGINES)} (default: all)")  # fmt: skip
    parser.add_argument("--mariadb-url", default="mysql://root@127.0.0.1:3306")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432",
                        help="a server to create databases on; if none answers, a throwaway cluster")  # fmt: skip
    parser.add_argument("--json", help="also write the measurements and the rows to this file")
    args = parser.parse_args()
    configurations = [(e, d) for e, d in CONFIGURATIONS if e in args.only]
    for engine in {e for e, _ in configurations}:
        peer_python(engine)

    from bench.throughput import PAGE_SERVER as page_server

    port = _free_port()
    server = f"http://127.0.0.1:{port}"
    page = subprocess.Popen([sys.executable, "-c", page_server.format(port=port)])
    measurements: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="enverif-bench-peers-") as workdir:
        databases = Databases(args.mariadb_url, args.postgres_url, Path(workdir))
        try:
            databases.start({d for _, d in configurations})
            time.sleep(1.0)  # the page server's bind
            for repetition in range(1, args.repetitions + 1):
                for engine, database in configurations:
                    with databases.fresh(database) as url:
                        m = measure(engine, database, repetition, url, server, args, databases)
                    measurements.append(m)
                    print(f"repetition {repetition}: {engine} on {database}: {m.runs_per_s:.1f} runs/s, "
                          f"CPU ms per run: main {_ms(m.main_cpu_ms)}, db {_ms(m.db_cpu_ms)}", flush=True)  # fmt: skip
        finally:
            databases.stop()
            page.terminate()
            page.wait()
    rows = summarise(measurements)
    print(f"\n{args.runs} runs, {args.in_flight} in flight, medians of {args.repetitions} repetitions; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end\n")  # fmt: skip
    print(format_table(rows))
    targets = format_targets(rows)
    if targets:
        print(f"\nTargets (issue 28):\n{targets}")
    if args.json:
        Path(args.json).write_text(json.dumps({"measurements": [asdict(m) for m in measurements],
                                               "rows": [asdict(r) for r in rows]}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
