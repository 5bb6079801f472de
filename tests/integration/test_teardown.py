"""Teardown leaves nothing behind: process groups, escaped descendants, signals, kill -9 mid-run.

The first tests use plain shell processes (real processes, no engine) to pin the mechanics down
fast; the engine tests prove it on a real P/D pair and on a controller that gets Ctrl-C/SIGTERM
while its engine is starting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from canary.core.ports import ephemeral_range, free_ports, port_in_use
from canary.core.promtext import scrape, total
from canary.paths import REPO_ROOT
from canary.targets import processes
from canary.targets.processes import descendants, group_members, pid_alive

SHELL_ENV = {"PATH": "/usr/bin:/bin"}


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- stand-in processes


def test_stop_kills_the_whole_group(tmp_path: Path) -> None:
    proc = processes.start("shell", ["bash", "-c", "sleep 300 & sleep 300 & wait"], SHELL_ENV, tmp_path / "s.log")
    wait_for(lambda: len(group_members(proc.pgid)) == 3, 10, "the shell and its two children")
    children = descendants(proc.pid)
    assert len(children) == 2
    processes.stop([proc])
    assert group_members(proc.pgid) == []
    assert not any(pid_alive(pid) for pid in children)
    assert proc.exit_code() is not None
    assert proc not in processes.live_processes()


def test_sigterm_ignoring_group_is_killed(tmp_path: Path) -> None:
    script = "trap '' TERM; sleep 300 & wait; sleep 300"
    proc = processes.start("stubborn", ["bash", "-c", script], SHELL_ENV, tmp_path / "s.log")
    wait_for(lambda: len(group_members(proc.pgid)) == 2, 10, "the stubborn shell")
    started = time.monotonic()
    processes.stop([proc], grace_s=1.0)
    assert time.monotonic() - started < 8
    assert group_members(proc.pgid) == []
    assert proc.exit_code() == -signal.SIGKILL


def test_descendant_that_left_the_group_is_killed_too(tmp_path: Path) -> None:
    """A child that calls setsid() leaves our process group; teardown still finds it by ancestry."""
    script = "setsid sleep 300 & sleep 300"
    proc = processes.start("escaper", ["bash", "-c", script], SHELL_ENV, tmp_path / "s.log")

    def escaped() -> list[int]:
        return [pid for pid in descendants(proc.pid) if pid not in group_members(proc.pgid)]

    # Both children exist a moment before the forked one has run setsid(): wait for the escape itself.
    wait_for(lambda: len(descendants(proc.pid)) == 2 and len(escaped()) == 1, 10, "a child outside the group")
    escapee = escaped()[0]
    processes.stop([proc])
    assert not pid_alive(escapee)


def _cpu_ticks_and_states(pids: list[int]) -> tuple[int, set[str]]:
    ticks, states = 0, set()
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        states.add(fields[0])
        ticks += int(fields[11]) + int(fields[12])
    return ticks, states


def test_a_paused_group_takes_no_cpu_resumes_and_still_stops_at_once(tmp_path: Path) -> None:
    """pause (SIGSTOP) freezes the group and the child that left it; resume continues both; stop of a
    paused group does not wait out its grace: stop sends SIGCONT, so the SIGTERM is acted on."""
    script = "setsid bash -c 'while :; do :; done' & while :; do :; done"
    proc = processes.start("spinner", ["bash", "-c", script], SHELL_ENV, tmp_path / "s.log")
    wait_for(lambda: len(descendants(proc.pid)) == 1, 10, "the spinning child")
    pids = [proc.pid, *descendants(proc.pid)]
    processes.pause([proc])
    wait_for(lambda: _cpu_ticks_and_states(pids)[1] == {"T"}, 5, "both spinners stopped")
    frozen, _ = _cpu_ticks_and_states(pids)
    time.sleep(0.5)
    assert _cpu_ticks_and_states(pids)[0] == frozen, "a paused spinner used CPU"
    processes.resume([proc])
    wait_for(lambda: _cpu_ticks_and_states(pids)[0] > frozen + 5, 10, "the spinners to run again")
    assert "T" not in _cpu_ticks_and_states(pids)[1]
    processes.pause([proc])
    wait_for(lambda: _cpu_ticks_and_states(pids)[1] == {"T"}, 5, "both spinners stopped again")
    started = time.monotonic()
    processes.stop([proc], grace_s=30.0)
    assert time.monotonic() - started < 10, "stop waited for the grace: the paused group never saw its SIGTERM"
    assert proc.exit_code() == -signal.SIGTERM
    assert not any(pid_alive(pid) for pid in pids)


def test_free_ports_are_distinct_and_free() -> None:
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert not any(port_in_use(p) for p in ports)
    low, high = ephemeral_range()
    assert not any(low <= p <= high for p in ports)  # never a port the kernel may hand to another socket


def test_env_is_exactly_what_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_JUNK_VAR", "leaked")
    log = tmp_path / "env.log"
    proc = processes.start("env", ["env"], {"PATH": "/usr/bin:/bin", "ONLY_THIS": "1"}, log)
    proc.popen.wait(timeout=10)
    processes.stop([proc])
    assert sorted(log.read_text().split()) == ["ONLY_THIS=1", "PATH=/usr/bin:/bin"]


CONTROLLER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from canary.targets import processes
    log_dir = Path(sys.argv[1])
    for role in ("prefill", "decode"):
        processes.start(role, ["bash", "-c", "sleep 300 & sleep 300 & wait"], {"PATH": "/usr/bin:/bin"},
                        log_dir / f"{role}.log")
    (log_dir / "ready").write_text("1")
    if sys.argv[2] == "crash":
        raise RuntimeError("controller crashed")
    time.sleep(300)
    """
)


