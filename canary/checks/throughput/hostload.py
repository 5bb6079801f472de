"""CPU used by processes outside a measurement: is the machine quiet enough to believe the numbers?

A throughput measurement on a shared machine measures the machine as much as the server: on two
cores, a test suite or a compiler next to a P/D pair halves its request rate, and a candidate
measured then looks like a 60% regression against a baseline measured in a quiet minute (seen on
this project's own machine). Before and after each load run the canary reads the machine's busy
CPU time (/proc/stat: everything but idle and iowait) and the CPU time of its own processes (the
cell's servers by process group and process tree, the canary and the children it waited for); the difference is
*foreign* CPU, reported in cores. Above the configured bound the measurement is invalid and taken
again (checks.throughput.max_foreign_cpu_cores). Linux only; elsewhere, and for servers without
a local process (Kubernetes, an endpoint), nothing is measured and nothing is gated.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    """Machine-wide busy CPU seconds and this measurement's own, at one moment (monotonic `at`)."""

    at: float
    busy_s: float
    ours_s: float


@dataclass(frozen=True)
class ForeignLoad:
    """CPU used outside the measurement between two samples."""

    foreign_cores: float
    busy_cores: float
    ours_cores: float
    wall_s: float

    def describe(self) -> str:
        """One line for evidence and summaries."""
        machine = f"the machine {self.busy_cores:.2f} of {os.cpu_count() or 1}"
        return (
            f"other processes used {self.foreign_cores:.2f} cores (the cell and the canary "
            f"{self.ours_cores:.2f}, {machine}) over {self.wall_s:.1f} s"
        )


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def machine_busy_s(proc: Path = PROC) -> float:
    """Busy CPU seconds since boot over all CPUs (/proc/stat `cpu` line minus idle and iowait)."""
    fields = (proc / "stat").read_text(encoding="ascii").splitlines()[0].split()
    if fields[0] != "cpu":
        raise ValueError(f"{proc / 'stat'}: first line is not the cpu total")
    values = [float(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / _ticks()


def _stat(pid: str, proc: Path) -> tuple[int, int, float, float] | None:
    """(ppid, pgid, own CPU s, waited children's CPU s) of a process; None if it is gone."""
    try:
        text = (proc / pid / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # after "pid (comm) "
    ppid, pgid = int(rest[1]), int(rest[2])
    utime, stime, cutime, cstime = (float(v) for v in rest[11:15])
    return ppid, pgid, (utime + stime) / _ticks(), (cutime + cstime) / _ticks()


def ours_s(pgids: Collection[int], root: int | None = None, proc: Path = PROC) -> float:
    """CPU seconds of every process in `pgids`, of each of those pids' live descendants (a container's
    init process starts the engine in a process group of its own), and of `root` (default: this
    process) and its live descendants, plus the children each of them has waited for."""
    root = os.getpid() if root is None else root
    table = {int(entry): info for entry in os.listdir(proc) if entry.isdigit() and (info := _stat(entry, proc))}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    mine: set[int] = set()
    stack = [root, *(pid for pid in pgids if pid in table)]
    while stack:
        current = stack.pop()
        if current not in mine:
            mine.add(current)
            stack.extend(children.get(current, []))
    mine |= {pid for pid, info in table.items() if info[1] in pgids}
    return sum(info[2] + info[3] for pid, info in table.items() if pid in mine)


def sample(pgids: Collection[int], proc: Path = PROC) -> CpuSample | None:
    """A sample now; None where /proc cannot be read (not Linux)."""
    try:
        return CpuSample(time.monotonic(), machine_busy_s(proc), ours_s(pgids, proc=proc))
    except (OSError, ValueError, IndexError):
        return None


def foreign_load(before: CpuSample, after: CpuSample) -> ForeignLoad | None:
    """CPU outside the measurement between two samples, in cores; None for an empty interval."""
    wall = after.at - before.at
    if wall <= 0:
        return None
    busy = (after.busy_s - before.busy_s) / wall
    ours = max(0.0, after.ours_s - before.ours_s) / wall
    return ForeignLoad(foreign_cores=max(0.0, busy - ours), busy_cores=busy, ours_cores=ours, wall_s=wall)
