"""Which servers of a deployed cell died while it was being checked, and how.

A target that can see its servers' processes (local: the process we started; container: the container's
state) gives its Deployment an `exit_status` reader; the runner asks `deaths` after each check. A death
is named with its role, when it was noticed, its exit status or signal and the log lines before it, so a
cell whose engine dies is never reported as the known bug it was expected to show
(canary.judge.expectations).
"""

from __future__ import annotations

import datetime as dt
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ExitStatus = Callable[[str], int | str | None]
"""A role's exit status once its server has exited (negative: killed by that signal), or how it ended in
words where no status is known (a pod that restarted), None while it runs."""

LOG_LINES = 12
"""Log lines kept from before a death."""

ACCESS_LINE = re.compile(r'^INFO:\s+[\d.:\[\]a-f]+ - "')
"""A uvicorn access-log line of the API server (left out of a death's log tail)."""
ENGINE_DEAD_MARKERS = ("EngineDeadError", "EngineCore encountered an issue", "died unexpectedly")
"""Log text vLLM writes when its engine core is gone (vllm/v1/engine/exceptions.py ENGINE_DEAD_MESSAGE,
vllm/v1/executor/multiproc_executor.py, vllm/v1/utils.py); the first such line is kept as the cause."""


@dataclass(frozen=True)
class EngineDeath:
    """One server that stopped while its cell was being checked."""

    role: str
    noticed_at: str
    """UTC time the runner noticed (ISO 8601, seconds)."""
    how: str
    """'exited with status 1', 'killed by signal 9 (SIGKILL)'."""
    cause: str | None
    """The first engine-death line of its log, if any (with vLLM's own timestamp)."""
    log_tail: tuple[str, ...]

    def line(self) -> str:
        """One line for a reason: role, how, when and the cause."""
        cause = f": {self.cause}" if self.cause else ""
        return f"{self.role} server died ({self.how}, noticed {self.noticed_at}){cause}"

    def to_json(self) -> dict[str, Any]:
        """Evidence form."""
        return {
            "role": self.role,
            "noticed_at": self.noticed_at,
            "how": self.how,
            "cause": self.cause,
            "log_tail": list(self.log_tail),
        }


def describe_exit(status: int) -> str:
    """An exit status in words (Popen's convention: negative is the signal that killed it)."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-status} ({name})"
    if status > 128 and status - 128 in {s.value for s in signal.Signals}:
        return f"exited with status {status} (signal {signal.Signals(status - 128).name} by the shell convention)"
    return f"exited with status {status}"


def _log_evidence(log_path: Path | None) -> tuple[str | None, tuple[str, ...]]:
    if log_path is None:
        return None, ()
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None, ()
    cause = next((line.strip() for line in lines if any(m in line for m in ENGINE_DEAD_MARKERS)), None)
    # The server's access lines ('INFO: 127.0.0.1:5182 - "POST /v1/completions HTTP/1.1" 500') are left out: a
    # server whose engine core died answers 500 to every request until it exits, which would fill the tail.
    own = [line for line in lines if not ACCESS_LINE.match(line)]
    return cause, tuple(line[:400] for line in own[-LOG_LINES:])


def deaths(roles: dict[str, Path | None], exit_status: ExitStatus) -> list[EngineDeath]:
    """The servers (role -> log path) that have exited, each with its status and log evidence."""
    found: list[EngineDeath] = []
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    for role, log_path in roles.items():
        status = exit_status(role)
        if status is None:
            continue
        cause, tail = _log_evidence(log_path)
        how = status if isinstance(status, str) else describe_exit(status)
        found.append(EngineDeath(role, now, how, cause, tail))
    return found
