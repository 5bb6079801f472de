"""What `canary run` does with the history after its cells ran: write the run (one transaction),
find change points of the tracked metrics of its cells, and hand recent worse ones to the
exporters (keys of findings.TRACKED in the throughput check's metrics). And what a bisection does
after it ends: put the run's bisected cells (bisect.json) beside the run.

Never fails the run: a history that cannot be opened or written is one status line, the run's
results on disk and in Prometheus are complete without it.
"""

from __future__ import annotations

from pathlib import Path

from canary.config import HistoryConfig
from canary.export.history.findings import find_changes, recent_worse
from canary.export.history.rows import bisection_rows, flatten
from canary.export.history.store import HistoryError, HistoryStore, open_store, sqlite_path
from canary.export.history.tracked import TRACKED, TRACKED_CHECK
from canary.judge.bisection import BisectFile
from canary.judge.results import RunResult


def open_configured(settings: HistoryConfig, results_dir: Path) -> HistoryStore:
    """The configured store: PostgreSQL when export.history.url is set, else the SQLite file."""
    return open_store(
        url=settings.url, sqlite=sqlite_path(results_dir, settings.path), password_env=settings.password_env
    )


def annotate(run: RunResult, store: HistoryStore, settings: HistoryConfig) -> list[str]:
    """Find change points of the run's cells; put recent worse ones into their throughput metrics."""
    cells = [c.cell.id for c in run.cells if c.check(TRACKED_CHECK) is not None]
    findings = find_changes(store, settings, cells=cells, config_name=run.config_name)
    lines = [f"history: {f.sentence()}" for f in findings if f.runs_ago < settings.recent_runs]
    for (cell_id, metric), finding in recent_worse(findings, settings.recent_runs).items():
        result = next(c for c in run.cells if c.cell.id == cell_id)
        check = result.check(TRACKED_CHECK)
        if check is not None:
            check.metrics[TRACKED[metric]] = round(finding.worse, 6)
    return lines


def record_run(run: RunResult, settings: HistoryConfig, results_dir: Path) -> list[str]:
    """Write the run into the history and annotate it; returns status lines (never raises HistoryError)."""
    if not settings.enabled:
        return []
    try:
        with open_configured(settings, results_dir) as store:
            store.write(flatten(run))
            lines = annotate(run, store, settings)
            return [f"history: recorded {run.run_id} in {store.where}", *lines]
    except HistoryError as exc:
        return [f"history: FAILED, {exc}"]


def record_bisections(bisections: BisectFile, settings: HistoryConfig, results_dir: Path) -> list[str]:
    """Replace the run's bisection rows with bisect.json's; returns status lines (never raises
    HistoryError: the run must be in the history, as `canary run` leaves it when the history is on)."""
    if not settings.enabled:
        return []
    rows = bisection_rows(bisections.run_id, bisections)
    try:  # create=False: no empty SQLite history left behind for a run that is not in one
        with open_store(
            url=settings.url,
            sqlite=sqlite_path(results_dir, settings.path),
            create=False,
            password_env=settings.password_env,
        ) as store:
            store.write_bisections(bisections.run_id, rows)
            return [f"history: recorded {len(rows)} bisected cell(s) of {bisections.run_id} in {store.where}"]
    except HistoryError as exc:
        return [f"history: bisection not recorded: {exc}"]
