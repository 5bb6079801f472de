"""canary.bisect.run, .model and `canary bisect`'s input errors, on a run directory written by hand
(results.json + config.json of the selftest config with the bisect series). Starts no engine: the
bisection test replaces cell runs with a scripted judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary import cli
from canary.bisect.model import BISECT_JSON, BISECT_MD, BISECT_PROM, BisectFile, patch_subject, point_label
from canary.bisect.run import (
    find_run_dir,
    images_range,
    load_input,
    policy_of,
    prefix_series,
    run_bisection,
    series_range,
    step_config,
)
from canary.bisect.search import Judgement, Policy
from canary.config.load import load_config
from canary.errors import UsageError
from canary.export.prometheus import schema
from canary.images.patchseries import read_series
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.matrix import plan
from canary.run.orchestrate import RUN_CONFIG_NAME

SERIES = REPO_ROOT / "tests" / "faults" / "bisect-series" / "series"


def _write_run(tmp_path: Path, pd_verdict: str = "fail") -> Path:
    config = load_config(CONFIGS_DIR / "selftest.yaml", [f"images.baseline.patches={SERIES}"])
    agg, pd = plan(config).planned()
    checks = [CheckResult(name="startup", verdict="pass"), CheckResult(name="parity", verdict=pd_verdict)]
    run = RunResult(
        run_id="r1",
        config_name=config.name,
        platform="cpu",
        target="local",
        cells=[
            CellResult(cell=agg, verdict="pass", checks=[CheckResult(name="startup", verdict="pass")]),
            CellResult(cell=pd, verdict=pd_verdict, checks=checks),
        ],
    )
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(run.model_dump_json())
    (run_dir / RUN_CONFIG_NAME).write_text(config.model_dump_json())
    return run_dir


def test_the_bisect_series_is_8_patches_with_the_kv_corruption_at_5() -> None:
    series = read_series(SERIES)
    assert len(series.names) == 8
    assert series.names[4] == "05-nixl-kv-beyond-first-block.patch"
    fault07 = (REPO_ROOT / "tests/faults/07-pd-kv-beyond-first-block/07-pd-kv-beyond-first-block.patch").read_text()
    assert series.patches[4].read_text().split("---\n", 1)[1] == fault07.split("---\n", 1)[1]
    for harmless in series.patches[:4] + series.patches[5:]:
        added = [
            line[1:]
            for line in harmless.read_text().splitlines()
            if line.startswith("+") and not line.startswith("+++")
        ]
        assert added and all(line.startswith("#") for line in added), harmless.name  # comments only


def test_load_input_reads_the_failing_cell_its_failed_checks_and_the_run_config(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    data = load_input(run_dir, "pd", print)
    assert data.cell.cell.id.startswith("pd.") and data.failed_checks == ["parity"]
    assert data.config.images["baseline"].patches == str(SERIES)
    (tmp_path / "latest").symlink_to(run_dir.name)
    assert find_run_dir(tmp_path) == run_dir.resolve()  # a results root: its latest run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bisect", "{tmp}/nope", "--cell", "pd"], "no such results directory"),
        (["bisect", "{tmp}", "--cell", "pd"], "holds no results.json"),
        (["bisect", "{run}", "--cell", "zz"], "is not in run r1; its cells: agg."),
        (["bisect", "{run}", "--cell", "agg"], "did not fail in run r1 (verdict pass): nothing to bisect"),
        (["bisect", "{run}", "--cell", "pd", "--images", "only-one"], "at least two image references"),
        (["bisect", "{run}", "--cell", "pd", "--images", "a", "b"], "on the local target is not supported yet"),
        (["bisect", "{run}", "--cell", "pd", "--series", "{tmp}/none"], "not found"),
        (["bisect", "{run}", "--cell", "pd", "--confirm", "0"], "--confirm 0: must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    run_dir = _write_run(tmp_path)
    argv = [a.format(tmp=tmp_path, run=run_dir) for a in args]
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_image_without_a_series_is_a_usage_error(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    data = load_input(run_dir, "pd", print)
    plain = data.config.model_copy(deep=True)
    plain.images["baseline"].patches = None
    with pytest.raises(UsageError, match=r"has no patch series \(images.baseline.patches\)"):
        series_range(type(data)(data.run_dir, data.run, plain, "x", data.cell, data.failed_checks), None)


def test_step_config_swaps_the_series_and_runs_only_the_failed_checks(tmp_path: Path) -> None:
    data = load_input(_write_run(tmp_path), "pd", print)
    prefix = prefix_series(read_series(SERIES), 3, tmp_path / "series")
    assert prefix is not None and read_series(prefix).names == read_series(SERIES).names[:3]
    config = step_config(data.config, "baseline", ["parity"], "x", patches=prefix)
    assert config.images["baseline"].patches == str(prefix)
    assert config.checks.parity.enabled and config.checks.startup.enabled
    assert not (config.checks.accuracy.enabled or config.checks.throughput.enabled or config.checks.kv_transfer.enabled)
    assert config.checks.parity.prompt_lengths == data.config.checks.parity.prompt_lengths  # same gates and inputs
    empty = step_config(
        data.config, "baseline", ["parity"], "x", patches=prefix_series(read_series(SERIES), 0, tmp_path)
    )
    assert empty.images["baseline"].patches is None
    assert empty.target.same_engine_ok, "a step on no patch runs the baseline's engine by design: not refused"
    assert [c.id for c in plan(config).cells] == [c.id for c in plan(data.config).cells]  # the same cell ids


def test_policy_takes_the_config_and_the_flags(tmp_path: Path) -> None:
    data = load_input(_write_run(tmp_path), "pd", print)
    policy = policy_of(data.config, {"confirm": 3, "max_runs": None, "max_minutes": 30.0, "retries": None})
    assert (policy.confirm, policy.max_runs, policy.max_seconds, policy.retries, policy.prior_bad) == (
        3,
        12,
        1800,
        2,
        1,
    )


def test_point_labels_and_subjects() -> None:
    names = read_series(SERIES).names
    assert point_label("series", names, 0).startswith("no patch")
    assert point_label("series", names, 1) == "patch 01"
    assert point_label("series", names, 5) == "patches 01..05"
    assert point_label("images", ["good:1", "x:2", "bad:3"], 2) == "bad:3"
    assert patch_subject(read_series(SERIES).patches[4]).startswith("nixl: read every KV block after the first")


def test_scripted_bisection_writes_the_culprit_steps_and_metrics(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    data = load_input(run_dir, "pd", print)
    asked: list[int] = []

    def scripted(point: int) -> Judgement:
        asked.append(point)
        return Judgement("bad" if point >= 5 else "good", "scripted", {"point": point})

    report = run_bisection(data, series_range(data, None), Policy(prior_bad=1), judge=scripted, progress=print)
    assert asked == [8, 0, 4, 6, 5]
    assert report.outcome == "found" and report.culprit is not None
    assert report.culprit.name == "05-nixl-kv-beyond-first-block.patch" and report.culprit.position == 5
    saved = BisectFile.model_validate_json((run_dir / BISECT_JSON).read_text())
    (only,) = saved.bisections
    assert [s.point for s in only.steps] == [8, 0, 4, 6, 5] and only.cell_runs == 5
    markdown = (run_dir / BISECT_MD).read_text()
    assert "FOUND" in markdown and "05-nixl-kv-beyond-first-block.patch" in markdown and "| 5 | search |" in markdown
    prom = (run_dir / BISECT_PROM).read_text()
    assert f'{schema.BISECT_CULPRIT.name}{{cell="{report.cell}"' in prom and "5.0" in prom
    assert all(spec.name in prom for spec in schema.BISECT_METRICS)


def test_ctrl_c_keeps_the_steps_done_so_far(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path)
    data = load_input(run_dir, "pd", print)

    def interrupted(point: int) -> Judgement:
        if point == 4:
            raise KeyboardInterrupt
        return Judgement("bad" if point >= 5 else "good")

    report = run_bisection(data, series_range(data, None), Policy(prior_bad=1), judge=interrupted, progress=print)
    assert report.outcome == "interrupted"
    saved = json.loads((run_dir / BISECT_JSON).read_text())
    assert [s["point"] for s in saved["bisections"][0]["steps"]] == [8, 0]
    assert saved["bisections"][0]["outcome"] == "interrupted"


def test_bisect_metric_names_are_declared_in_the_schema_and_not_in_a_run() -> None:
    names = [spec.name for spec in schema.BISECT_METRICS]
    assert all(name.startswith("canary_bisect_") for name in names)
    assert not set(names) & {spec.name for spec in schema.ALL_METRICS}
    from canary.bisect.search import OUTCOME_CODES

    assert all(f"{code} {outcome}" in schema.BISECT_OUTCOME.help for outcome, code in OUTCOME_CODES.items())


def test_scripted_image_range_names_the_first_bad_image(tmp_path: Path) -> None:
    data = load_input(_write_run(tmp_path), "pd", print)
    refs = ["localhost/vllm-cpu:nightly-1", "localhost/vllm-cpu:nightly-2", "localhost/vllm-cpu:nightly-3"]
    refs.append("localhost/vllm-cpu:nightly-4")
    spec = images_range(refs)
    report = run_bisection(
        data, spec, Policy(prior_bad=1), judge=lambda p: Judgement("bad" if p >= 2 else "good"), progress=print
    )
    assert report.outcome == "found" and report.culprit is not None
    assert (report.culprit.name, report.culprit.position) == ("localhost/vllm-cpu:nightly-3", 2)
    assert [s.label for s in report.steps][:2] == [refs[3], refs[0]]


def test_an_image_step_runs_that_image_for_the_cell_image_key(tmp_path: Path) -> None:
    data = load_input(_write_run(tmp_path), "pd", print)
    container = data.config.model_copy(deep=True)
    container.target.kind = "container"
    config = step_config(container, "baseline", ["parity"], "x", image_ref="localhost/vllm-cpu:nightly-2")
    assert config.target.container.images["baseline"] == "localhost/vllm-cpu:nightly-2"
    assert config.images["baseline"].patches is None and not config.checks.accuracy.enabled


def test_the_headline_counts_the_minutes_of_a_running_bisection_and_an_image_has_no_subject() -> None:
    from canary.bisect.model import headline, render_markdown
    from tests.support.bisection import sample_bisections

    data = sample_bisections("r1")
    found = data.bisections[0]
    assert headline(found).endswith("(5 cell runs, 4.2 min)")  # finished: the whole bisection's time
    running = found.model_copy(update={"outcome": "running", "finished_at": None, "duration_s": 0.0})
    spent = sum(s.duration_s for s in running.steps) / 60
    assert headline(running).endswith(f"({running.cell_runs} cell runs, {spent:.1f} min)") and spent > 0
    assert running.culprit is not None
    image = found.model_copy(
        update={"range_kind": "images", "culprit": running.culprit.model_copy(update={"subject": "", "path": ""})}
    )
    line = next(x for x in render_markdown(BisectFile(run_id="r1", bisections=[image])).splitlines() if "culprit" in x)
    assert not line.rstrip().endswith(":"), line
