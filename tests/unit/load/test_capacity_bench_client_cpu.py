"""The capacity bench's client CPU accounting (tests/bench/client_cpu.py): /proc parsed right, a client's
CPU counted, the server's left out (issue 43: each method's client CPU, the server's core kept apart)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.bench.client_cpu import TICK_S, ClientCpu, Stat, descendants, read_stat, snapshot

ROOT = Path(__file__).resolve().parents[3]

SPIN = "import time\nwhile time.process_time() < {seconds}: pass\n"


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    line = "4242 (a (b) c) S 7 4242 4242 0 -1 4194560 1 0 0 0 150 25 3 4 20 0 1 0 98765 1000 10"
    assert read_stat(line) == Stat(ppid=7, started=98765, cpu_ticks=175)


def test_descendants_leave_out_the_servers_tree() -> None:
    stats = {pid: Stat(ppid, 0, 0) for pid, ppid in {10: 1, 11: 10, 12: 11, 20: 1, 21: 10, 22: 21}.items()}
    assert descendants(1, stats) == {10, 11, 12, 20, 21, 22}
    assert descendants(1, stats, frozenset({21})) == {10, 11, 12, 20}
    assert descendants(10, stats) == {11, 12, 21, 22}


WINDOW = """
import json, os, subprocess, sys, time
from tests.bench.client_cpu import ClientCpu, cpus_of, snapshot

SPIN = {spin!r}

def cpu_s(pid):
    return snapshot()[pid].cpu_ticks / os.sysconf("SC_CLK_TCK")

server = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=1e9)])
try:
    while cpu_s(server.pid) < 1.0:
        time.sleep(0.1)
    with ClientCpu(frozenset({{server.pid}}), interval_s=0.1) as cpu:
        subprocess.run([sys.executable, "-c", SPIN.format(seconds=0.5)], check=True)
    alive = bool(cpus_of(server.pid))
finally:
    server.kill()
    server.wait()
print(json.dumps({{**cpu.to_json(), "server_alive": alive}}))
"""


def _window() -> dict[str, Any]:
    """Run a window in a fresh interpreter: its only children are the ones it starts (a pytest session has
    engines and helpers of its own, which would be its descendants too)."""
    code = WINDOW.format(spin=SPIN)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_clients_cpu_is_counted_and_the_servers_is_not() -> None:
    """A stand-in server spins for the whole window (it has used >= 1 CPU s before the window opens); a client
    spins 0.5 CPU s and exits: the count is the client's, not the server's."""
    found = _window()
    assert found["server_alive"]  # it was alive throughout, its CPU never reaped into ours
    # the kernel counts CPU in 10 ms ticks: 0.5 s of spinning may read one or two ticks short
    assert found["children_reaped_s"] >= 0.48 and found["cpu_s"] >= 0.48, found
    # sampled: the client's (less its last < 0.1 s), never the server's >= 1 s
    assert 0.35 <= found["children_sampled_s"] < 0.9, found
    assert found["processes_seen"] >= 1 and found["wall_s"] > 0


def test_a_process_alive_before_the_window_counts_only_what_it_used_inside() -> None:
    """What a child had used before the window opened (here a spinner's >= 1 s, paused at the start) is not
    the method's: only the ticks after the start count."""
    stats_before = snapshot()
    spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=1e9)])
    try:
        while snapshot()[spinner.pid].cpu_ticks * TICK_S < 1.0:
            time.sleep(0.1)
        os.kill(spinner.pid, signal.SIGSTOP)
        cpu = ClientCpu(frozenset(p for p in stats_before if p != spinner.pid), interval_s=0.1)
        with cpu:
            time.sleep(0.3)  # the spinner is stopped: it uses nothing in the window
        found = cpu.to_json()
    finally:
        spinner.kill()
        spinner.wait()
    assert found["processes_seen"] >= 1, found
    # other children of this session (engines, helpers) may use a little in the window; the spinner's
    # >= 1 s from before it must not be there
    assert found["children_sampled_s"] < 0.5, found
