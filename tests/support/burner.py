"""A CPU burner outside the test's process tree: the shape of a test suite or a compiler running
beside the canary (for canary/checks/throughput/hostload.py's foreign-CPU gate)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


@contextmanager
def stray_burner(seconds: float = 60.0) -> Iterator[int]:
    """Double-forked (own session, re-parented to init) busy loop; yields its process group, killed
    on exit."""
    out = subprocess.run(
        ["sh", "-c", f'setsid {sys.executable} -c "{BURN.format(seconds=seconds)}" >/dev/null 2>&1 & echo $!'],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    pid = int(out.stdout.strip())
    try:
        yield pid
    finally:
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


INIT = """import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
child.wait()
"""


@contextmanager
def stray_container_burner(pid_file: Path, seconds: float = 60.0) -> Iterator[tuple[int, int]]:
    """The shape of a container beside the canary: an init process outside the test's tree (own
    session, re-parented to init) whose child burns CPU in a process group of its own, as podman's
    init starts the engine. Yields (init pid, burner pid); both killed on exit."""
    subprocess.run(
        ["setsid", "--fork", sys.executable, "-c", INIT, str(pid_file), BURN.format(seconds=seconds)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=True,
    )
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    init_pid, burner_pid = (int(v) for v in pid_file.read_text().split())
    try:
        yield init_pid, burner_pid
    finally:
        for pid in (burner_pid, init_pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
