"""Where the machine's CPU went during a timed window: per process group, and machine-wide.

A scaling figure (2 worker processes against 1) says little on its own: on a 2-core machine
where the worker, the page server, MariaDB, Redis and the benchmark itself already keep both
cores busy with one worker process, a second one has nothing to run on. So a scenario is
measured with a ``CpuMeter`` over exactly its timed window:

- the machine's busy CPU from ``/proc/stat`` (busy = total - idle - iowait), as the average
  number of cores busy;
- the CPU per run of each named process group (``/proc/PID/stat``, user + system, all
  threads), and "other": the machine's busy CPU minus the groups' (the kernel's own work,
  anything else running, and any group whose process could not be found or read; it may
  come out a little below zero, as the machine's and each process's CPU are counted in
  separate clock ticks);
- the bound that follows: the runs/s the machine would reach with every core busy and the
  same total CPU per run, ``cores / total CPU s per run``.

Linux only, like the rest of ``bench/``. A process that cannot be found or read is reported
as ``None`` (its CPU lands in "other"); the meter never fails a benchmark for it.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    # The command name (field 2) may hold spaces or parentheses: split after its last ")".
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def machine_busy_s() -> tuple[float, int]:
    """CPU seconds the machine's cores have been busy since boot, summed over cores, and the
    number of cores (``/proc/stat``)."""
    lines = Path("/proc/stat").read_text().splitlines()
    # user nice system idle iowait irq softirq steal; guest and guest_nice are already
    # counted in user and nice, so they are left out of the total.
    jiffies = [int(v) for v in lines[0].split()[1:9]]
    idle = jiffies[3] + jiffies[4]
    cores = sum(1 for line in lines[1:] if line.startswith("cpu"))
    return (sum(jiffies) - idle) / CLOCK_TICKS_PER_S, cores


def pids_named(name: str) -> list[int] | None:
    """The pids of the processes whose name is exactly ``name`` (``pgrep -x``), or None when
    there is none, ``pgrep`` is missing, or one of them cannot be read."""
    try:
        found = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True, check=False)
    except OSError:
        return None
    pids = [int(p) for p in found.stdout.split()]
    try:
        for pid in pids:
            process_cpu_s(pid)
    except OSError:
        return None
    return pids or None


@dataclass(frozen=True)
class CpuShare:
    """What a ``CpuMeter`` saw over one window of ``runs`` runs."""

    cores: int
    cores_busy: float
    # Group name -> CPU ms per run; None for a group whose processes were not found or
    # could not be read. "other" is last.
    cpu_ms_per_run: dict[str, float | None]
    total_cpu_ms_per_run: float

    @property
    def bound_runs_per_s(self) -> float:
        """Runs/s with every core busy and the same total CPU per run."""
        return self.cores * 1000 / self.total_cpu_ms_per_run

    def rounded_ms_per_run(self, group: str, digits: int = 1) -> float | None:
        ms = self.cpu_ms_per_run[group]
        return None if ms is None else round(ms, digits)

    def line(self) -> str:
        groups = ", ".join(
            f"{name} {'n/a' if ms is None else f'{ms:.1f}'}" for name, ms in self.cpu_ms_per_run.items()
        )
        missing = [name for name, ms in self.cpu_ms_per_run.items() if ms is None]
        note = f" ({', '.join(missing)} not found or not readable: counted in other)" if missing else ""
        return (
            f"machine {self.cores_busy:.2f} of {self.cores} cores busy; CPU ms per run: {groups}, "
            f"total {self.total_cpu_ms_per_run:.1f}{note}; "
            f"all cores busy at that CPU per run: {self.bound_runs_per_s:.1f} runs/s"
        )

    def report(self, scenario: str) -> dict[str, object]:
        """The JSON report's entries, each key ending in ``scenario``."""
        return {
            f"machine_cores_busy_{scenario}": round(self.cores_busy, 2),
            f"cpu_ms_per_run_by_process_{scenario}": {
                name: self.rounded_ms_per_run(name) for name in self.cpu_ms_per_run
            },
            f"machine_cpu_ms_per_run_{scenario}": round(self.total_cpu_ms_per_run, 1),
            f"runs_per_s_bound_all_cores_busy_{scenario}": round(self.bound_runs_per_s, 1),
        }


@dataclass
class CpuMeter:
    """CPU used by named process groups and the whole machine between ``start()`` and
    ``stop()``. ``groups`` maps a name to its pids, or None when they are unknown."""

    groups: dict[str, list[int] | None]
    _groups_started_s: dict[str, float | None] = field(default_factory=dict, init=False)
    _machine_started_s: float = field(default=0.0, init=False)
    _wall_started_s: float = field(default=0.0, init=False)

    def start(self) -> None:
        self._groups_started_s = {name: self._group_cpu_s(pids) for name, pids in self.groups.items()}
        self._machine_started_s, _ = machine_busy_s()
        self._wall_started_s = time.perf_counter()

    def stop(self, runs: int) -> CpuShare:
        wall_s = time.perf_counter() - self._wall_started_s
        machine_s, cores = machine_busy_s()
        machine_s -= self._machine_started_s
        per_run: dict[str, float | None] = {}
        for name, pids in self.groups.items():
            now_s, then_s = self._group_cpu_s(pids), self._groups_started_s[name]
            per_run[name] = None if now_s is None or then_s is None else (now_s - then_s) * 1000 / runs
        known_ms = sum(ms for ms in per_run.values() if ms is not None)
        per_run["other"] = machine_s * 1000 / runs - known_ms
        return CpuShare(
            cores=cores,
            cores_busy=machine_s / wall_s,
            cpu_ms_per_run=per_run,
            total_cpu_ms_per_run=machine_s * 1000 / runs,
        )

    @staticmethod
    def _group_cpu_s(pids: list[int] | None) -> float | None:
        if pids is None:
            return None
        try:
            return sum(process_cpu_s(pid) for pid in pids)
        except OSError:
            return None
