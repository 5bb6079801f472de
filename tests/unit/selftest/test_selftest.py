"""canary.selftest's derivation of fault runs and its judging (no engines: result objects built by hand)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.judge.results import CellResult, CheckResult, Gate, RunResult
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.matrix import plan
from canary.plan.validate import validate_plan
from canary.selftest.judge import ProgressClock, judge_clean, judge_fault
from canary.selftest.model import DEFAULT_CONFIG, FAULTS_FILE, FaultSpec, SelftestResult, fault_config, load_faults
from canary.selftest.table import render_table

T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def _fault(fault_id: str) -> FaultSpec:
    return next(f for f in load_faults().faults if f.id == fault_id)


def _run(config_name: str, cells: list[CellResult]) -> RunResult:
    return RunResult(run_id="r", config_name=config_name, platform="cpu", target="local", started_at=T0, cells=cells)


def _cell_result(config_path: Path | None, fault_id: str | None, checks: list[CheckResult]) -> CellResult:
    base = load_config(config_path or DEFAULT_CONFIG)
    config = fault_config(base, _fault(fault_id)) if fault_id else base
    cell = plan(config).planned()[-1]
    verdict = "fail" if any(c.verdict == "fail" for c in checks) else "pass"
    return CellResult(cell=cell, verdict=verdict, checks=checks, started_at=T0 + dt.timedelta(seconds=5), duration_s=40)


def test_catalogue_covers_the_bug_classes() -> None:
    faults = load_faults().faults
    assert [f.expect_check for f in faults][:6] == [
        "startup",
        "accuracy",
        "kv_transfer",
        "throughput",
        "startup",
        "startup",
    ]
    for fault in faults:
        assert fault.series_path(FAULTS_FILE).is_file()
        assert (FAULTS_FILE.parent / fault.id / f"{fault.id}.patch").is_file()


def test_fault_config_patches_only_the_faulty_image() -> None:
    base = load_config(DEFAULT_CONFIG)
    config = fault_config(base, _fault("02-pd-kv-block-order"))
    assert list(config.images) == ["fault-02-pd-kv-block-order"]
    image = config.images["fault-02-pd-kv-block-order"]
    assert image.patches is not None and Path(image.patches).is_file()
    assert Path(image.patches) == REPO_ROOT / "tests" / "faults" / "02-pd-kv-block-order" / "series"
    cells = plan(config).planned()
    assert [c.topology for c in cells] == ["pd-nixl"]
    assert config.checks.accuracy.enabled and config.checks.kv_transfer.enabled


def test_kernel_split_fault_runs_at_logical_128_over_kernel_32() -> None:
    """Fault 06 carries its own kernel-split build: the planner must see kernel 32 under 128."""
    config = fault_config(load_config(DEFAULT_CONFIG), _fault("06-nixl-logical-grain"))
    (cell,) = plan(config).planned()
    assert (cell.topology, cell.prefill_block_size, cell.decode_block_size) == ("pd-nixl", 128, 128)
    assert (cell.kernel_block_prefill, cell.kernel_block_decode) == (32, 32)
    assert "kernel-split" in cell.risks
    assert _fault("06-nixl-logical-grain").expect_gate == "layout-nixl-grain"


def test_regression_fault_deploys_the_clean_baseline_first() -> None:
    base = load_config(DEFAULT_CONFIG)
    config = fault_config(base, _fault("04-slow-decode-step"))
    assert config.baseline == "baseline" and config.images["baseline"].patches is None
    cells = plan(config).planned()
    assert [c.image for c in cells] == ["baseline", "fault-04-slow-decode-step"]
    assert {c.topology for c in cells} == {"aggregated"}
    assert config.checks.throughput.enabled
    assert not (config.checks.accuracy.enabled or config.checks.parity.enabled or config.checks.kv_transfer.enabled)


def test_a_fault_may_set_config_keys_for_its_own_run_only() -> None:
    """Fault 11 needs parity under load (off in the selftest config) and the control beside its pair."""
    base = load_config(DEFAULT_CONFIG)
    fault = _fault("11-pd-kv-race-under-load")
    config = fault_config(base, fault)
    assert config.checks.throughput.load_parity.enabled and config.checks.throughput.num_requests == 40
    assert not base.checks.throughput.load_parity.enabled  # every other run keeps the config's own
    assert not fault_config(base, _fault("10-nixl-read-delay")).checks.throughput.load_parity.enabled
    assert {c.topology for c in plan(config).planned()} == {"aggregated", "pd-nixl"}
    assert (fault.expect_check, fault.expect_gate) == ("throughput", "load-parity")
    assert config.checks.parity.enabled and not config.checks.accuracy.enabled


@pytest.mark.parametrize("fault_id", [f.id for f in load_faults().faults])
def test_every_fault_run_passes_the_checks_at_the_door(fault_id: str) -> None:
    """Each fault's config is validated like a config file (catalog, patch series, lengths) and its
    matrix like `canary plan`'s (something runs): run_selftest refuses it before any engine otherwise."""
    fault = _fault(fault_id)
    config = fault_config(load_config(fault.config_path(DEFAULT_CONFIG)), fault)
    assert any(c.status == "planned" for c in validate_plan(config, fault_id))


