"""Bisected cells in the run history (SQLite; tests/history runs the same on PostgreSQL): one row per
bisected cell beside its run, replaced when the run's bisect.json changes, kept by a re-import that
finds the bisect.json, and a clear line when the run is not in the history."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from canary.config import HistoryConfig
from canary.export.history.importer import import_paths
from canary.export.history.record import record_bisections
from canary.export.history.rows import BisectionRow, bisection_rows, flatten
from canary.export.history.store import HistoryError, open_store
from canary.judge.bisection import BISECT_JSON, BisectFile, BisectReport, Culprit
from canary.judge.results import RunResult
from tests.support.synth import synth_run

CELL = "agg.cpu_attn.b32.auto.v1.candidate"
STARTED = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)


def _report(cell: str, outcome: str, culprit: str | None = None, runs: int = 5) -> BisectReport:
    return BisectReport(
        cell=cell,
        image="candidate",
        range_kind="series",
        range=[f"0{i}-x.patch" for i in range(1, 9)],
        rerun_checks=["throughput"],
        policy={},
        outcome=outcome,  # type: ignore[arg-type]
        reason="scripted",
        culprit=None if culprit is None else Culprit(position=5, name=culprit, subject="nixl: read every block"),
        last_good=4,
        first_bad=5,
        cell_runs=runs,
        started_at=STARTED,
        finished_at=None if outcome == "running" else STARTED + dt.timedelta(minutes=4),
        duration_s=222.5,
    )


def _file(run: RunResult, *reports: BisectReport) -> BisectFile:
    return BisectFile(run_id=run.run_id, bisections=list(reports))


def _run(tmp_path: Path) -> RunResult:
    return synth_run(tmp_path / "results" / "run-1", 1, request_count=20)


def test_a_row_per_finished_bisection_with_outcome_culprit_runs_and_duration(tmp_path: Path) -> None:
    run = _run(tmp_path)
    found = _report(CELL, "found", "05-nixl.patch")
    other = _report("agg.cpu_attn.b16.auto.v1.candidate", "inconclusive", runs=12)
    running = _report("agg.cpu_attn.b128.auto.v1.candidate", "running", runs=2)
    assert bisection_rows(run.run_id, _file(run, found, other, running)) == [
        BisectionRow(run.run_id, CELL, "found", "05-nixl.patch", 5, 222.5),
        BisectionRow(run.run_id, "agg.cpu_attn.b16.auto.v1.candidate", "inconclusive", "", 12, 222.5),
    ]  # a bisection still running (or killed) has no row


def test_bisections_are_written_beside_their_run_and_replaced(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        store.write(flatten(run))
        store.write_bisections(run.run_id, bisection_rows(run.run_id, _file(run, _report(CELL, "interrupted"))))
        assert [b.outcome for b in store.bisections_of(run.run_id)] == ["interrupted"]
        again = bisection_rows(run.run_id, _file(run, _report(CELL, "found", "05-nixl.patch")))
        store.write_bisections(run.run_id, again)  # the cell bisected again: its row is replaced
        assert store.bisections_of(run.run_id) == again
        store.write(flatten(run))  # the run rewritten without its bisect.json: the run's rows are the run's
        assert store.bisections_of(run.run_id) == []


def test_a_run_not_in_the_history_is_a_clear_error(tmp_path: Path) -> None:
    run = _run(tmp_path)
    rows = bisection_rows(run.run_id, _file(run, _report(CELL, "found", "05-nixl.patch")))
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        with pytest.raises(HistoryError, match=rf"run {run.run_id} is not in the history, so its bisection"):
            store.write_bisections(run.run_id, rows)
        assert store.bisections_of(run.run_id) == []


def test_record_bisections_is_a_status_line_and_leaves_no_empty_history(tmp_path: Path) -> None:
    run = _run(tmp_path)
    root = tmp_path / "results"
    bisections = _file(run, _report(CELL, "found", "05-nixl.patch"))
    (line,) = record_bisections(bisections, HistoryConfig(), root)
    assert line.startswith("history: bisection not recorded: no history at ")
    assert not (root / "history.sqlite").exists()
    assert record_bisections(bisections, HistoryConfig(enabled=False), root) == []
    with open_store(sqlite=root / "history.sqlite") as store:
        store.write(flatten(run))
    (line,) = record_bisections(bisections, HistoryConfig(), root)
    assert line == f"history: recorded 1 bisected cell(s) of {run.run_id} in {root / 'history.sqlite'}"
    with open_store(sqlite=root / "history.sqlite", create=False) as store:
        assert [(b.cell_id, b.culprit, b.cell_runs) for b in store.bisections_of(run.run_id)] == [
            (CELL, "05-nixl.patch", 5)
        ]


def test_import_reads_the_bisect_json_beside_results_json(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run_dir = tmp_path / "results" / "run-1"
    (run_dir / "results.json").write_text(run.model_dump_json())
    (run_dir / BISECT_JSON).write_text(_file(run, _report(CELL, "found", "05-nixl.patch")).model_dump_json())
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        import_paths(store, [run_dir])
        import_paths(store, [run_dir])  # again: replaced, not doubled
        assert [(b.cell_id, b.outcome) for b in store.bisections_of(run.run_id)] == [(CELL, "found")]
