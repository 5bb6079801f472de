"""The SQLite history store: schema, atomic writes, re-imports, queries, clear errors."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from canary.export.history.importer import import_paths, load_run, results_files
from canary.export.history.rows import MetricRow, flatten
from canary.export.history.store import SCHEMA_VERSION, HistoryError, open_store, sqlite_path
from canary.judge.results import RunResult
from tests.support.synth import synth_history, synth_run


def _run(tmp_path: Path, number: int = 1) -> RunResult:
    return synth_run(tmp_path / f"run-{number}", number, request_count=25)


def test_rows_cover_every_cell_check_and_finite_metric(tmp_path: Path) -> None:
    run = _run(tmp_path)
    rows = flatten(run)
    assert rows.run.run_id == run.run_id
    assert rows.run.cells_total == len(run.cells)
    assert {c.cell_id for c in rows.cells} == {c.cell.id for c in run.cells}
    expected = sum(len(k.metrics) for c in run.cells for k in c.checks)
    assert len(rows.metrics) == expected
    assert {(c.cell_id, c.check_name) for c in rows.checks} == {
        (c.cell.id, k.name) for c in run.cells for k in c.checks
    }


def test_write_and_read_back(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        store.write(flatten(run))
        assert [r.run_id for r in store.runs()] == [run.run_id]
        cell = next(c for c in run.cells if c.check("throughput") is not None)
        check = cell.check("throughput")
        assert check is not None
        points = store.series(cell.cell.id, "throughput", "output_tokens_per_s")
        assert [p.value for p in points] == [check.metrics["output_tokens_per_s"]]
        assert points[0].image_ref == cell.cell.image_ref and points[0].check_verdict == check.verdict
        assert store.cells_of(run.run_id)[cell.cell.id][0] == cell.verdict
        assert store.count_rows() == len(flatten(run).metrics)


def test_rewriting_a_run_replaces_it(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        store.write(flatten(run))
        store.write(flatten(run))
        assert len(store.runs()) == 1
        assert store.count_rows() == len(flatten(run).metrics)


def test_a_failed_write_leaves_the_earlier_state(tmp_path: Path) -> None:
    """One transaction: a row that violates the schema rolls the whole run back, the old run stays."""
    first = _run(tmp_path).model_copy(update={"run_id": "run-a"})
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        store.write(flatten(first))
        before = store.count_rows()
        rows = flatten(first)
        broken = replace(rows, metrics=[*rows.metrics, MetricRow("run-a", "x", "throughput", "m", None)])  # type: ignore[arg-type]
        with pytest.raises(sqlite3.IntegrityError):
            store.write(broken)
        assert store.count_rows() == before
        assert [r.run_id for r in store.runs()] == ["run-a"]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    open_store(sqlite=path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE canary_history_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(HistoryError, match="newer than this canary"):
        open_store(sqlite=path)


def test_bad_url_and_unreachable_server_are_clear_errors() -> None:
    with pytest.raises(HistoryError, match="postgresql:// URL"):
        open_store(url="mysql://x@127.0.0.1/db")
    with pytest.raises(HistoryError, match=r"cannot connect to the history database postgresql://127\.0\.0\.1:1/db"):
        open_store(url="postgresql://user:secret@127.0.0.1:1/db", connect_timeout_s=2)


def test_sqlite_path_is_relative_to_the_results_dir(tmp_path: Path) -> None:
    assert sqlite_path(tmp_path) == tmp_path / "history.sqlite"
    assert sqlite_path(tmp_path, "x/h.db") == tmp_path / "x" / "h.db"
    assert sqlite_path(tmp_path, "/abs/h.db") == Path("/abs/h.db")


def test_import_finds_results_and_names_bad_files(tmp_path: Path) -> None:
    root = tmp_path / "results"
    paths = synth_history(root, runs=3)
    assert results_files([root]) == paths
    assert results_files([paths[0].parent]) == [paths[0]]
    bad = tmp_path / "bad" / "results.json"
    bad.parent.mkdir()
    bad.write_text('{"run_id": 3}')
    with pytest.raises(HistoryError, match=r"bad/results.json: not a canary results.json"):
        load_run(bad)
    with pytest.raises(HistoryError, match="no such file"):
        results_files([tmp_path / "missing"])
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        assert len(import_paths(store, [root])) == 3
        assert len(import_paths(store, [root])) == 3  # again: replaced, not doubled
        assert len(store.runs()) == 3


def test_resolve_run(tmp_path: Path) -> None:
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        with pytest.raises(HistoryError, match="holds no runs"):
            store.resolve_run("latest")
        for number in (1, 2, 3):
            store.write(flatten(synth_run(tmp_path / f"r{number}", number, request_count=20)))
        ids = [r.run_id for r in store.runs()]
        assert store.resolve_run("latest") == ids[-1]
        assert store.resolve_run("previous") == ids[-2]
        assert store.resolve_run(ids[0][:9]) == ids[0]
        with pytest.raises(HistoryError, match="ambiguous"):
            store.resolve_run("2026")
        with pytest.raises(HistoryError, match="no run 'nope'"):
            store.resolve_run("nope")
