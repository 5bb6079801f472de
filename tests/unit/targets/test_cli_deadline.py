"""A container CLI that misses its deadline: asked for its stacks, then killed, never waited on forever.

The hanging CLI here is a stand-in (a shell script that prints a Go-style traceback on SIGQUIT);
tests/images/test_podman_hang.py does the same with the real podman."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from canary.targets import cli_deadline, container_cli
from canary.targets.cli_deadline import CliHung, run_with_deadline
from canary.targets.container_cli import ContainerCli, ContainerCliHung, ContainerError

TRACEBACK = r"""SIGQUIT: quit
PC=0x479f41 m=0 sigcode=0

goroutine 0 [idle]:
runtime.futex()
	runtime/sys_linux_amd64.s:559 +0x21 fp=0x7ffd68dc7c40 sp=0x7ffd68dc7c38 pc=0x479f41

goroutine 1 [chan receive]:
runtime.gopark(0x0?)
	runtime/proc.go:363 +0xd6 fp=0xc000491ad8 sp=0xc000491ab8 pc=0x4460b6
github.com/containers/podman/libpod.(*Runtime).Shutdown(0xc0001)
	github.com/containers/podman/libpod/runtime.go:861 +0x20f fp=0xc000491cf8 sp=0xc000491c18 pc=0x138730f
main.main()
	github.com/containers/podman/cmd/podman/main.go:40 +0x7c fp=0xc000491f80 sp=0xc000491f50 pc=0x13974fc

goroutine 2 [force gc (idle)]:
runtime.gopark(0x0?)
	runtime/proc.go:363 +0xd6 fp=0xc000491ad8 sp=0xc000491ab8 pc=0x4460b6
"""


def _script(tmp_path: Path, name: str, body: str, interpreter: str = "/bin/bash") -> Path:
    path = tmp_path / name
    path.write_text(f"#!{interpreter}\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _hangs_after_printing(tmp_path: Path, printed: str, *, answers_quit: bool = True) -> Path:
    """Prints `printed`, then sleeps; on SIGQUIT prints TRACEBACK to stderr and exits 2, as Go does.

    Python, not a shell: a shell started with SIGQUIT ignored (a background job of a shell without job
    control is) cannot trap it, while Go, like Python here, installs its SIGQUIT handler regardless."""
    (tmp_path / "traceback.txt").write_text(TRACEBACK, encoding="utf-8")
    on_quit = "dump" if answers_quit else "signal.SIG_IGN"
    body = f"""import signal, sys, time
def dump(signum, frame):
    sys.stderr.write(open({str(tmp_path / "traceback.txt")!r}).read())
    sys.stderr.flush()
    sys.exit(2)
signal.signal(signal.SIGQUIT, {on_quit})
print({printed!r}, flush=True)
while True:
    time.sleep(0.1)
"""
    return _script(tmp_path, "hangs", body, interpreter=sys.executable)


def test_a_command_that_finishes_is_returned_as_it_ran(tmp_path: Path) -> None:
    script = _script(tmp_path, "fine", 'echo out; echo err >&2; read -r line || echo "stdin is empty"; exit 3\n')
    done = run_with_deadline([str(script)], env=None, timeout_s=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\nstdin is empty\n", "err\n")


def test_a_hang_after_the_work_carries_what_was_printed_and_where_it_was(tmp_path: Path) -> None:
    script = _hangs_after_printing(tmp_path, "canary-config")
    started = time.monotonic()
    with pytest.raises(CliHung) as raised:
        run_with_deadline([str(script), "volume", "rm"], env=None, timeout_s=1)
    assert time.monotonic() - started < 1 + cli_deadline.STACK_GRACE_S
    hung = raised.value
    assert hung.printed == "canary-config\n"
    head = hung.stacks_head()
    assert head.startswith("goroutine 1 [chan receive]:")  # the runtime's idle goroutines are left out
    assert "libpod.(*Runtime).Shutdown" in head and "goroutine 0" not in head and "goroutine 2" not in head
    assert "fp=" not in head and "+0x" not in head
    message = str(hung)
    assert "volume rm: no exit within 1 s" in message and "'canary-config'" in message and "Shutdown" in message


def test_a_command_deaf_to_sigquit_is_killed_after_the_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_deadline, "STACK_GRACE_S", 1.0)
    script = _hangs_after_printing(tmp_path, "half", answers_quit=False)
    started = time.monotonic()
    with pytest.raises(CliHung) as raised:
        run_with_deadline([str(script)], env=None, timeout_s=1)
    assert time.monotonic() - started < 5
    assert raised.value.printed == "half\n"
    assert raised.value.stacks_head() == "it printed no goroutine stacks on SIGQUIT"


def test_a_helper_holding_the_output_open_does_not_stall_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command exits at once, but a child it left keeps stdout open (as a container monitor can)."""
    monkeypatch.setattr(cli_deadline, "STACK_GRACE_S", 0.5)
    pid_file = tmp_path / "helper.pid"
    script = _script(tmp_path, "leaves-a-helper", f"sleep 60 &\necho $! > {pid_file}\necho started\nexit 0\n")
    started = time.monotonic()
    try:
        with pytest.raises(CliHung) as raised:
            run_with_deadline([str(script)], env=None, timeout_s=1)
        assert time.monotonic() - started < 4
        assert raised.value.printed == "started\n"
    finally:
        import os
        import signal

        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _cli(tmp_path: Path, listed: str) -> ContainerCli:
    """A podman stand-in whose `rm` removes (prints the names) and hangs; `ps` lists `listed`."""
    (tmp_path / "traceback.txt").write_text(TRACEBACK, encoding="utf-8")
    body = f"""import signal, sys, time
def dump(signum, frame):
    sys.stderr.write(open({str(tmp_path / "traceback.txt")!r}).read())
    sys.exit(2)
signal.signal(signal.SIGQUIT, dump)
verb = sys.argv[1]
if verb == "stop":
    sys.exit(0)
if verb == "ps":
    sys.stdout.write({listed!r})
    sys.exit(0)
if verb == "rm":
    print("\\n".join(sys.argv[3:]), flush=True)
    while True:
        time.sleep(0.1)
sys.exit(9)
"""
    return ContainerCli(
        "podman", str(_script(tmp_path, "podman", body, interpreter=sys.executable)), {"PATH": "/usr/bin:/bin"}
    )


def test_a_removal_that_hangs_but_removed_everything_passes_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(container_cli, "QUERY_TIMEOUT_S", 1.0)
    _cli(tmp_path, "someone-elses\n").remove(["cell-prefill", "cell-decode"], stop_timeout_s=1)
    warning = capsys.readouterr().err
    assert "canary: warning:" in warning and "rm: no exit within 1 s" in warning
    assert "every container named is gone" in warning and "Shutdown" in warning


def test_a_removal_that_hangs_and_left_a_container_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(container_cli, "QUERY_TIMEOUT_S", 1.0)
    with pytest.raises(ContainerError, match=r"still there: cell-decode") as raised:
        _cli(tmp_path, "cell-decode\nsomeone-elses\n").remove(["cell-prefill", "cell-decode"], stop_timeout_s=1)
    assert not isinstance(raised.value, ContainerCliHung)
    assert raised.value.exit_code == 2
