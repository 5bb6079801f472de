"""Every request of every cell's load runs as rows, beside results.json: requests.jsonl (one JSON object
per request, every field the load generator recorded, token gaps included) and requests.csv (the same
requests, one column per scalar field, the token gaps as their mean).

Each row says which cell, which load run (repeat) and whether the cell's speed numbers are comparable
(`comparable: false` where the throughput check could not measure or a corrupting check failed:
canary.export.report.grid.not_to_scale, as the summaries mark them). Warm-up requests are rows too
(`warmup: true`); the check's numbers leave them out."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from canary.core.atomic import write_atomic
from canary.export.report.grid import check_verdicts, not_to_scale
from canary.export.report.requests import recorded_runs
from canary.judge.results import CellResult, RunResult
from canary.load.stats import Sample

REQUESTS_JSONL = "requests.jsonl"
REQUESTS_CSV = "requests.csv"
CSV_COLUMNS: tuple[str, ...] = (
    "cell",
    "image",
    "topology",
    "run",
    "index",
    "warmup",
    "ok",
    "comparable",
    "request_id",
    "worker",
    "intended_at",
    "sent_at",
    "ended_at",
    "ttft_s",
    "tpot_s",
    "itl_mean_s",
    "e2e_s",
    "prompt_tokens",
    "output_tokens",
    "expected_prompt_tokens",
    "expected_output_tokens",
    "token_events",
    "error",
    "error_detail",
)
"""requests.csv's header, in order (requests.jsonl has these keys too, and `itl_s`: every token gap)."""


def _row(result: CellResult, repeat: int, sample: Sample, comparable: bool) -> dict[str, Any]:
    gaps = [g for g in sample.itl_s if math.isfinite(g)]
    return {
        "cell": result.cell.id,
        "image": result.cell.image,
        "topology": result.cell.topology,
        "run": repeat,
        **sample.to_json(),
        "ok": sample.ok,
        "comparable": comparable,
        "tpot_s": sample.tpot_s,
        "itl_mean_s": sum(gaps) / len(gaps) if gaps else None,
    }


def request_rows(run: RunResult, run_dir: Path) -> list[dict[str, Any]]:
    """Every recorded request of the run's cells, cell by cell in plan order, each run in send order."""
    rows = []
    for result in run.cells:
        comparable = not not_to_scale(check_verdicts(result), "throughput")
        for repeat, samples in recorded_runs(result, run_dir):
            rows += [_row(result, repeat, s, comparable) for s in sorted(samples, key=lambda s: s.sent_at)]
    return rows


def _csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
    return out.getvalue()


def write_requests(run: RunResult, run_dir: Path) -> list[Path]:
    """requests.jsonl and requests.csv in the run directory (none when no cell recorded a request)."""
    rows = request_rows(run, run_dir)
    if not rows:
        return []
    jsonl = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return [write_atomic(run_dir / REQUESTS_JSONL, jsonl), write_atomic(run_dir / REQUESTS_CSV, _csv(rows))]
