"""Run a load subprocess from the canary (no locust, no gevent here) and read its result.

`run_load` writes the spec, starts `python -m canary.load.process` in its own process group with a
deadline, always kills the group on the way out, and turns the raw output into samples, client
health and metrics. `LoadSession` keeps one such process for many short runs. `token_pool` asks a
server for ordinary token ids (its own `/tokenize`), so prompts have an exact length without a
tokenizer in the controller.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from canary.config.trace import TraceError
from canary.load.material import WORDS
from canary.load.stats import ClientHealth, Sample, Slo, client_problems, error_counts, schedule_problems, summarize
from canary.load.workload import WorkloadSpec
from canary.load.workloads.trace.requests import check_trace

SUBPROCESS_GRACE_S = 240.0
POOL_TEXT_WORDS = 400


class LoadError(RuntimeError):
    """The load subprocess failed or wrote no result."""


@dataclass
class LoadResult:
    """One load run: raw samples, the client's self-check and the metrics computed from them."""

    spec: WorkloadSpec
    samples: list[Sample]
    health: ClientHealth
    stop_reason: str
    not_sent: int
    cut: int
    processes: int
    metrics: dict[str, float] = field(default_factory=dict)
    client_problems: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    out_path: Path | None = None

    @property
    def valid(self) -> bool:
        """False when the client, not the server, limited the run."""
        return not self.client_problems

    def summary(self) -> dict[str, Any]:
        """A compact dict for evidence."""
        return {
            "valid": self.valid,
            "client_problems": self.client_problems,
            "stop_reason": self.stop_reason,
            "not_sent": self.not_sent,
            "cut_by_deadline": self.cut,
            "processes": self.processes,
            "errors": self.errors,
            "raw": str(self.out_path) if self.out_path else None,
        }


def analyze(spec: WorkloadSpec, raw: dict[str, Any], slo: Slo | None = None) -> LoadResult:
    """Samples, health and metrics from the subprocess's raw JSON."""
    samples = [Sample.from_json(s) for s in raw["samples"]]
    health = ClientHealth.from_json(raw["health"])
    # open-loop multi_turn: request_rate starts conversations; the request rate follows the server's pace
    conversations = spec.open_loop and spec.workload.kind == "multi_turn"
    metrics = summarize(samples, slo=slo, intended_rate=None if conversations else spec.request_rate, health=health)
    if conversations and spec.request_rate is not None:
        metrics["intended_conversation_rate_per_s"] = spec.request_rate
    metrics["requests_not_sent"] = float(raw["not_sent"])
    metrics["requests_cut_by_deadline"] = float(raw["cut"])
    if "max_in_flight_seen" in raw:
        metrics["max_in_flight_seen"] = float(raw["max_in_flight_seen"])
    return LoadResult(
        spec=spec,
        samples=samples,
        health=health,
        stop_reason=str(raw["stop_reason"]),
        not_sent=int(raw["not_sent"]),
        cut=int(raw["cut"]),
        processes=int(raw.get("processes", 1)),
        metrics=metrics,
        client_problems=client_problems(health, spec.max_client_cpu_ratio, spec.max_client_lag_p99_s)
        + (schedule_problems(samples, spec.max_send_lateness_p99_s) if spec.open_loop else []),
        errors=error_counts(samples),
    )


def run_load(
    spec: WorkloadSpec,
    work_dir: Path,
    *,
    name: str = "load",
    slo: Slo | None = None,
    python: str = sys.executable,
    extra_args: list[str] | None = None,
) -> LoadResult:
    """Run one load in a subprocess; its raw output stays in work_dir/NAME.json."""
    spec_path, out_path, log_path = _prepare(spec, work_dir, name)
    args = [python, "-m", "canary.load.process", "--spec", str(spec_path), "--out", str(out_path), *(extra_args or [])]
    deadline_s = spec.max_duration_s + SUBPROCESS_GRACE_S
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc)
    if code is None:
        raise LoadError(f"load run exceeded {deadline_s:.0f}s and was killed; log: {log_path}")
    if code != 0 or not out_path.exists():
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise LoadError(f"load run exited with {code}; log {log_path}:\n{tail}")
    return _read(spec, out_path, slo)


