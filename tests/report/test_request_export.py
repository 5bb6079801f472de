"""Per-request records export (canary/export/report/request_export.py): every request of every cell's
load runs lands beside results.json as requests.jsonl and requests.csv, written by the same
write_all `canary run` calls, read back from the raw files the throughput check records; the rows of a
cell whose speed is not comparable say so."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import reporthistory as h

from canary.export.report import write_all
from canary.export.report.grid import check_verdicts, not_to_scale
from canary.export.report.request_export import CSV_COLUMNS, REQUESTS_CSV, REQUESTS_JSONL
from canary.judge.results import RunResult
from tests.support.sample import sample_run


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path, str]:
    root = tmp_path_factory.mktemp("results")
    run = sample_run()
    measured = [c for c in run.cells if (t := c.check("throughput")) is not None and "ttft_p50_s" in t.metrics]
    invalid = measured[0].cell.id
    cells = []
    for cell in run.cells:
        if cell.cell.id == invalid:
            checks = [c.model_copy(update={"verdict": "invalid"}) if c.name == "throughput" else c for c in cell.checks]
            cell = cell.model_copy(update={"checks": checks, "verdict": "invalid"})
        cells.append(cell)
    run = run.model_copy(update={"cells": cells})
    run_dir = root / run.run_id
    h.write_requests(run, run_dir)
    written = write_all(run, run_dir, html=False)
    assert {p.name for p in written} >= {"results.json", REQUESTS_JSONL, REQUESTS_CSV}
    return run, run_dir, invalid


def test_every_request_is_a_jsonl_line_with_its_cell_and_run(exported: tuple[RunResult, Path, str]) -> None:
    run, run_dir, _ = exported
    rows = [json.loads(line) for line in (run_dir / REQUESTS_JSONL).read_text(encoding="utf-8").splitlines()]
    measured = [c for c in run.cells if (t := c.check("throughput")) is not None and "ttft_p50_s" in t.metrics]
    assert len(rows) == 60 * len(measured) and len(measured) >= 5
    assert {r["cell"] for r in rows} == {c.cell.id for c in measured}
    assert sum(r["warmup"] for r in rows) == 4 * len(measured)  # warm-ups are rows, flagged
    first = rows[0]
    assert set(CSV_COLUMNS) <= set(first) and len(first["itl_s"]) == 31 and first["run"] == 1
    assert first["itl_mean_s"] == pytest.approx(sum(first["itl_s"]) / 31)
    assert first["tpot_s"] is None or first["tpot_s"] > 0


def test_the_csv_has_the_same_requests_one_column_per_field(exported: tuple[RunResult, Path, str]) -> None:
    run, run_dir, invalid = exported
    with (run_dir / REQUESTS_CSV).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        rows = list(reader)
    lines = [json.loads(line) for line in (run_dir / REQUESTS_JSONL).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(lines)
    assert [float(r["ttft_s"]) for r in rows] == pytest.approx([j["ttft_s"] for j in lines])
    assert {r["comparable"] for r in rows if r["cell"] == invalid} == {"False"}
    for result in run.cells:  # the summaries' rule: an invalid measurement, or a corrupting check failed
        expected = "False" if not_to_scale(check_verdicts(result), "throughput") else "True"
        assert {r["comparable"] for r in rows if r["cell"] == result.cell.id} <= {expected}
    assert "True" in {r["comparable"] for r in rows}


def test_a_run_without_recorded_requests_writes_no_request_files(tmp_path: Path) -> None:
    run = sample_run()
    written = write_all(run, tmp_path, html=False)
    assert not {REQUESTS_JSONL, REQUESTS_CSV} & {p.name for p in written}
    assert not (tmp_path / REQUESTS_JSONL).exists()
