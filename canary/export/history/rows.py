"""A RunResult flattened into history rows (the tables of canary.export.history.store)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from canary.judge.bisection import BisectFile
from canary.judge.results import FAILING_VERDICTS, RunResult


@dataclass(frozen=True)
class RunRow:
    """One run."""

    run_id: str
    config_name: str
    platform: str
    target: str
    baseline_image: str
    started_at: str
    finished_at: str
    canary_version: str
    interrupted: int
    cells_total: int
    cells_failing: int


@dataclass(frozen=True)
class CellRow:
    """One cell of a run, with its image and verdict."""

    run_id: str
    cell_id: str
    image: str
    image_ref: str
    topology: str
    backend: str
    verdict: str
    reason: str


@dataclass(frozen=True)
class CheckRow:
    """One check of a cell."""

    run_id: str
    cell_id: str
    check_name: str
    verdict: str
    summary: str


@dataclass(frozen=True)
class MetricRow:
    """One number: run x cell x check x metric."""

    run_id: str
    cell_id: str
    check_name: str
    metric: str
    value: float


@dataclass(frozen=True)
class BisectionRow:
    """One bisected cell of a run (bisect.json): how it ended and what it named."""

    run_id: str
    cell_id: str
    outcome: str
    culprit: str
    """The patch file name (series) or the image reference; '' when none was named."""
    cell_runs: int
    duration_s: float


@dataclass(frozen=True)
class RunRows:
    """Every row of one run."""

    run: RunRow
    cells: list[CellRow]
    checks: list[CheckRow]
    metrics: list[MetricRow]
    bisections: list[BisectionRow] = field(default_factory=list)


def _iso(value: object) -> str:
    return "" if value is None else value.isoformat() if hasattr(value, "isoformat") else str(value)


def bisection_rows(run_id: str, bisections: BisectFile) -> list[BisectionRow]:
    """A row per bisected cell that finished (found, not reproduced, inconclusive or interrupted; one
    still running, or killed, has no row)."""
    return [
        BisectionRow(run_id, b.cell, b.outcome, b.culprit.name if b.culprit else "", b.cell_runs, b.duration_s)
        for b in bisections.bisections
        if b.outcome != "running"
    ]


def flatten(run: RunResult, bisections: BisectFile | None = None) -> RunRows:
    """The rows of a run (and of its bisect.json, when given); non-finite numbers are left out (they
    mean "not measured")."""
    run_row = RunRow(
        run_id=run.run_id,
        config_name=run.config_name,
        platform=run.platform,
        target=run.target,
        baseline_image=run.baseline_image,
        started_at=_iso(run.started_at),
        finished_at=_iso(run.finished_at),
        canary_version=run.canary_version,
        interrupted=int(run.interrupted),
        cells_total=len(run.cells),
        cells_failing=sum(1 for c in run.cells if c.verdict in FAILING_VERDICTS),
    )
    cells: list[CellRow] = []
    checks: list[CheckRow] = []
    metrics: list[MetricRow] = []
    for result in run.cells:
        cell = result.cell
        cells.append(
            CellRow(
                run.run_id,
                cell.id,
                cell.image,
                cell.image_ref,
                cell.topology,
                cell.backend,
                result.verdict,
                result.reason,
            )
        )
        for check in result.checks:
            checks.append(CheckRow(run.run_id, cell.id, check.name, check.verdict, check.summary))
            for key, value in sorted(check.metrics.items()):
                if isinstance(value, int | float) and math.isfinite(value):
                    metrics.append(MetricRow(run.run_id, cell.id, check.name, key, float(value)))
    found = bisection_rows(run.run_id, bisections) if bisections is not None else []
    return RunRows(run=run_row, cells=cells, checks=checks, metrics=metrics, bisections=found)
