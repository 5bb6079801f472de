"""Process-group lifecycle of the servers the local target starts.

Every server runs in its own session (setsid), so it and everything it forks (vLLM's engine core,
NIXL/UCX threads' helpers) share one process group that we can signal as a whole. Output goes to
one log file per process. Teardown sends SIGTERM to the group, waits, then SIGKILLs the group
and any descendant that left it. Every live process is registered: an atexit hook and SIGTERM /
SIGHUP handlers stop them all if the controller crashes, is killed politely or loses its
terminal; Ctrl-C (SIGINT) raises KeyboardInterrupt whose unwinding stops them, with the atexit
hook as a backstop. On Linux each server also gets PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed
controller does not leave a server behind. A server started with nice > 0 lowers its session's
scheduler autogroup too (`lower_session_priority`): with autogroups on, a process nice alone does
not rank a session against the load client's.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from canary.core.atomic import write_atomic
from canary.errors import CanaryError

TERM_GRACE_S = 15.0
"""How long a group gets between SIGTERM and SIGKILL."""
KILL_WAIT_S = 10.0
"""How long we wait for SIGKILLed processes to disappear."""

_PR_SET_PDEATHSIG = 1


@dataclass
class ManagedProcess:
    """A server we started: its command, log, process group and exit status."""

    role: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)
    ports: tuple[int, ...] = ()
    known_pids: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        """The group leader's pid."""
        return self.popen.pid

    @property
    def pgid(self) -> int:
        """The process group id (== pid: the server is a session leader)."""
        return self.popen.pid

    def exit_code(self) -> int | None:
        """The leader's exit code, None while it runs."""
        return self.popen.poll()

    def alive(self) -> bool:
        """Whether the leader still runs."""
        return self.popen.poll() is None

    def elapsed(self) -> float:
        """Seconds since start."""
        return time.monotonic() - self.started_at

    def remember_descendants(self) -> None:
        """Record the leader's current descendants (so teardown finds them even if they leave the group)."""
        self.known_pids.update(descendants(self.pid))


# --------------------------------------------------------------------------- /proc helpers


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a pid from /proc, None if gone."""
    return _stat_at(Path(f"/proc/{pid}/stat"))


def _stat_at(path: Path) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) from a /proc stat file (a process's or a thread's), None if gone."""
    try:
        text = path.read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


_DEAD_STATES = ("Z", "X")


def _live(pid: int, state: str) -> bool:
    """A pid in `state` still runs: not a zombie, or a zombie leader whose other threads still exit.

    When a multi-threaded process is killed, its main thread can show Z while other threads are
    still in their exit path, holding the process's files and sockets (a P/D engine's port stayed
    connectable after teardown had judged every pid dead)."""
    if state not in _DEAD_STATES:
        return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        stat = _stat_at(Path(f"/proc/{pid}/task/{tid}/stat"))
        if stat is not None and stat[0] not in _DEAD_STATES:
            return True
    return False


def pid_alive(pid: int) -> bool:
    """Whether a pid exists and is not (wholly) a zombie."""
    stat = _stat(pid)
    return stat is not None and _live(pid, stat[0])


def group_members(pgid: int) -> list[int]:
    """Live processes in a process group."""
    members = []
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[2] == pgid and _live(pid, stat[0]):
            members.append(pid)
    return members


def descendants(pid: int) -> set[int]:
    """Live descendants of a pid (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for other in _all_pids():
        stat = _stat(other)
        if stat is not None and _live(other, stat[0]):
            children.setdefault(stat[1], []).append(other)
    out: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


# --------------------------------------------------------------------------- registry and signals

_LIVE: dict[int, ManagedProcess] = {}
_CLEANUPS: list[Callable[[], None]] = []
"""What else stop_all() undoes (e.g. containers, which live outside our process groups)."""
_LOCK = threading.RLock()  # re-entrant: a signal handler may run while the main thread holds it
_HANDLERS_INSTALLED = False


def live_processes() -> list[ManagedProcess]:
    """Processes started and not yet stopped."""
    with _LOCK:
        return list(_LIVE.values())


def add_cleanup(hook: Callable[[], None]) -> None:
    """Have stop_all() (SIGTERM, SIGHUP, atexit) call `hook` before it stops the processes; installs
    the handlers as start() does."""
    _install_handlers()
    with _LOCK:
        _CLEANUPS.append(hook)


def remove_cleanup(hook: Callable[[], None]) -> None:
    """Undo add_cleanup (a hook that is not registered is ignored)."""
    with _LOCK:
        if hook in _CLEANUPS:
            _CLEANUPS.remove(hook)


def stop_all() -> None:
    """Run every cleanup hook, then stop every registered process group (atexit and signal handlers call this)."""
    with _LOCK:
        hooks = list(_CLEANUPS)
    try:
        for hook in hooks:
            with contextlib.suppress(Exception):  # one failing hook must not keep the processes running
                hook()
    finally:
        stop(live_processes())


def _on_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    stop_all()
    # Unwind like Ctrl-C so the run records what happened and exits.
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def _install_handlers() -> None:
    """atexit always; SIGTERM/SIGHUP only from the main thread and only where nobody else handles them."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _on_signal)


