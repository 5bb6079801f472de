"""Like for like in the capacity bench: the server on its own core, every client on the others, and each
client's CPU time measured (issue 43).

- `pin_tree(pids, cpus)`: every thread of the processes (and their descendants) to `cpus`.
- `cpus_of(pid)`: the cores a process's threads may run on (their union), as the report shows them.
- `ClientCpu`: the CPU seconds (user + system) a method's client spent: the bench's own main thread (ours'
  search runs there) plus its child processes, excluding the server's. Two counters, each a lower bound:
  the children reaped meanwhile (`os.times`, which includes their own reaped descendants) and the
  processes seen in /proc every `interval_s` (utime + stime of each, last seen; a process that exits
  between two looks loses its last < interval_s; one alive at the start counts only what it used after). The
  larger is reported.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stat:
    """What /proc/<pid>/stat says of one process."""

    ppid: int
    started: int  # clock ticks after boot: with the pid, one process
    cpu_ticks: int  # utime + stime


def read_stat(text: str) -> Stat:
    """Parse /proc/<pid>/stat (the command name, in parentheses, may hold spaces)."""
    rest = text[text.rindex(")") + 2 :].split()
    return Stat(ppid=int(rest[1]), started=int(rest[19]), cpu_ticks=int(rest[11]) + int(rest[12]))


def snapshot(proc: Path = PROC) -> dict[int, Stat]:
    """Every process's stat now (one that exits meanwhile is skipped)."""
    stats: dict[int, Stat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = read_stat((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue
    return stats


def descendants(root: int, stats: dict[int, Stat], exclude: frozenset[int] = frozenset()) -> set[int]:
    """The processes under `root` (not itself), leaving out the trees of `exclude`."""
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    found: set[int] = set()
    todo = [c for c in children.get(root, []) if c not in exclude]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += [c for c in children.get(pid, []) if c not in exclude]
    return found


def core_busy_s(cpus: set[int], proc: Path = PROC) -> float:
    """Seconds the cores spent busy since boot (every /proc/stat state but idle and iowait), summed."""
    busy = 0
    for line in (proc / "stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]
            busy += sum(ticks) - ticks[3] - ticks[4]
    return busy * TICK_S


def tree_cpu_s(roots: frozenset[int]) -> float:
    """CPU seconds the live processes under (and of) `roots` have used so far."""
    stats = snapshot()
    pids = set(roots) & set(stats)
    for root in roots:
        pids |= descendants(root, stats)
    return sum(stats[pid].cpu_ticks for pid in pids) * TICK_S


def pin_tree(pids: list[int], cpus: set[int]) -> int:
    """Move every thread of `pids` and their descendants to `cpus`; the number of threads moved."""
    stats = snapshot()
    every = set(pids)
    for pid in pids:
        every |= descendants(pid, stats)
    moved = 0
    for pid in sorted(every):
        for task in _tasks(pid):
            try:
                os.sched_setaffinity(task, cpus)
                moved += 1
            except OSError:  # exited meanwhile
                continue
    return moved


def cpus_of(pid: int) -> list[int]:
    """The union of the cores the process's threads may run on."""
    cores: set[int] = set()
    for task in _tasks(pid):
        try:
            cores |= os.sched_getaffinity(task)
        except OSError:
            continue
    return sorted(cores)


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in (PROC / str(pid) / "task").iterdir()]
    except OSError:
        return []


class ClientCpu:
    """The CPU seconds of what runs between `start` and `stop`: see the module's docstring."""

    def __init__(self, server_pids: frozenset[int], interval_s: float = 0.5) -> None:
        self.server_pids = server_pids
        self.interval_s = interval_s
        self._seen: dict[tuple[int, int], int] = {}
        self._before: dict[tuple[int, int], int] = {}  # what processes alive at the start had already used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="client-cpu", daemon=True)
        self._own = self._children = self._wall = 0.0

    def __enter__(self) -> ClientCpu:
        times = os.times()
        self._own, self._children, self._wall = time.thread_time(), times.children_user + times.children_system, 0.0
        self._started = time.monotonic()
        self._look()
        self._before = dict(self._seen)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()
        times = os.times()
        self._own = time.thread_time() - self._own
        self._children = times.children_user + times.children_system - self._children
        self._wall = time.monotonic() - self._started

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._look()

    def _look(self) -> None:
        stats = snapshot()
        for pid in descendants(os.getpid(), stats, self.server_pids):
            stat = stats[pid]
            key = (pid, stat.started)
            self._seen[key] = max(self._seen.get(key, 0), stat.cpu_ticks)

    def to_json(self) -> dict[str, Any]:
        """cpu_s (the larger lower bound plus the bench's main thread), both counters, processes seen, and
        the share of one core it kept busy over the method's wall time."""
        sampled = sum(ticks - self._before.get(key, 0) for key, ticks in self._seen.items()) * TICK_S
        cpu = self._own + max(sampled, self._children)
        return {
            "cpu_s": cpu,
            "main_thread_s": self._own,
            "children_reaped_s": self._children,
            "children_sampled_s": sampled,
            "processes_seen": len(self._seen),
            "wall_s": self._wall,
            "cores_busy": cpu / self._wall if self._wall > 0 else None,
        }