def test_family_faults_run_their_family_model_and_its_control_without_a_hint() -> None:
    """Issue 40: KV-group indexing faults on the sliding-window model (the transfer path, the runner's kernel
    block list) and a hybrid-state fault on an SSM hybrid, each on configs/selftest-families.yaml limited to
    its model: the faulty image's aggregated control and P/D pair, nothing in the cells (expectation, block
    size, kernel blocks, overrides) that names the fault."""
    base = load_config(CONFIGS_DIR / "selftest-families.yaml")
    families = {m.name: m.family for m in base.models}
    for fault_id, model, family, check in [
        ("13-kv-group-block-ids-shifted", "gemma3", "sliding-window", "parity"),
        ("14-ssm-state-not-read", "nemotron-h", "mamba-hybrid", "parity"),
        ("15-kernel-block-list-skips-a-group", "gemma3", "sliding-window", "startup"),
    ]:
        fault = _fault(fault_id)
        assert fault.config_path(DEFAULT_CONFIG) == (CONFIGS_DIR / "selftest-families.yaml").absolute()
        assert (fault.expect_check, fault.models, families[model]) == (check, [model], family)
        assert fault.known_bug is None and fault.block_size is None and not fault.kernel_block_sizes
        assert not fault.overrides
        config = fault_config(base, fault)
        assert [m.name for m in config.models] == [model] and not config.matrix.expectations
        cells = plan(config).planned()
        assert sorted(c.topology for c in cells) == ["aggregated", "pd-nixl"]
        assert {c.image for c in cells} == {f"fault-{fault_id}"}


def test_a_fault_naming_an_unknown_model_is_a_config_error() -> None:
    fault = _fault("13-kv-group-block-ids-shifted").model_copy(update={"models": ["llama"]})
    with pytest.raises(ConfigError, match=r"models.*no such model in selftest-families: \['llama'\]"):
        fault_config(load_config(CONFIGS_DIR / "selftest-families.yaml"), fault)


