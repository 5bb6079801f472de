"""canary.targets.affinity on real processes: helpers move to their cores, vLLM's compute processes and
threads someone bound on purpose stay where they are; and where the local target places a cell's helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.targets import affinity
from canary.targets.engine_env import pd_helper_cores

EVERYWHERE = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(
    len(EVERYWHERE) < 2,
    reason="on 1 core no helper core can be kept apart from the engines (check_cpus refuses that by design)",
)

# A root process like a vLLM API server: an unbound thread, a thread bound to the last core (vLLM's
# OpenMP binding), a child titled like vLLM's engine core and a plain child. It prints its threads' ids.
TREE = f"""
import os, subprocess, sys, threading, time
bound_tid = []
def bound():
    os.sched_setaffinity(0, {{{EVERYWHERE[-1]}}})
    bound_tid.append(threading.get_native_id())
    time.sleep(60)
threading.Thread(target=lambda: time.sleep(60), daemon=True).start()
threading.Thread(target=bound, daemon=True).start()
core = subprocess.Popen(["VLLM::EngineCore_DP0", "60"], executable="sleep")
plain = subprocess.Popen(["sleep", "60"])
while not bound_tid:
    time.sleep(0.01)
print(bound_tid[0], core.pid, plain.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        bound_tid, core_pid, plain_pid = (int(x) for x in proc.stdout.readline().split())
        yield proc, bound_tid, core_pid, plain_pid
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


@needs_two
def test_helpers_move_and_compute_stays(tree: tuple[subprocess.Popen[str], int, int, int]) -> None:
    proc, bound_tid, core_pid, plain_pid = tree
    helper = {EVERYWHERE[0]}
    report = affinity.pin_helpers([proc.pid], helper)
    assert not report.errors
    root_threads = affinity.thread_ids(proc.pid)
    assert len(root_threads) >= 3
    for tid in root_threads:
        expected = {EVERYWHERE[-1]} if tid == bound_tid else helper
        assert os.sched_getaffinity(tid) == expected, tid
    assert os.sched_getaffinity(plain_pid) == helper
    assert os.sched_getaffinity(core_pid) == set(EVERYWHERE)  # the engine core keeps the machine
    assert report.threads_pinned == len(root_threads) - 1 + 1  # root's unbound threads + the plain child
    assert any("vLLM compute process" in line and str(core_pid) in line for line in report.left_alone)
    assert any(f"thread {bound_tid} bound to" in line for line in report.left_alone)
    # a second pass moves nothing: every helper is already there
    again = affinity.pin_helpers([proc.pid], helper)
    assert again.threads_pinned == 0 and not again.errors


def test_titles() -> None:
    assert affinity.is_compute("VLLM::EngineCore_DP0")
    assert affinity.is_compute("VLLM::Worker_TP1 ")
    assert affinity.is_compute("myprefix::EngineCore")
    assert not affinity.is_compute("/venv/bin/python -m vllm.entrypoints.openai.api_server --model x")
    assert not affinity.is_compute("vllm-router --prefill http://x::EngineCore")  # a later argument is not a title
    assert affinity.title(os.getpid()).startswith(Path(sys.executable).name) or "python" in affinity.title(os.getpid())
    assert affinity.thread_ids(2**22 + 7) == []  # no such process: nothing, no error


def test_cores_that_cannot_take_helpers_are_refused() -> None:
    assert affinity.check_cpus([]) == "no cores given"
    problem = affinity.check_cpus([max(EVERYWHERE) + 64])
    assert problem is not None and "not among this process's cores" in problem
    every = affinity.check_cpus(EVERYWHERE)
    assert every is not None and "nothing would be kept for the engines" in every
    if len(EVERYWHERE) >= 2:
        assert affinity.check_cpus([EVERYWHERE[0]]) is None


def test_a_pairs_helpers_share_prefills_cores() -> None:
    assert pd_helper_cores(1) is None
    assert pd_helper_cores(2) == (0,)
    assert pd_helper_cores(4) == (0, 1)
    assert pd_helper_cores(7) == (0, 1, 2)


def test_a_process_that_exits_is_skipped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    time.sleep(0.05)
    report = affinity.pin_helpers([proc.pid], {EVERYWHERE[0]})
    assert report.threads_pinned == 0 and not report.errors
