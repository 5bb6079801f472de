"""The capacity bench's client CPU accounting (tests/bench/client_cpu.py): /proc parsed right, a client's
CPU counted, the server's left out (issue 43: each method's client CPU, the server's core kept apart)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.bench.client_cpu import ClientCpu, Stat, cpus_of, descendants, read_stat, snapshot

SPIN = "import time\nwhile time.process_time() < {seconds}: pass\n"


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    line = "4242 (a (b) c) S 7 4242 4242 0 -1 4194560 1 0 0 0 150 25 3 4 20 0 1 0 98765 1000 10"
    assert read_stat(line) == Stat(ppid=7, started=98765, cpu_ticks=175)


def test_descendants_leave_out_the_servers_tree() -> None:
    stats = {pid: Stat(ppid, 0, 0) for pid, ppid in {10: 1, 11: 10, 12: 11, 20: 1, 21: 10, 22: 21}.items()}
    assert descendants(1, stats) == {10, 11, 12, 20, 21, 22}
    assert descendants(1, stats, frozenset({21})) == {10, 11, 12, 20}
    assert descendants(10, stats) == {11, 12, 21, 22}


def _cpu_s(pid: int) -> float:
    return snapshot()[pid].cpu_ticks / os.sysconf("SC_CLK_TCK")


def test_a_clients_cpu_is_counted_and_the_servers_is_not() -> None:
    """A stand-in server spins for the whole window (it has used >= 1 CPU s before the window opens); a client
    spins 0.5 CPU s and exits: the count is the client's, not the server's."""
    server = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=1e9)])
    try:
        while _cpu_s(server.pid) < 1.0:
            time.sleep(0.1)
        with ClientCpu(frozenset({server.pid}), interval_s=0.1) as cpu:
            subprocess.run([sys.executable, "-c", SPIN.format(seconds=0.5)], check=True)
        assert cpus_of(server.pid)  # it was alive throughout, its CPU never reaped into ours
    finally:
        server.kill()
        server.wait()
    found = cpu.to_json()
    # reaped: at least the client's 0.5 s (a child an earlier test left may be reaped in the window too)
    # the kernel counts CPU in 10 ms ticks: 0.5 s of spinning may read one or two ticks short
    assert found["children_reaped_s"] >= 0.48 and found["cpu_s"] >= 0.48, found
    # sampled: the client's (less its last < 0.1 s), never the server's >= 1 s
    assert 0.35 <= found["children_sampled_s"] < 0.9, found
    assert found["processes_seen"] >= 1 and found["wall_s"] > 0
