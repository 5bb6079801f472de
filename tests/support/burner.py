"""A CPU burner outside the test's process tree: the shape of a test suite or a compiler running
beside the canary (for canary/checks/throughput/hostload.py's foreign-CPU gate)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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
