"""Foreign CPU during a measurement (canary/checks/throughput/hostload.py): real processes, real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.checks.throughput import hostload
from tests.support import burner

BURN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


@pytest.fixture
def stray_burner() -> Iterator[int]:
    """A CPU burner that is NOT a descendant of this process. Yields its process group."""
    with burner.stray_burner(30.0) as pgid:
        yield pgid


def _cpu_s(pid: int) -> float:
    """The burner's own CPU seconds, from its /proc entry."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(pgids: list[int], burner: int, seconds: float = 1.5) -> tuple[hostload.ForeignLoad, float]:
    """Foreign load over `seconds`, and the CPU seconds the burner used meanwhile (the machine may be
    busy with anything else: every assertion is against the burner's own CPU time)."""
    before, burned = hostload.sample(pgids), _cpu_s(burner)
    time.sleep(seconds)
    after, burned = hostload.sample(pgids), _cpu_s(burner) - burned
    assert before is not None and after is not None
    load = hostload.foreign_load(before, after)
    assert load is not None
    return load, burned


def test_a_process_outside_the_measurement_counts_as_foreign_and_inside_as_ours(stray_burner: int) -> None:
    outside, burned_out = _measure([], stray_burner)
    inside, burned_in = _measure([stray_burner], stray_burner)  # now one of the cell's process groups
    assert burned_out > 0.05 and burned_in > 0.05  # it ran
    # inside: its CPU is ours (this test itself only sleeps); outside: none of it is ours, all foreign
    assert inside.ours_cores * inside.wall_s >= 0.8 * burned_in, (inside, burned_in)
    assert outside.ours_cores * outside.wall_s < 0.5 * burned_out, (outside, burned_out)
    assert outside.foreign_cores * outside.wall_s >= 0.8 * burned_out, (outside, burned_out)
    assert "other processes used" in outside.describe()


def test_a_container_engine_in_its_own_group_under_the_servers_pid_is_ours(tmp_path: Path) -> None:
    # The container target records the container's init pid; podman's init starts the engine in a
    # process group of its own, so matching by group alone called the engine foreign (a busy machine
    # in every container-target throughput run).
    with burner.stray_container_burner(tmp_path / "pids", 30.0) as (init_pid, burner_pid):
        assert os.getpgid(burner_pid) != os.getpgid(init_pid)
        outside, burned_out = _measure([], burner_pid)
        inside, burned_in = _measure([init_pid], burner_pid)
    assert burned_out > 0.05 and burned_in > 0.05
    assert inside.ours_cores * inside.wall_s >= 0.8 * burned_in, (inside, burned_in)
    assert outside.foreign_cores * outside.wall_s >= 0.8 * burned_out, (outside, burned_out)


def test_children_this_process_waited_for_are_ours() -> None:
    before = hostload.sample([])
    child = subprocess.run(
        [sys.executable, "-c", BURN.replace("30", "1.0") + "print(time.process_time())"],
        timeout=30,
        check=True,
        capture_output=True,
        text=True,
    )
    after = hostload.sample([])
    assert before is not None and after is not None
    burned = float(child.stdout.strip())
    assert after.ours_s - before.ours_s >= 0.8 * burned > 0.05, (before, after, burned)


def test_machine_busy_reads_the_cpu_line_and_rejects_anything_else(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 50 50 800 100 0 0 0 0 0\ncpu0 ...\n")
    assert hostload.machine_busy_s(tmp_path) == pytest.approx(200 / os.sysconf("SC_CLK_TCK"))
    (tmp_path / "stat").write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="not the cpu total"):
        hostload.machine_busy_s(tmp_path)
    assert hostload.sample([], proc=tmp_path) is None  # unreadable: nothing measured, nothing gated


def test_an_empty_interval_is_no_measurement() -> None:
    one = hostload.CpuSample(at=5.0, busy_s=1.0, ours_s=1.0)
    assert hostload.foreign_load(one, one) is None


def test_throughput_marks_a_run_beside_foreign_load_invalid_and_says_why() -> None:
    from canary.checks.throughput.check import _host_problems, client_cause
    from canary.config import ThroughputCheckConfig

    busy = hostload.ForeignLoad(foreign_cores=1.2, busy_cores=2.0, ours_cores=0.8, wall_s=4.0)
    quiet = hostload.ForeignLoad(foreign_cores=0.1, busy_cores=1.0, ours_cores=0.9, wall_s=4.0)
    gated = ThroughputCheckConfig(max_foreign_cpu_cores=0.5)
    metrics: dict[str, float] = {}
    evidence: dict[str, object] = {}
    problems = _host_problems(gated, [quiet, busy, None], metrics, evidence)
    assert len(problems) == 1 and "machine busy: other processes used 1.20 cores" in problems[0]
    assert metrics["foreign_cpu_cores"] == 1.2 and len(evidence["machine"]) == 2  # type: ignore[arg-type]
    assert client_cause(problems) == "machine busy with other processes"
    assert _host_problems(ThroughputCheckConfig(), [busy], {}, {}) == []  # null: reported, not gated
    assert _host_problems(gated, [None], {}, {}) == []  # nothing measurable (not a local server)
