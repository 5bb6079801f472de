"""A number an invalid (or errored, or corrupted) cell measured is marked as not comparable wherever a
person reads it: the details tables of summary.md and summary.html, the terminal's numbers (short
`(n/c)`, explained in the title), the P/D time section (tests/unit/export/report/test_report_pdtime.py)
and `canary history show` (the issue: an invalid cell's 3.35 req/s appeared unmarked)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from rich.console import Console

from canary.cli import main
from canary.export.report import html, markdown, write_json
from canary.export.report.terminal import number_rows
from canary.judge.results import CellResult, RunResult
from tests.support.sample import sample_run

RATE = 3.35


def _measured(run: RunResult) -> CellResult:
    """A cell whose throughput passed, with its requests/s."""
    return next(c for c in run.cells if (t := c.check("throughput")) is not None and t.verdict == "pass" and t.metrics)


def _invalid(run: RunResult, cell_id: str) -> RunResult:
    """The run with that cell's throughput invalid at RATE req/s (a CPU-starved client measured it)."""
    cells = []
    for cell in run.cells:
        if cell.cell.id == cell_id:
            checks = [
                c.model_copy(update={"verdict": "invalid", "metrics": {**c.metrics, "requests_per_s": RATE}})
                if c.name == "throughput"
                else c
                for c in cell.checks
            ]
            cell = cell.model_copy(update={"checks": checks, "verdict": "invalid", "reason": "client CPU-starved"})
        cells.append(cell)
    return run.model_copy(update={"cells": cells})


@pytest.fixture(scope="module")
def runs() -> tuple[RunResult, RunResult, str]:
    good = sample_run()
    cell_id = _measured(good).cell.id
    return good, _invalid(good, cell_id), cell_id


def test_the_summaries_mark_it(runs: tuple[RunResult, RunResult, str]) -> None:
    good, bad, cell_id = runs
    md = markdown.render(bad)
    details = f'<a id="cell-{cell_id}"></a>`{cell_id}`'
    row = next(line for line in md.splitlines() if line.startswith(f"| {details} "))
    assert f"{RATE} (not comparable)" in row
    assert f"{RATE} (not comparable)" in html.render(bad)
    assert "(not comparable)" not in next(
        line for line in markdown.render(good).splitlines() if line.startswith(f"| {details} ")
    )


def test_the_terminal_marks_it_short_and_says_what_the_mark_means(runs: tuple[RunResult, RunResult, str]) -> None:
    _, bad, cell_id = runs
    console = Console(record=True, width=400, color_system=None)
    console.print(number_rows(bad))
    text = console.export_text()
    assert "numbers (n/c: not comparable: " in text
    row = next(line for line in text.splitlines() if line.startswith(f"│ {cell_id} "))
    assert f"{RATE} (n/c)" in row


def test_history_show_marks_it(
    runs: tuple[RunResult, RunResult, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad, cell_id = runs
    root = tmp_path / "results"
    day = dt.datetime(2026, 11, 30, 2, tzinfo=dt.UTC)
    for n, run in enumerate((good, bad)):
        run_id = f"2026113{n}T020000Z-sample"
        (root / run_id).mkdir(parents=True)
        write_json(run.model_copy(update={"run_id": run_id, "started_at": day + dt.timedelta(days=n)}), root / run_id)
    assert main(["history", "import", str(root), "--results-dir", str(root)]) == 0
    capsys.readouterr()
    args = ["--metric", "requests_per_s", "--results-dir", str(root)]
    assert main(["history", "show", "--cell", cell_id, *args]) == 0
    out = capsys.readouterr().out
    (bad_row,) = [line for line in out.splitlines() if "20261131T020000Z" in line]
    (good_row,) = [line for line in out.splitlines() if "20261130T020000Z" in line]
    assert f"{RATE} (not comparable)" in bad_row and "not comparable" not in good_row
    assert main(["history", "show", *args]) == 0
    matrix = capsys.readouterr().out
    assert f"{RATE} (not comparable)" in next(line for line in matrix.splitlines() if cell_id in line)
