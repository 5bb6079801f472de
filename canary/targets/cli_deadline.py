"""Running a container CLI with a deadline, and what it was doing when it missed it.

podman 4.3 was seen (CI of stop 35) to print its result, `podman volume rm -f canary-config` printed
the volume's name, and then not exit for 600 s. docker and podman are Go programs: one sent SIGQUIT
prints every goroutine's stack to stderr and exits. So a command that misses its deadline is asked
for those stacks before it is killed, and the error carries the head of them: where it hung, the
evidence a bug report to podman needs, instead of a bare "timed out".
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence

STACK_GRACE_S = 10.0
"""How long a command sent SIGQUIT has to print its stacks and exit before it is killed."""
STACK_HEAD_CHARS = 3000
_GOROUTINE = re.compile(r"^goroutine \d+ \[[^\]]*\]:$", re.MULTILINE)
_FRAME_ADDRESSES = re.compile(r" \+0x[0-9a-f]+( fp=\S+ sp=\S+ pc=\S+)?$", re.MULTILINE)


class CliHung(subprocess.TimeoutExpired):
    """A command that missed its deadline. `output` is what it printed before, `stderr` what it printed
    after SIGQUIT as well (a Go program's goroutine stacks)."""

    def __init__(self, argv: Sequence[str], timeout_s: float, stdout: str, stderr: str) -> None:
        super().__init__(list(argv), timeout_s, output=stdout, stderr=stderr)

    @property
    def printed(self) -> str:
        """What the command wrote to stdout before its deadline (its result, if it had finished its work)."""
        return str(self.output or "")

    def stacks_head(self) -> str:
        """The goroutines that were in the program's own code (the Go runtime's idle ones left out),
        without frame addresses, the main one first; or a line saying none were printed."""
        blocks = _goroutines(str(self.stderr or ""))
        if not blocks:
            return "it printed no goroutine stacks on SIGQUIT"
        own = [block for block in blocks if _in_own_code(block)] or blocks
        return "\n\n".join(own)[:STACK_HEAD_CHARS]

    def detail(self) -> str:
        """What happened, without the command line: the deadline, what it printed, where it was."""
        printed = self.printed.strip()
        said = f"; it had printed {printed[-200:]!r}" if printed else ""
        return f"no exit within {self.timeout:.0f} s{said}; where it was:\n{self.stacks_head()}"

    def __str__(self) -> str:
        return " ".join(str(part) for part in self.cmd) + ": " + self.detail()


def run_with_deadline(
    argv: Sequence[str], *, env: Mapping[str, str] | None, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion (stdin from /dev/null, output captured as text), or raise CliHung
    once `timeout_s` has passed, after asking it for its stacks. No wait here is without a deadline:
    a helper process that keeps the output pipes open (a container monitor) cannot stall it."""
    process = subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as missed:
        stdout, stderr = _stacks(process, _text(missed.output), _text(missed.stderr))
        raise CliHung(argv, timeout_s, stdout, stderr) from None
    except BaseException:  # Ctrl-C while waiting: the command goes with us
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)


def _stacks(process: subprocess.Popen[str], stdout: str, stderr: str) -> tuple[str, str]:
    """SIGQUIT, read what follows for STACK_GRACE_S, then SIGKILL; everything it printed."""
    for stop in (signal.SIGQUIT, signal.SIGKILL):
        if process.poll() is None:
            process.send_signal(stop)
        try:
            more_out, more_err = process.communicate(timeout=STACK_GRACE_S)
        except subprocess.TimeoutExpired as missed:
            stdout, stderr = _text(missed.output) or stdout, _text(missed.stderr) or stderr
            continue
        return (more_out or stdout), (more_err or stderr)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STACK_GRACE_S)
    return stdout, stderr


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _goroutines(text: str) -> list[str]:
    """Each goroutine's block of a Go traceback, frame addresses removed."""
    starts = [match.start() for match in _GOROUTINE.finditer(text)]
    ends = [*starts[1:], len(text)] if starts else []
    return [_FRAME_ADDRESSES.sub("", text[start:end]).strip() for start, end in zip(starts, ends, strict=True)]


def _in_own_code(block: str) -> bool:
    """Whether a goroutine has a frame outside Go's runtime (a program's own or its libraries')."""
    frames = [line for line in block.splitlines()[1:] if line and not line.startswith("\t")]
    return any(not frame.startswith(("runtime.", "internal/", "created by runtime")) for frame in frames)
