"""The per-request samples of each cell's load run, for the report's distributions and time series.

The throughput check records every request (canary.load: cells/<id>/throughput/run-N.json) and
names each file in its evidence (`runs[].raw`), relative to the directory `canary run` ran in
(results/<run id>/cells/...). The report reads them from the run directory it is written into, so a
results directory that was moved or copied still shows them; a file that is gone means no samples
(the charts then fall back to the p50/p90/p99 the check recorded)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from canary.judge.results import CellResult, RunResult
from canary.load.stats import Sample, percentile

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
"""The percentiles the report prints per metric (aiperf's set and the quartiles)."""
METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}
"""metric -> its name for people; ITL pools every token gap of every request (as the check's itl_*)."""


@dataclass(frozen=True)
class Requests:
    """The measured (not warm-up) requests of one cell's load runs, in send order."""

    samples: list[Sample] = field(default_factory=list)

    def values(self, metric: str) -> list[float]:
        """One value per successful request (per token gap for itl), in seconds."""
        out: list[float] = []
        for s in self.samples:
            if not s.ok:
                continue
            if metric == "itl":
                out += [v for v in s.itl_s if math.isfinite(v)]
                continue
            value = {"ttft": s.ttft_s, "tpot": s.tpot_s, "e2e": s.e2e_s}[metric]
            if value is not None and math.isfinite(value):
                out.append(value)
        return out

    def percentiles(self, metric: str) -> dict[int, float]:
        """PERCENTILES of a metric in seconds ({} without values)."""
        values = self.values(metric)
        return {p: percentile(values, p) for p in PERCENTILES} if values else {}

    def timeline(self, metric: str) -> list[tuple[float, float]]:
        """(seconds since the first measured send, the request's value in seconds) per successful request."""
        if not self.samples:
            return []
        start = min(s.sent_at for s in self.samples)
        out = []
        for s in self.samples:
            value = {"ttft": s.ttft_s, "tpot": s.tpot_s, "e2e": s.e2e_s}.get(metric)
            if s.ok and value is not None and math.isfinite(value):
                out.append((s.sent_at - start, value))
        return out


def _resolve(raw: str, run_dir: Path) -> Path | None:
    """The file a recorded raw path names: under run_dir from its 'cells' part on, else as given."""
    path = Path(raw)
    parts = path.parts
    if "cells" in parts:
        inside = run_dir.joinpath(*parts[parts.index("cells") :])
        if inside.is_file():
            return inside
    return path if path.is_file() else None


def recorded_runs(result: CellResult, run_dir: Path) -> list[tuple[int, list[Sample]]]:
    """(repeat, every recorded request, warm-ups included) of each of a cell's load runs whose file is
    there and readable; [] when none was recorded."""
    check = result.check("throughput")
    runs = check.evidence.get("runs") if check is not None else None
    if not isinstance(runs, list):
        return []
    out: list[tuple[int, list[Sample]]] = []
    for repeat, run in enumerate(runs, start=1):
        raw = run.get("raw") if isinstance(run, dict) else None
        path = _resolve(str(raw), run_dir) if raw else None
        if path is None:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.append((repeat, [Sample.from_json(s) for s in data.get("samples", [])]))
        except (OSError, ValueError, TypeError):
            continue  # an unreadable file: no samples from it, the report still renders
    return out


def cell_requests(result: CellResult, run_dir: Path) -> Requests | None:
    """The measured requests of a cell's load runs (every repeat), or None when none was recorded."""
    samples = [s for _, run in recorded_runs(result, run_dir) for s in run if not s.warmup]
    return Requests(sorted(samples, key=lambda s: s.sent_at)) if samples else None


def load_requests(run: RunResult, run_dir: Path) -> dict[str, Requests]:
    """cell id -> its measured requests, for every cell whose load runs were recorded."""
    out = {}
    for result in run.cells:
        found = cell_requests(result, run_dir)
        if found is not None:
            out[result.cell.id] = found
    return out