def _preexec(nice: int) -> Callable[[], None] | None:
    """A preexec_fn: the kernel SIGKILLs the child when the thread that started it dies (Linux);
    the child runs `nice` steps below the caller's priority. Only syscalls in the child, no locks."""
    libc = None
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            libc = None
    if libc is None and not nice:
        return None

    def in_child() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if nice:
            lower_session_priority(os.nice(nice))

    return in_child


AUTOGROUP = "/proc/self/autogroup"


def lower_session_priority(niceness: int, path: str = AUTOGROUP) -> bool:
    """Give this process's new session (its scheduler autogroup) the nice value `niceness`.

    Linux with `kernel.sched_autogroup_enabled=1` (the default of most desktop and cloud kernels)
    schedules every session as one group, and a process's own nice value only ranks it inside its
    group. A server started in its own session at nice 10 therefore still took a full share beside
    the load client: the client's event loop waited 40-140 ms for a core next to a P/D pair
    (2 cores, 2026-11-30), and its measurement was invalid. The session's autogroup nice is what
    ranks the group. Runs in the child after setsid (plain syscalls); False where there is no
    autogroup (disabled, not Linux) or the write is refused: the process nice still applies."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, str(niceness).encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- start and stop


def start(
    role: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    *,
    cwd: Path | None = None,
    ports: Iterable[int] = (),
    nice: int = 0,
) -> ManagedProcess:
    """Start argv in a new session with exactly `env`, stdout+stderr appended to log_path.

    nice > 0 lowers the child's CPU priority by that many steps (inherited by its children)."""
    _install_handlers()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        try:
            popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_preexec(nice),
            )
        except OSError as exc:
            raise CanaryError(f"cannot start {role} ({argv[0]}): {exc.strerror or exc}") from None
    proc = ManagedProcess(role=role, argv=list(argv), log_path=log_path, popen=popen, ports=tuple(ports))
    with _LOCK:
        _LIVE[proc.pid] = proc
    _write_manifest(log_path.parent)
    return proc


def _write_manifest(log_dir: Path) -> None:
    """processes.json in the log dir: role, pid, pgid, ports, argv of every live process logging there."""
    entries = [
        {"role": p.role, "pid": p.pid, "pgid": p.pgid, "ports": list(p.ports), "argv": p.argv, "log": p.log_path.name}
        for p in live_processes()
        if p.log_path.parent == log_dir
    ]
    manifest = log_dir / "processes.json"
    previous: list[dict[str, object]] = []
    if manifest.exists():
        with contextlib.suppress(ValueError, OSError):
            previous = json.loads(manifest.read_text())
    known = {e["pid"] for e in entries}
    merged = entries + [e for e in previous if e.get("pid") not in known]
    write_atomic(manifest, json.dumps(merged, indent=2))  # a crash mid-write never leaves half a manifest


def _signal_group(proc: ManagedProcess, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pgid, signum)


def _remaining(proc: ManagedProcess) -> list[int]:
    """Live pids of this server: its group plus any recorded descendant that left the group."""
    pids = set(group_members(proc.pgid))
    pids.update(pid for pid in proc.known_pids if pid_alive(pid))
    return sorted(pids)


def _signal_all(proc: ManagedProcess, signum: int) -> None:
    """Signal the group, then every recorded descendant that left it, one by one."""
    _signal_group(proc, signum)
    for pid in _remaining(proc):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def pause(processes: Iterable[ManagedProcess]) -> None:
    """Freeze servers (SIGSTOP to each group and its recorded descendants): a frozen server holds its
    memory and ports and takes no CPU. `resume` continues them; `stop` continues them too."""
    for proc in processes:
        proc.remember_descendants()
        _signal_all(proc, signal.SIGSTOP)


def resume(processes: Iterable[ManagedProcess]) -> None:
    """Continue servers that `pause` froze (SIGCONT; harmless to one that runs)."""
    for proc in processes:
        _signal_all(proc, signal.SIGCONT)


def stop(processes: Iterable[ManagedProcess], grace_s: float = TERM_GRACE_S) -> None:
    """Stop process groups: SIGTERM all (and SIGCONT, so a paused one acts on it), wait up to grace_s,
    SIGKILL what is left, reap the leaders."""
    procs = list(processes)
    if not procs:
        return
    for proc in procs:
        proc.remember_descendants()
        _signal_all(proc, signal.SIGTERM)
        _signal_all(proc, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_remaining(p) for p in procs):
        for proc in procs:
            proc.popen.poll()  # reap the leader so it does not linger as a zombie
        time.sleep(0.1)
    for proc in procs:
        if _remaining(proc):
            _signal_all(proc, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        while _remaining(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
    with _LOCK:
        for proc in procs:
            _LIVE.pop(proc.pid, None)
    leftover = {p.role: _remaining(p) for p in procs if _remaining(p)}
    if leftover:
        raise CanaryError(f"processes survived SIGKILL: {leftover}")


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file (empty if missing)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