def _as_from_a_terminal() -> None:
    """In the controller child: SIGINT and SIGHUP at their defaults, as a shell in a terminal gives
    them. A test run under nohup or as a background job inherits them ignored, and the canary then
    (rightly) leaves them ignored, so the signals these tests send would not arrive."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "crash"])
def test_controller_signal_or_crash_stops_everything(tmp_path: Path, how: str) -> None:
    """Ctrl-C, SIGTERM, SIGHUP or an uncaught exception in the controller: no server survives it."""
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(tmp_path), how], cwd=REPO_ROOT, preexec_fn=_as_from_a_terminal
    )
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or controller.poll() is not None, 60, "the controller")
        manifest = json.loads((tmp_path / "processes.json").read_text())
        pgids = [entry["pgid"] for entry in manifest]
        assert len(pgids) == 2
        if how != "crash":
            assert all(group_members(g) for g in pgids)
            controller.send_signal(getattr(signal, how))
        controller.wait(timeout=60)
        for pgid in pgids:
            assert group_members(pgid) == [], f"group {pgid} survived {how}"
    finally:
        if controller.poll() is None:
            controller.kill()


def test_sigkilled_controller_takes_its_servers_along(tmp_path: Path) -> None:
    """SIGKILL cannot be handled: the servers' parent-death signal (PR_SET_PDEATHSIG) stops the leaders."""
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(tmp_path), "wait"], cwd=REPO_ROOT)
    pids: list[int] = []
    try:
        wait_for(lambda: (tmp_path / "ready").exists(), 60, "the controller")
        pids = [entry["pid"] for entry in json.loads((tmp_path / "processes.json").read_text())]
        controller.kill()
        controller.wait(timeout=10)
        wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the leaders to die with their parent")
    finally:
        if controller.poll() is None:
            controller.kill()
        for pid in pids:
            for member in group_members(pid):
                os.kill(member, signal.SIGKILL)


# --------------------------------------------------------------------------- real engines


def _stream_until_broken(url: str, errors: list[str]) -> None:
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": "Question: count to a thousand.\nAnswer:",
            "max_tokens": 1500,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0,
        }
    ).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            for _ in response:
                pass
    except Exception as exc:  # the stream breaks when decode dies: that is the point
        errors.append(f"{type(exc).__name__}: {exc}")


