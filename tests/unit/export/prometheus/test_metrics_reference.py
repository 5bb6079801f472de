"""The metrics reference page (canary/export/prometheus/reference.py): one row per schema metric, with
the type the exposition really declares, its labels and where its value comes from."""

from __future__ import annotations

from pathlib import Path

from canary.export.prometheus import reference as r
from canary.export.prometheus import schema as s
from tests.support.sample import sample_run


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in r.table().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_one_row_per_metric_in_schema_order() -> None:
    assert list(_rows()) == [spec.name for spec in s.ALL_METRICS]


def test_the_type_is_what_the_exposition_declares() -> None:
    exposition = s.exposition(sample_run()).decode()
    declared = {line.split()[2]: line.split()[3] for line in exposition.splitlines() if line.startswith("# TYPE ")}
    assert declared, "the sample run exposes no metric"
    rows = _rows()
    for name, kind in declared.items():
        assert rows[name][1] == kind == r.METRIC_TYPE


def test_labels_and_sources() -> None:
    rows = _rows()
    assert rows["canary_ttft_seconds"][2:4] == ["cell labels + `percentile`", "`throughput`: `ttft_<percentile>_s`"]
    assert rows["canary_history_change_worse_ratio"][3] == "`throughput`: `<metric>_change_worse_ratio`"
    assert rows["canary_run_info"][2] == "`config`, `platform`, `target`, `canary_version`"
    assert rows["canary_cell_last_checked_timestamp_seconds"][3] == "the cell's start, or the rotation state"
    assert rows["canary_run_duration_seconds"][2:4] == ["-", "run / verdicts"]


def test_write_produces_the_page(tmp_path: Path) -> None:
    target = tmp_path / "metrics.md"
    assert r.main(["--write", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == r.page()
    assert f"at most {s.SERIES_PER_CELL} series" in r.page()