def _prepare(spec: WorkloadSpec, work_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """Check the spec's own input, write it; (spec, out, log) paths of run NAME in work_dir."""
    if spec.workload.kind == "trace":  # a bad trace is the config's fault: say which line, not a subprocess log
        try:
            check_trace(spec.workload, spec.total_requests)
        except TraceError as exc:
            raise LoadError(str(exc)) from exc
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = (work_dir / f"{name}{ext}" for ext in (".spec.json", ".json", ".log"))
    spec_path.write_text(spec.model_dump_json(indent=1), encoding="utf-8")
    out_path.unlink(missing_ok=True)
    return spec_path, out_path, log_path


def _read(spec: WorkloadSpec, out_path: Path, slo: Slo | None) -> LoadResult:
    result = analyze(spec, json.loads(out_path.read_text(encoding="utf-8")), slo)
    result.out_path = out_path
    return result


class LoadSession:
    """One load process for many short runs (`python -m canary.load.process --serve`).

    A run costs its requests only, not ~3 s of CPU to start Python, locust and gevent: the paired
    verdict's windows are 16-request runs. Each run is the same code as `run_load`'s (one local
    process, open or closed loop) with the same deadline; the process is stopped (its whole group)
    when the `with` block ends, also on an exception or Ctrl-C, and after a run that missed its
    deadline. `run` has run_load's signature for what the paired check needs."""

    def __init__(self, log_path: Path, *, python: str = sys.executable) -> None:
        self.log_path = log_path
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> LoadSession:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # closed in close()
        self._proc = subprocess.Popen(
            [self.python, "-m", "canary.load.process", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the process (EOF first, then its group) and close its log."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            _kill_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def run(self, spec: WorkloadSpec, work_dir: Path, name: str = "load", slo: Slo | None = None) -> LoadResult:
        """One load run in the session's process; its raw output stays in work_dir/NAME.json."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise LoadError("the load session is not running")
        spec_path, out_path, _log = _prepare(spec, work_dir, name)
        deadline_s = spec.max_duration_s + SUBPROCESS_GRACE_S
        try:
            proc.stdin.write((json.dumps({"spec": str(spec_path), "out": str(out_path)}) + "\n").encode())
            proc.stdin.flush()
        except OSError as exc:
            raise LoadError(f"the load session's process is gone ({exc}); log: {self.log_path}") from exc
        answer = _read_line(proc.stdout, deadline_s)
        if answer is None:
            self.close()
            raise LoadError(f"load run {name} exceeded {deadline_s:.0f}s; session stopped; log: {self.log_path}")
        if not answer:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise LoadError(f"the load session's process ended during run {name}; log {self.log_path}:\n{tail}")
        if not answer.startswith("done ") or not out_path.exists():
            raise LoadError(f"load run {name} failed in the session: {answer}")
        return _read(spec, out_path, slo)


def _read_line(stream: IO[bytes], timeout_s: float) -> str | None:
    """One line from a pipe within timeout_s: the line ("" at EOF), or None when none came in time."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout=timeout_s):
            return None
    return stream.readline().decode("utf-8", errors="replace").strip()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the load process and any worker it started (same process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _post_json(url: str, payload: dict[str, Any], timeout_s: float) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


def _pool_text() -> str:
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(POOL_TEXT_WORDS))


def token_pool(base_urls: list[str], model: str, timeout_s: float = 30.0) -> tuple[list[int] | None, str]:
    """Ordinary token ids of the served model from the first server whose /tokenize answers.

    Returns (ids, where-from); (None, reason) when none answers (then prompts are text).
    """
    reasons: list[str] = []
    for url in base_urls:
        try:
            data = _post_json(
                url.rstrip("/") + "/tokenize",
                {"model": model, "prompt": _pool_text(), "add_special_tokens": False},
                timeout_s,
            )
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reasons.append(f"{url}: {exc}")
            continue
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
            return sorted(set(tokens)), f"{url}/tokenize"
        reasons.append(f"{url}: no token list in the answer")
    return None, "; ".join(reasons) or "no server to ask"


def words_per_token(base_urls: list[str], model: str, timeout_s: float = 30.0) -> float:
    """Words per token of the served model's tokenizer for plain text (1.0 when unknown)."""
    text = _pool_text()
    for url in base_urls:
        try:
            data = _post_json(
                url.rstrip("/") + "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}, timeout_s
            )
        except (urllib.error.URLError, OSError, ValueError):
            continue
        count = data.get("count") if isinstance(data, dict) else None
        if isinstance(count, int) and count > 0:
            return POOL_TEXT_WORDS / count
    return 1.0


def wait_ready(base_url: str, timeout_s: float = 60.0) -> None:
    """Poll /v1/models until the server answers (raises after the deadline)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.5)
    raise LoadError(f"{base_url} not ready after {timeout_s:.0f}s: {last}")
