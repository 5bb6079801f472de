"""The history on a real PostgreSQL server (tests/history/conftest.py): the same schema and answers
as SQLite, atomic writes, several canaries sharing one database, the config URL path of the run hook."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from canary.cli import main
from canary.config import HistoryConfig
from canary.export.history.compare import compare_runs
from canary.export.history.findings import find_changes
from canary.export.history.importer import import_paths
from canary.export.history.record import record_run
from canary.export.history.rows import MetricRow, bisection_rows, flatten
from canary.export.history.store import HistoryError, open_store
from canary.judge.bisection import BisectFile, BisectReport, Culprit
from tests.support.synth import DEFAULT_SLOW, synth_history, synth_run

pytestmark = pytest.mark.postgres
SLOW = DEFAULT_SLOW[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pg") / "results"
    synth_history(root, runs=10)
    return root


def test_ten_runs_give_the_same_history_as_sqlite(pg_url: str, recorded: Path, tmp_path: Path) -> None:
    with open_store(url=pg_url) as pg, open_store(sqlite=tmp_path / "h.sqlite") as lite:
        assert pg.where.startswith("postgresql://127.0.0.1:")
        import_paths(pg, [recorded])
        import_paths(lite, [recorded])
        assert pg.count_rows() == lite.count_rows() == 1800
        assert pg.runs() == lite.runs()
        assert pg.series(SLOW, "throughput", "output_tokens_per_s") == lite.series(
            SLOW, "throughput", "output_tokens_per_s"
        )
        findings = find_changes(pg, HistoryConfig())
        assert findings == find_changes(lite, HistoryConfig())
        runs = [r.run_id for r in pg.runs()]
        assert {(f.cell_id, f.run_id) for f in findings} == {(SLOW, runs[6])}
        assert compare_runs(pg, runs[5], runs[6]) == compare_runs(lite, runs[5], runs[6])


def test_the_tables_are_real_postgres_tables(pg_url: str, recorded: Path) -> None:
    with open_store(url=pg_url) as store:
        import_paths(store, [recorded / "run-001"])
    with psycopg.connect(pg_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        value_type = conn.execute(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'canary_history_metrics' AND column_name = 'value'"
        ).fetchone()
    assert tables == {
        "canary_history_meta",
        "canary_history_runs",
        "canary_history_cells",
        "canary_history_checks",
        "canary_history_metrics",
        "canary_history_bisections",
    }
    assert value_type == ("double precision",)


def test_a_failed_write_rolls_back_on_postgres(pg_url: str, tmp_path: Path) -> None:
    run = synth_run(tmp_path / "r1", 1, request_count=20)
    rows = flatten(run)
    with open_store(url=pg_url) as store:
        store.write(rows)
        before = store.count_rows()
        broken = replace(rows, metrics=[*rows.metrics, MetricRow(run.run_id, "x", "throughput", "m", None)])  # type: ignore[arg-type]
        with pytest.raises(psycopg.errors.NotNullViolation):
            store.write(broken)
        assert store.count_rows() == before
        store.write(rows)  # the connection is usable after the rollback
        assert len(store.runs()) == 1


def test_two_canaries_share_one_database(pg_url: str, tmp_path: Path) -> None:
    """Each canary records its own config's runs; change points are found per config."""
    settings = HistoryConfig(url=pg_url)
    for number in range(1, 11):
        for config_name in ("cpu", "gpu"):
            run = synth_run(tmp_path / f"{config_name}{number}", number, regress_at=7 if config_name == "gpu" else None)
            run = run.model_copy(update={"run_id": f"{run.run_id}-{config_name}", "config_name": config_name})
            lines = record_run(run, settings, tmp_path / "unused")
            assert lines[0].startswith(f"history: recorded {run.run_id} in postgresql://127.0.0.1:")
    assert not (tmp_path / "unused").exists()  # no SQLite file when the URL is set
    with open_store(url=pg_url) as store:
        assert len(store.runs()) == 20 and len(store.runs("gpu")) == 10
        assert find_changes(store, settings, config_name="cpu") == []
        gpu = find_changes(store, settings, config_name="gpu")
    assert {f.cell_id for f in gpu} == {SLOW}
    assert {f.run_id for f in gpu} == {"20261107T020000Z-synth-gpu"}


def test_cli_against_postgres(pg_url: str, recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "import", str(recorded), "--url", pg_url]) == 0
    assert "imported 10 runs into postgresql://127.0.0.1:" in capsys.readouterr().out
    assert main(["history", "changes", "--cell", SLOW, "--url", pg_url]) == 0
    out = capsys.readouterr().out
    assert out.count("at run 20261107T020000Z-synth") == 5
    assert main(["compare", "previous", "latest", "--url", pg_url]) == 0
    assert "20261109T020000Z-synth -> 20261110T020000Z-synth" in capsys.readouterr().out


def test_bisections_on_postgres_as_on_sqlite(pg_url: str, tmp_path: Path) -> None:
    """The same DDL: a row per bisected cell, written with its run or beside it, gone with the run."""
    run = synth_run(tmp_path / "rb", 1, request_count=20)
    cell = run.cells[-1].cell.id
    report = BisectReport(
        cell=cell,
        image="candidate",
        range_kind="series",
        range=["01-a.patch", "02-b.patch"],
        rerun_checks=["throughput"],
        policy={},
        outcome="found",
        reason="scripted",
        culprit=Culprit(position=2, name="02-b.patch"),
        last_good=1,
        first_bad=2,
        cell_runs=4,
        started_at=run.started_at,
        duration_s=61.5,
    )
    bisections = BisectFile(run_id=run.run_id, bisections=[report])
    rows = bisection_rows(run.run_id, bisections)
    with open_store(url=pg_url) as pg, open_store(sqlite=tmp_path / "h.sqlite") as lite:
        for store in (pg, lite):
            store.write(flatten(run, bisections))
            store.write_bisections(run.run_id, rows)  # again: replaced, not doubled
        assert pg.bisections_of(run.run_id) == lite.bisections_of(run.run_id) == rows
        with pytest.raises(HistoryError, match="is not in the history"):
            pg.write_bisections("no-such-run", rows)
    with psycopg.connect(pg_url) as conn:
        conn.execute("DELETE FROM canary_history_runs WHERE run_id = %s", (run.run_id,))
        left = conn.execute("SELECT COUNT(*) FROM canary_history_bisections WHERE run_id = %s", (run.run_id,))
        assert left.fetchone() == (0,)  # ON DELETE CASCADE
