"""The bisection `canary run` starts itself (canary.bisect.auto): which red cells it bisects, that it
does nothing when disabled, and that it bisects them as `canary bisect` does, on the sample run (a
baseline and a candidate image, tests/support/bisection.py). No engine: scripted judges stand in
for the steps' cell runs; the search, the files and the reports are the real ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from canary import cli
from canary.bisect import run as bisect_run
from canary.bisect.auto import baseline_counterpart, bisect_after_run, choose
from canary.bisect.model import BISECT_JSON, BisectFile
from canary.bisect.run import load_input, run_bisection, series_range
from canary.bisect.search import Judgement, Policy
from canary.config import CanaryConfig
from canary.export.history.rows import BisectionRow, flatten
from canary.export.history.store import open_store
from canary.export.report.html import bisect_anchor
from canary.images.patchseries import read_series
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.plan.matrix import Plan
from canary.run import orchestrate
from tests.support.bisection import (
    CULPRIT,
    NO_KV_CANDIDATE,
    SERIES,
    SLOW_CANDIDATE,
    always_failing,
    config_with_series,
    culprit_at,
    write_run_dir,
)
from tests.support.sample import SAMPLE_CONFIG, sample_run


def _enabled(config: CanaryConfig, **settings: object) -> CanaryConfig:
    return config.model_copy(update={"bisect": config.bisect.model_copy(update={"enabled": True, **settings})})


def _with_verdict(run: RunResult, cell_id: str, verdict: str) -> RunResult:
    changed = run.model_copy(deep=True)
    result = next(c for c in changed.cells if c.cell.id == cell_id)
    result.verdict = verdict  # type: ignore[assignment]
    return changed


def test_a_candidate_cell_that_failed_where_its_baseline_passed_is_bisected() -> None:
    run = sample_run()
    choices = choose(run, _enabled(config_with_series()))
    chosen = [c.cell_id for c in choices if c.bisect]
    assert chosen == [SLOW_CANDIDATE, NO_KV_CANDIDATE]  # plan order
    # the baseline's own red cell (pd p32-d64) and the candidate's error cell are not candidates' failures
    assert [c.cell_id for c in choices] == chosen
    slow = next(c for c in choices if c.cell_id == SLOW_CANDIDATE)
    assert slow.why == "failed on candidate, passed as agg.cpu_attn.b32.auto.v1.baseline"


def test_the_counterpart_is_the_same_cell_on_the_baseline_image() -> None:
    run = sample_run()
    slow = next(c for c in run.cells if c.cell.id == SLOW_CANDIDATE)
    other = baseline_counterpart(run, slow, "baseline")
    assert other is not None and other.cell.id == "agg.cpu_attn.b32.auto.v1.baseline"
    assert baseline_counterpart(run, slow, "nightly") is None


def test_not_when_the_baseline_failed_too() -> None:
    # pd p32-d64 fails on the baseline; make the candidate's fail as well: the series is not at fault
    run = _with_verdict(sample_run(), "pd.cpu_attn.p32-d64.auto.v1.candidate", "fail")
    (shared,) = [c for c in choose(run, _enabled(config_with_series())) if c.cell_id.startswith("pd.cpu_attn.p32-d64")]
    assert not shared.bisect
    assert shared.why == (
        "its baseline counterpart pd.cpu_attn.p32-d64.auto.v1.baseline did not pass either (fail): "
        "the failure is not the candidate's"
    )


def test_not_when_the_image_has_no_series() -> None:
    choices = choose(sample_run(), _enabled(config_with_series(None)))
    assert [c.cell_id for c in choices] == [SLOW_CANDIDATE, NO_KV_CANDIDATE]
    assert not any(c.bisect for c in choices)
    assert all(c.why.startswith("image 'candidate' has no patch series (images.candidate.patches)") for c in choices)


def test_not_when_the_series_file_is_gone_since_the_run(tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(SERIES.parent, folder)  # a config is refused when its series is missing: it went later
    series = folder / "series"
    config = _enabled(config_with_series(series))
    series.unlink()
    choices = choose(sample_run(), config)
    assert not any(c.bisect for c in choices)
    assert choices[0].why == f"its patch series {str(series)!r} is not there"


def test_not_on_a_target_that_cannot_run_series_steps() -> None:
    config = _enabled(config_with_series())
    kube = config.model_copy(update={"target": config.target.model_copy(update={"kind": "kubernetes"})})
    choices = choose(sample_run(), kube)
    assert not any(c.bisect for c in choices)
    assert choices[0].why == "bisecting a series on the kubernetes target is not supported yet"


def test_max_cells_bounds_the_cells_bisected() -> None:
    choices = choose(sample_run(), _enabled(config_with_series(), max_cells=1))
    assert [(c.cell_id, c.bisect) for c in choices] == [(SLOW_CANDIDATE, True), (NO_KV_CANDIDATE, False)]
    assert choices[1].why.startswith("bisect.max_cells (1) cells are bisected already")


def test_disabled_does_nothing(tmp_path: Path) -> None:
    config = config_with_series()
    assert not config.bisect.enabled  # the default
    run_dir = write_run_dir(tmp_path, config=config)
    lines: list[str] = []
    html_before = (run_dir / "summary.html").read_text()
    reports = bisect_after_run(
        sample_run(), config, run_dir, progress=lines.append, judges={SLOW_CANDIDATE: culprit_at(5)}
    )
    assert reports == [] and lines == []
    assert not (run_dir / BISECT_JSON).exists() and not (run_dir / "bisect").exists()
    assert (run_dir / "summary.html").read_text() == html_before


def test_enabled_bisects_each_chosen_cell_into_one_bisect_json(tmp_path: Path) -> None:
    config = _enabled(config_with_series())
    run_dir = write_run_dir(tmp_path, config=config)
    lines: list[str] = []
    judges = {SLOW_CANDIDATE: culprit_at(5), NO_KV_CANDIDATE: always_failing}
    reports = bisect_after_run(sample_run(), config, run_dir, progress=lines.append, judges=judges)
    assert [(r.cell, r.outcome) for r in reports] == [(SLOW_CANDIDATE, "found"), (NO_KV_CANDIDATE, "inconclusive")]
    assert reports[0].culprit is not None and reports[0].culprit.name == CULPRIT
    assert "the failure is not caused by the range" in reports[1].reason
    saved = json.loads((run_dir / BISECT_JSON).read_text())
    assert [b["cell"] for b in saved["bisections"]] == [SLOW_CANDIDATE, NO_KV_CANDIDATE]
    assert (
        lines[0] == f"bisect 1/2: {SLOW_CANDIDATE} (failed on candidate, passed as agg.cpu_attn.b32.auto.v1.baseline)"
    )
    assert any(line.startswith(f"bisect 2/2: {NO_KV_CANDIDATE}") for line in lines)


def test_ctrl_c_stops_the_bisection_and_bisects_no_further_cell(tmp_path: Path) -> None:
    config = _enabled(config_with_series())
    run_dir = write_run_dir(tmp_path, config=config)
    asked: list[str] = []

    def interrupted(point: int) -> Judgement:
        asked.append(f"slow@{point}")
        if point == 4:
            raise KeyboardInterrupt
        return culprit_at(5)(point)

    def never(point: int) -> Judgement:
        asked.append(f"no-kv@{point}")
        return always_failing(point)

    lines: list[str] = []
    reports = bisect_after_run(
        sample_run(),
        config,
        run_dir,
        progress=lines.append,
        judges={SLOW_CANDIDATE: interrupted, NO_KV_CANDIDATE: never},
    )
    assert [(r.cell, r.outcome) for r in reports] == [(SLOW_CANDIDATE, "interrupted")]
    assert asked == ["slow@8", "slow@0", "slow@4"]  # the second cell never ran
    (saved,) = json.loads((run_dir / BISECT_JSON).read_text())["bisections"]
    assert [s["point"] for s in saved["steps"]] == [8, 0] and saved["outcome"] == "interrupted"
    assert lines[-1].startswith("bisect: interrupted (Ctrl-C): the steps so far are in bisect.json")


def test_an_interrupted_run_is_not_bisected(tmp_path: Path) -> None:
    config = _enabled(config_with_series())
    run = sample_run().model_copy(update={"interrupted": True})
    lines: list[str] = []
    assert bisect_after_run(run, config, tmp_path, progress=lines.append) == []
    assert lines == ["bisect: the run was interrupted: no cell is bisected"]


def test_a_cell_that_cannot_be_bisected_is_a_line_and_the_next_goes_on(tmp_path: Path) -> None:
    # the run directory's config has no series for the candidate (the run config chose both cells)
    run_dir = write_run_dir(tmp_path, config=config_with_series(None))
    lines: list[str] = []
    judges = {SLOW_CANDIDATE: culprit_at(5), NO_KV_CANDIDATE: culprit_at(5)}
    reports = bisect_after_run(
        sample_run(), _enabled(config_with_series()), run_dir, progress=lines.append, judges=judges
    )
    assert reports == []
    failed = [line for line in lines if " is not bisected: " in line]
    assert len(failed) == 2 and all("has no patch series" in line for line in failed)


def test_a_bisection_renders_the_report_again_and_records_the_history(tmp_path: Path) -> None:
    """What `canary bisect` and the automatic bisection share (canary.bisect.run.publish): the run's
    summary.html and summary.md show bisect.json when the bisection ends, and the history gets its row."""
    run = sample_run()
    run_dir = write_run_dir(tmp_path, run=run)
    with open_store(sqlite=tmp_path / "history.sqlite") as store:
        store.write(flatten(run))  # as `canary run` left it
    assert "id='bisect'" not in (run_dir / "summary.html").read_text()
    data = load_input(run_dir, SLOW_CANDIDATE, print)
    lines: list[str] = []
    report = run_bisection(
        data, series_range(data, None), Policy(prior_bad=1), judge=culprit_at(5), progress=lines.append
    )
    html = (run_dir / "summary.html").read_text()
    assert f"id='{bisect_anchor(SLOW_CANDIDATE)}'" in html and f"href='#{bisect_anchor(SLOW_CANDIDATE)}'" in html
    assert f"patch {CULPRIT}: nixl: read every KV block after the first" in html
    assert f"- **bisect**: FOUND: patch {CULPRIT}" in (run_dir / "summary.md").read_text()
    with open_store(sqlite=tmp_path / "history.sqlite", create=False) as store:
        assert store.bisections_of(run.run_id) == [
            BisectionRow(run.run_id, SLOW_CANDIDATE, "found", CULPRIT, 5, report.duration_s)
        ]
    assert f"history: recorded 1 bisected cell(s) of {run.run_id} in {tmp_path / 'history.sqlite'}" in lines


@pytest.mark.parametrize("interrupt", [False, True])
def test_canary_run_with_bisect_enabled_keeps_the_runs_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], interrupt: bool
) -> None:
    """`canary run` end to end in process with two stand-ins: the run's cells (the sample run) and each
    step's cell run, which fails from the 5th patch of the prefix it is given on (read from the step's
    config: the step runs the prefix the bisection chose). Found or interrupted, the exit code is the
    run's: FAILED."""
    sample = sample_run()

    def stand_in_execute(config: CanaryConfig, plan: Plan, run_dir: Path, *, config_path: str = "") -> RunResult:
        return sample.model_copy(update={"run_id": run_dir.name, "config_path": config_path})

    def stand_in_step(
        config: CanaryConfig, cell_id: str, step_dir: Path, earlier: object, progress: object, source: str
    ) -> CellResult:
        series = config.images["candidate"].patches
        applied = 0 if series is None else len(read_series(Path(series)).names)
        if interrupt and applied == 4:
            raise KeyboardInterrupt
        verdict = "fail" if applied >= 5 else "pass"
        cell = next(c.cell for c in sample.cells if c.cell.id == cell_id)
        return CellResult(cell=cell, verdict=verdict, checks=[CheckResult(name="throughput", verdict=verdict)])

    monkeypatch.setattr(orchestrate, "execute", stand_in_execute)
    monkeypatch.setattr(bisect_run, "run_step", stand_in_step)
    config_file = tmp_path / "sample.yaml"
    config_file.write_text(SAMPLE_CONFIG)
    results = tmp_path / "results"
    sets = [f"images.candidate.patches={SERIES}", "bisect.enabled=true", "bisect.max_cells=1"]
    argv = ["run", str(config_file), "--results-dir", str(results)]
    for override in sets:
        argv += ["--set", override]
    assert cli.main(argv) == cli.EXIT_FAILED_CELLS
    out, err = capsys.readouterr()
    run_dir = (results / "latest").resolve()
    (saved,) = BisectFile.model_validate_json((run_dir / BISECT_JSON).read_text()).bisections
    assert saved.cell == SLOW_CANDIDATE
    assert f"{NO_KV_CANDIDATE} is not bisected: bisect.max_cells (1)" in err
    if interrupt:
        assert saved.outcome == "interrupted" and [s.point for s in saved.steps] == [8, 0]
        assert "bisect: INTERRUPTED" in out
    else:
        assert saved.outcome == "found" and saved.culprit is not None and saved.culprit.name == CULPRIT
        assert f"bisect: FOUND: {SLOW_CANDIDATE}: patch {CULPRIT}" in out
        assert [s.point for s in saved.steps] == [8, 0, 4, 6, 5]
    assert f"href='#{bisect_anchor(SLOW_CANDIDATE)}'" in (run_dir / "summary.html").read_text()


def test_the_lines_say_why_nothing_is_bisected(tmp_path: Path) -> None:
    lines: list[str] = []
    no_series = _enabled(config_with_series(None))
    assert bisect_after_run(sample_run(), no_series, tmp_path, progress=lines.append) == []
    assert lines[-1] == "bisect: none of the 2 failed candidate cells is bisected (why: above)"
    assert sum(" is not bisected: image 'candidate' has no patch series" in line for line in lines) == 2
    green = sample_run().model_copy(deep=True)
    for result in green.cells:
        if result.cell.image == "candidate" and result.verdict == "fail":
            result.verdict = "pass"
    lines.clear()
    assert bisect_after_run(green, _enabled(config_with_series()), tmp_path, progress=lines.append) == []
    assert lines == ["bisect: no cell of a candidate image failed: nothing to bisect"]