def test_the_clean_runs_cover_every_config_the_selected_faults_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family fault's config runs clean too (a false alarm on a family cell must show): `--fault 13
    --clean-runs 1` runs selftest-families clean and then the fault on the same config; the whole selftest
    runs selftest.yaml clean as well. (The runs are faked: no engine.)"""
    from canary.selftest import run as selftest_run

    ran: list[str] = []

    def fake_execute(config: CanaryConfig, run_dir: Path, clock: object, config_path: str) -> RunResult:
        ran.append(f"{run_dir.name} {Path(config_path).name}")
        return _run(str(config.name), [])

    monkeypatch.setattr(selftest_run, "_execute", fake_execute)
    result = selftest_run.run_selftest(DEFAULT_CONFIG, tmp_path / "one", clean_runs=1, only=["13"])
    assert ran == [
        "clean-selftest-families-1 selftest-families.yaml",
        "fault-13-kv-group-block-ids-shifted selftest-families.yaml",
    ]
    assert [c.config for c in result.clean] == ["selftest-families"] and not result.ok  # the fake runs prove nothing
    ran.clear()
    selftest_run.run_selftest(DEFAULT_CONFIG, tmp_path / "all", clean_runs=2, only=None)
    cleans = [r for r in ran if r.startswith("clean-")]
    assert cleans == [
        "clean-1 selftest.yaml",
        "clean-2 selftest.yaml",
        "clean-selftest-families-1 selftest-families.yaml",
        "clean-selftest-families-2 selftest-families.yaml",
    ]


def test_a_fault_config_is_validated_as_a_config(tmp_path: Path) -> None:
    broken = tmp_path / "faults.yaml"
    broken.write_text(FAULTS_FILE.read_text())  # the series are looked up next to this copy: not there
    with pytest.raises(ConfigError, match=r"faults.yaml \(02-pd-kv-block-order\): images.fault-02-pd-kv-block-order"):
        fault_config(load_config(DEFAULT_CONFIG), _fault("02-pd-kv-block-order"), broken)


def test_selftest_config_has_one_clean_image() -> None:
    other = load_config(
        CONFIGS_DIR / "selftest.yaml", ["images.baseline.patches=tests/faults/01-nixl-registration-layout/series"]
    )
    with pytest.raises(ConfigError, match="must not carry patches"):
        fault_config(other, _fault("01-nixl-registration-layout"))


def test_detected_startup_fault_needs_the_right_class() -> None:
    fault = _fault("01-nixl-registration-layout")
    image = "fault-01-nixl-registration-layout"
    right = CheckResult(name="startup", verdict="fail", evidence={"failure_class": "nixl-registration-mismatch"})
    run = _run("x", [_cell_result(None, fault.id, [right])])
    clock = ProgressClock(lambda _m: None)
    clock.lines.append((112.0, f"  {run.cells[0].cell.id}: startup -> fail (30.0s) ..."))
    detected, fired, errors, detail, when = judge_fault(run, fault, image, 100.0, clock)
    assert detected and fired == ["startup"] and not errors and when == 12.0
    assert "nixl-registration-mismatch" in detail

    wrong = CheckResult(name="startup", verdict="fail", evidence={"failure_class": "engine-init-failed"})
    detected, fired, _, detail, when = judge_fault(
        _run("x", [_cell_result(None, fault.id, [wrong])]), fault, image, 0.0
    )
    assert not detected and fired == ["startup"] and when is None
    assert "classified engine-init-failed, not nixl-registration-mismatch" in detail


def test_error_is_not_detection_and_time_falls_back_to_cell_end() -> None:
    fault = _fault("02-pd-kv-block-order")
    image = "fault-02-pd-kv-block-order"
    crashed = [CheckResult(name="startup", verdict="pass"), CheckResult(name="accuracy", verdict="error")]
    detected, fired, errors, detail, _ = judge_fault(
        _run("x", [_cell_result(None, fault.id, crashed)]), fault, image, 0.0
    )
    assert not detected and fired == [] and errors == ["accuracy"] and "accuracy did not fail" in detail

    collapsed = [
        CheckResult(name="startup", verdict="pass"),
        CheckResult(name="parity", verdict="fail"),
        CheckResult(name="accuracy", verdict="fail", gates=[Gate(name="wilson-vs-threshold", passed=False)]),
        CheckResult(name="kv_transfer", verdict="pass"),
    ]
    detected, fired, _, _, when = judge_fault(_run("x", [_cell_result(None, fault.id, collapsed)]), fault, image, 0.0)
    assert detected and fired == ["parity", "accuracy"]
    assert when == 45.0  # cell started 5 s into the run and took 40 s


def test_regression_fault_needs_a_regression_gate() -> None:
    fault = _fault("04-slow-decode-step")
    image = "fault-04-slow-decode-step"
    floor_only = CheckResult(name="throughput", verdict="fail", gates=[Gate(name="min-requests-per-s", passed=False)])
    detected, _, _, detail, _ = judge_fault(_run("x", [_cell_result(None, fault.id, [floor_only])]), fault, image, 0.0)
    assert not detected and "no failing gate regression-*" in detail
    regressed = CheckResult(
        name="throughput", verdict="fail", gates=[Gate(name="regression-output_tokens_per_s", passed=False)]
    )
    detected, _, _, _, _ = judge_fault(_run("x", [_cell_result(None, fault.id, [regressed])]), fault, image, 0.0)
    assert detected


def test_clean_run_alarms() -> None:
    healthy = _cell_result(None, None, [CheckResult(name="startup", verdict="pass")])
    assert judge_clean(_run("selftest", [healthy]))[0] == []
    invalid = healthy.model_copy(update={"verdict": "invalid", "reason": "client was the bottleneck"})
    alarms, cells = judge_clean(_run("selftest", [healthy, invalid]))
    assert alarms == [f"{invalid.cell.id}: invalid (client was the bottleneck)"] and cells[invalid.cell.id] == "invalid"
    never_started = _cell_result(None, None, [CheckResult(name="startup", verdict="skipped")])
    never_started = never_started.model_copy(update={"verdict": "skipped"})
    assert judge_clean(_run("selftest", [never_started]))[0] == ["no cell started: the clean run proves nothing"]


def test_table_lists_every_run() -> None:
    from rich.console import Console

    from canary.selftest.model import CleanOutcome, FaultOutcome

    result = SelftestResult(
        started_at=T0,
        duration_s=600,
        ok=False,
        config="c",
        clean=[CleanOutcome(index=1, ok=False, alarms=["agg: fail (x)"], cells={}, run_duration_s=80, run_dir="d")],
        faults=[
            FaultOutcome(
                id="03-pd-decode-recompute",
                title="t",
                expected_check="kv_transfer",
                detected=False,
                fired=[],
                errors=["parity"],
                run_duration_s=100,
                run_dir="d",
            )
        ],
    )
    table = render_table(result)
    assert table.row_count == 2
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "FALSE ALARM" in text and "agg: fail (x)" in text and "(errors: parity)" in text and "FAILED" in text


def test_unknown_fault_is_a_config_error(tmp_path: Path) -> None:
    from canary.selftest.run import run_selftest

    with pytest.raises(ConfigError, match="no such fault"):
        run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["99"])


def test_missing_series_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "faults.yaml").write_text(
        "faults:\n  - {id: 01-x, title: t, expect_check: startup, topologies: [pd-nixl]}\n"
    )
    with pytest.raises(ConfigError, match=r"faults\.0\.series"):
        load_faults(tmp_path / "faults.yaml")


def test_a_shift_fault_is_shown_by_its_metric_against_the_clean_image() -> None:
    """10-nixl-read-delay: no gate judges it yet; the P/D time decomposition's transfer term must grow
    against the same cell on the clean image of the same run, and the other terms are reported beside."""
    fault = _fault("10-nixl-read-delay")
    assert fault.expect_shift is not None and fault.baseline_image
    config = fault_config(load_config(DEFAULT_CONFIG), fault)
    clean_cell, faulty_cell = plan(config).planned()[0], plan(config).planned()[-1]
    assert clean_cell.image == "baseline" and faulty_cell.image == f"fault-{fault.id}"

    def result(cell_transfer: float, cell: object) -> CellResult:
        metrics = {fault.expect_shift.metric: cell_transfer, "pd_time_prefill_compute_p50_s": 0.05}  # type: ignore[union-attr]
        check = CheckResult(name="throughput", verdict="pass", metrics=metrics)
        return CellResult(cell=cell, verdict="pass", checks=[check], started_at=T0, duration_s=40)  # type: ignore[arg-type]

    def judged(faulty_transfer: float) -> tuple[bool, str]:
        run = _run("x", [result(0.004, clean_cell), result(faulty_transfer, faulty_cell)])
        run = run.model_copy(update={"baseline_image": "baseline"})
        detected, _, _, detail, when = judge_fault(run, fault, faulty_cell.image, 0.0)
        assert (when is not None) == detected
        return detected, detail

    shown, detail = judged(0.036)
    assert (
        shown and "shown: pd_time_kv_transfer_p50_s +0.032" in detail and "pd_time_prefill_compute_p50_s +0" in detail
    )
    missed, detail = judged(0.010)
    assert not missed and "not shown (needs +0.02)" in detail


def test_a_shift_needs_the_clean_image(tmp_path: Path) -> None:
    (tmp_path / "01-x").mkdir()
    (tmp_path / "01-x" / "series").write_text("")
    (tmp_path / "faults.yaml").write_text(
        "faults:\n  - {id: 01-x, title: t, expect_check: throughput, topologies: [pd-nixl],"
        " expect_shift: {metric: m, min: 0.01}}\n"
    )
    with pytest.raises(ConfigError, match=r"faults\.0\.expect_shift"):
        load_faults(tmp_path / "faults.yaml")


def test_a_shift_fault_needs_its_shift_even_when_its_check_failed() -> None:
    fault = _fault("10-nixl-read-delay")
    config = fault_config(load_config(DEFAULT_CONFIG), fault)
    clean_cell, faulty_cell = plan(config).planned()[0], plan(config).planned()[-1]
    clean = CheckResult(name="throughput", verdict="pass", metrics={"pd_time_kv_transfer_p50_s": 0.004})
    slow = CheckResult(
        name="throughput",
        verdict="fail",
        metrics={"pd_time_kv_transfer_p50_s": 0.005},
        gates=[Gate(name="regression-requests_per_s", passed=False)],
    )
    cells = [
        CellResult(cell=clean_cell, verdict="pass", checks=[clean], started_at=T0, duration_s=40),
        CellResult(cell=faulty_cell, verdict="fail", checks=[slow], started_at=T0, duration_s=40),
    ]
    run = _run("x", cells).model_copy(update={"baseline_image": "baseline"})
    detected, fired, _, detail, when = judge_fault(run, fault, faulty_cell.image, 0.0)
    assert not detected and when is None and fired == ["throughput"]
    assert "not shown" in detail and "throughput also failed" in detail
