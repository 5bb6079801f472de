"""Writers of a run's reports into results/<run-id>/: results.json, requests.jsonl and requests.csv (every
request of the load runs), junit.xml, summary.md and summary.html; `latest` points at the newest run.

Reports never import canary.export.prometheus.publish (nor the reverse): the orchestration (canary.run.orchestrate)
writes the run's Prometheus textfile beside them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from canary.core.atomic import write_atomic
from canary.judge.results import DERIVED_KEYS, RunResult

if TYPE_CHECKING:
    from canary.export.report.trends import Trends


def write_json(run: RunResult, run_dir: Path) -> Path:
    """Write results.json atomically (temp file + rename: never half-written), the run's outcome and
    exit code first (a script reads `.outcome` / `.exit_code` instead of recomputing them)."""
    data = json.loads(run.model_dump_json())
    first = {key: data.pop(key) for key in ("schema_version", "run_id", *sorted(DERIVED_KEYS, reverse=True))}
    return write_atomic(run_dir / "results.json", json.dumps(first | data, indent=2, ensure_ascii=False) + "\n")


def point_latest(results_root: Path, run_dir: Path) -> Path:
    """Make results_root/latest a symlink to run_dir (atomically replaced)."""
    link = results_root / "latest"
    tmp = results_root / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link


def write_all(
    run: RunResult, run_dir: Path, *, junit: bool = True, html: bool = True, trends: Trends | None = None
) -> list[Path]:
    """Write every report of a run; returns the paths written.

    results.json first (the source of truth; the others are views of it), then every request of the load
    runs as requests.jsonl and requests.csv (canary.export.report.request_export). junit/html follow the
    config's export.junit / export.html. summary.md and summary.html compare the run with its
    history when `trends` are given (canary.export.report.trends.load_trends), else say "no previous run".
    """
    from canary.export.report.html import write_html
    from canary.export.report.junit import write_junit
    from canary.export.report.markdown import write_markdown
    from canary.export.report.request_export import write_requests

    written = [write_json(run, run_dir), *write_requests(run, run_dir)]
    if junit:
        written.append(write_junit(run, run_dir))
    written.append(write_markdown(run, run_dir, trends))
    if html:
        written.append(write_html(run, run_dir, trends))
    return written
