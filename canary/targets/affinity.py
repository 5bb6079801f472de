"""Helper processes on their own cores: a P/D pair's API servers, router and load client off decode's core.

On a small CPU machine every process of a P/D pair shares the cores with the engines' compute. vLLM
binds each engine's OpenMP threads to its cores (VLLM_CPU_OMP_THREADS_BIND: prefill 0, decode 1 on 2
cores), but the API servers, the router, the load client and the engines' own I/O threads float, and
the scheduler puts them on decode's core as often as not. Measured on 2 cores (2026-12-03, two P/D
pairs of one image, alternating 16-request blocks): with every thread of those processes moved to
core 0 the pair served 1.5x the requests/s and the spread between deployments fell from 0.085 to
0.033 in log ratio (docs/methodology/throughput.md, "Helper cores").

`pin_helpers` moves, after a deployment is ready, every thread of the deployment's processes to the
helper cores except:
- the engine-core and worker processes (vLLM titles them `VLLM::EngineCore_*`, `VLLM::Worker*`): their
  compute threads are bound by vLLM and their other threads keep the machine's cores, as measured;
- any thread already bound to fewer cores than this process may use (someone placed it on purpose:
  vLLM's OpenMP binding in a process whose title this module does not know).
A thread that exits meanwhile is skipped; any other refusal is reported, never raised: a deployment
whose helpers could not be moved still serves, and the evidence says so.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canary.targets import processes

COMPUTE_TITLES = ("::EngineCore", "::Worker")
"""Process titles (setproctitle, /proc/PID/cmdline) of vLLM's compute processes, left where vLLM put them."""

PROC = Path("/proc")
TITLE_CHARS = 80
"""A process's title in the report is cut to this many characters (a vLLM command line runs to 500)."""


@dataclass
class PinReport:
    """What pin_helpers did."""

    cpus: tuple[int, ...]
    threads_pinned: int = 0
    processes_pinned: list[str] = field(default_factory=list)
    """`pid title` of every process whose threads moved."""
    left_alone: list[str] = field(default_factory=list)
    """`pid title: why` of every process or thread kept where it was."""
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """For Deployment.evidence."""
        return {
            "cpus": list(self.cpus),
            "threads_pinned": self.threads_pinned,
            "processes_pinned": self.processes_pinned,
            "left_alone": self.left_alone,
            "errors": self.errors,
        }


def title(pid: int, proc: Path = PROC) -> str:
    """The process's title: its command line as it shows it (setproctitle rewrites it), else its comm."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        raw = b""
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if text:
        return text
    try:
        return (proc / str(pid) / "comm").read_text(encoding="utf-8").strip()
    except OSError:
        return "?"


def is_compute(process_title: str) -> bool:
    """Whether a title is one of vLLM's compute processes (engine core, worker)."""
    head = process_title.split(" ", 1)[0]
    return any(marker in head for marker in COMPUTE_TITLES)


def thread_ids(pid: int, proc: Path = PROC) -> list[int]:
    """The live threads of a process (none when it is gone)."""
    try:
        return sorted(int(name) for name in os.listdir(proc / str(pid) / "task") if name.isdigit())
    except OSError:
        return []


def check_cpus(cpus: Collection[int]) -> str | None:
    """Why these cores cannot take helpers here (None: they can)."""
    if not cpus:
        return "no cores given"
    allowed = os.sched_getaffinity(0)
    outside = sorted(set(cpus) - allowed)
    if outside:
        return f"core(s) {outside} are not among this process's cores {sorted(allowed)}"
    if set(cpus) == allowed:
        return f"cores {sorted(cpus)} are every core this process has: nothing would be kept for the engines"
    return None


def pin_helpers(root_pids: Iterable[int], cpus: Collection[int]) -> PinReport:
    """Move every helper thread of the processes under `root_pids` (and their descendants) to `cpus`."""
    wanted = set(cpus)
    report = PinReport(cpus=tuple(sorted(wanted)))
    everywhere = os.sched_getaffinity(0)
    pids: list[int] = []
    for root in root_pids:
        pids += [root, *sorted(processes.descendants(root))]
    for pid in dict.fromkeys(pids):
        full = title(pid)
        name = full if len(full) <= TITLE_CHARS else full[: TITLE_CHARS - 3] + "..."
        if is_compute(full):
            report.left_alone.append(f"{pid} {name}: vLLM compute process")
            continue
        moved = 0
        for tid in thread_ids(pid):
            try:
                current = os.sched_getaffinity(tid)
                if current != everywhere:
                    if current != wanted:
                        report.left_alone.append(f"{pid} {name}: thread {tid} bound to {sorted(current)}")
                    continue
                os.sched_setaffinity(tid, wanted)
                moved += 1
            except ProcessLookupError:
                continue
            except OSError as exc:
                report.errors.append(f"{pid} {name}: thread {tid}: {exc}")
        if moved:
            report.threads_pinned += moved
            report.processes_pinned.append(f"{pid} {name}")
    return report


def bind_cores(text: str) -> tuple[int, ...]:
    """The cores a VLLM_CPU_OMP_THREADS_BIND value names ('1', '0|0', '0-3|4-7'); empty for vLLM's words
    ('auto', 'all', 'nobind') or anything else that is not a core list."""
    cores: set[int] = set()
    for rank in text.split("|"):
        for part in rank.split(","):
            first, _, last = part.strip().partition("-")
            if not first.isdigit() or (last and not last.isdigit()):
                return ()
            cores.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(cores))


def pin_engine_core(root_pid: int, cpus: Collection[int]) -> list[str]:
    """Bind the engine core process of a multi-rank CPU engine to that engine's cores: vLLM binds only its
    workers (one bind per rank), and the engine core, which polls them, is otherwise left on every core, where
    it takes time from the other engine of a P/D pair (measured on 2 cores with a 1p2d pair: the TP-1
    prefill's NIXL handshake listener missed decode's 5 s deadline). Returns the processes moved."""
    wanted = set(cpus)
    moved: list[str] = []
    for pid in [root_pid, *sorted(processes.descendants(root_pid))]:
        full = title(pid)
        if "::EngineCore" not in full.split(" ", 1)[0]:
            continue
        for tid in thread_ids(pid):
            try:
                os.sched_setaffinity(tid, wanted)
            except OSError:
                continue
        moved.append(f"{pid} {full[:TITLE_CHARS]}")
    return moved