@pytest.mark.engine
@pytest.mark.own_engines
def test_kill9_of_one_server_mid_run_leaves_nothing(tiny_model: Path, tmp_path: Path, engine_cells: Any) -> None:
    """P/D p32-d64 (the block-size mismatch cell): serve through NIXL, kill -9 decode mid-stream,
    then teardown must leave no process of the cell (by pid, group and ancestry) and no open port."""
    with engine_cells.start(tmp_path, topology="pd-nixl", prefill=32, decode=64) as (_, deployment):
        engine_cells.require_started(deployment)
        decode = deployment.servers["decode"]
        before = total(scrape(decode.metrics_url), "vllm:nixl_bytes_transferred_sum")
        body = json.dumps({"model": "tiny", "prompt": "Question: 2 plus 3?\nAnswer:", "max_tokens": 4}).encode()
        request = urllib.request.Request(
            f"{deployment.base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            assert response.status == 200
        wait_for(
            lambda: total(scrape(decode.metrics_url), "vllm:nixl_bytes_transferred_sum") > before,
            30,
            "decode's NIXL byte counter to grow",
        )

        manifest = json.loads((tmp_path / "processes.json").read_text())
        ports = [port for entry in manifest for port in entry["ports"]]
        assert len(ports) == 6 and all(port_in_use(p) for p in ports if p not in _nixl_ports(manifest))
        pids = {s.pid for s in deployment.servers.values() if s.pid is not None}
        for pid in list(pids):
            pids |= descendants(pid)
        assert len(pids) >= 5  # 3 leaders + vLLM's engine core processes

        errors: list[str] = []
        stream = threading.Thread(target=_stream_until_broken, args=(deployment.base_url, errors), daemon=True)
        stream.start()
        time.sleep(2.0)
        assert decode.pid is not None
        os.kill(decode.pid, signal.SIGKILL)  # one process, not its group: its children are orphaned
        stream.join(timeout=120)
    assert decode.exit_code == -signal.SIGKILL
    survivors = sorted(p for p in pids if pid_alive(p))
    assert survivors == [], f"survived teardown: {survivors}"
    for server in deployment.servers.values():
        assert group_members(server.pid) == []
    assert not any(port_in_use(p) for p in ports)


def _nixl_ports(manifest: list[dict[str, Any]]) -> set[int]:
    """The side-channel ports (listening only once a transfer was set up: not asserted open)."""
    return {entry["ports"][-1] for entry in manifest if entry["role"] in ("prefill", "decode")}


ENGINE_CONTROLLER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from canary.config.load import validate_config
    from canary.plan.matrix import plan
    from canary.targets.local.target import LocalTarget
    config = validate_config(json.loads(sys.argv[2]), "test")
    cell = plan(config).planned()[0]
    with LocalTarget(config).deploy(cell, Path(sys.argv[1])) as deployment:
        print("deployed", deployment.started, flush=True)
    """
)


@pytest.mark.engine
@pytest.mark.own_engines
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_signal_to_the_controller_while_the_engine_starts(
    tmp_path: Path, tiny_model: Path, engine_cells: Any, how: str
) -> None:
    """Ctrl-C / SIGTERM to a controller waiting for its engine: the engine's whole group is gone after."""
    data = engine_cells.config_data()
    controller = subprocess.Popen(
        [sys.executable, "-c", ENGINE_CONTROLLER, str(tmp_path), json.dumps(data)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        manifest = tmp_path / "processes.json"
        wait_for(lambda: manifest.exists() or controller.poll() is not None, 60, "the engine to be started")
        engine = json.loads(manifest.read_text())[0]
        # Let the engine get going (it forks helpers while it loads) before the controller is stopped.
        wait_for(lambda: len(group_members(engine["pgid"])) >= 1, 30, "the engine process")
        time.sleep(5)
        members = set(group_members(engine["pgid"])) | descendants(engine["pid"])
        controller.send_signal(getattr(signal, how))
        controller.wait(timeout=90)
        assert "deployed" not in (controller.stdout.read() if controller.stdout else "")
        assert group_members(engine["pgid"]) == []
        assert not any(pid_alive(pid) for pid in members)
        assert not port_in_use(engine["ports"][0])
    finally:
        if controller.poll() is None:
            controller.kill()


def test_nice_lowers_the_child_priority(tmp_path: Path) -> None:
    """The local target runs engines below the canary's priority (target.local.nice)."""
    proc = processes.start("niced", ["sleep", "300"], SHELL_ENV, tmp_path / "n.log", nice=5)
    try:
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(mine + 5, 19)
        # with scheduler autogroups (a session is one group), the group's nice is lowered too: a
        # process nice alone does not rank the server's session against the load client's
        autogroup = Path(f"/proc/{proc.pid}/autogroup")
        if Path("/proc/self/autogroup").exists():
            text = autogroup.read_text()
            assert text.split()[-2:] == ["nice", str(min(mine + 5, 19))], text
            # its own group: not the caller's (whose file is empty in the root autogroup, e.g. when
            # the caller's session is init's, as in a CI container)
            assert text.split()[0] not in Path("/proc/self/autogroup").read_text().split()[:1]
        else:
            assert not processes.lower_session_priority(5)
    finally:
        processes.stop([proc])
    assert not pid_alive(proc.pid)


def test_session_priority_writes_the_autogroup_nice(tmp_path: Path) -> None:
    target = tmp_path / "autogroup"
    target.write_text("")
    assert processes.lower_session_priority(7, str(target))
    assert target.read_text() == "7"
    assert not processes.lower_session_priority(7, str(tmp_path / "missing" / "autogroup"))


ZOMBIE_LEADER = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(300,)).start()
time.sleep(0.2)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: only the main thread ends; the process lives on
"""


def test_zombie_leader_with_a_running_thread_is_alive_until_stopped(tmp_path: Path) -> None:
    """A killed multi-threaded engine can show Z on its main thread while other threads still
    hold its sockets: it is not gone until every thread is."""
    proc = processes.start("half-exited", [sys.executable, "-c", ZOMBIE_LEADER], SHELL_ENV, tmp_path / "z.log")
    leader_state = Path(f"/proc/{proc.pid}/stat")
    wait_for(lambda: leader_state.read_text().rsplit(")", 1)[1].split()[0] == "Z", 10, "the main thread to exit")
    assert pid_alive(proc.pid)
    assert group_members(proc.pgid) == [proc.pid]
    processes.stop([proc], grace_s=1.0)
    assert not pid_alive(proc.pid) and group_members(proc.pgid) == []
