"""The runner's judging logic: expectations (xfail semantics), skipped cells, crashing checks, Ctrl-C.

These use an in-process target stand-in (StandInTarget) that deploys nothing: the real local
target is exercised by the engine tests under tests/integration.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.checks import base as checks_base
from canary.config.load import load_config
from canary.judge.expectations import apply_expectation
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import find, plan
from canary.run.cells import execute
from canary.targets.base import Deployment


class StandInTarget:
    """A stand-in target: 'deploys' instantly; raises KeyboardInterrupt on a chosen cell."""

    kind = "stand-in"

    def __init__(self, interrupt_on: str | None = None) -> None:
        self.interrupt_on = interrupt_on
        self.deployed: list[str] = []
        self.torn_down: list[str] = []

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        if cell.id == self.interrupt_on:
            raise KeyboardInterrupt
        self.deployed.append(cell.id)
        try:
            yield Deployment(cell=cell, base_url="http://127.0.0.1:9", served_model=cell.model, started=True)
        finally:
            self.torn_down.append(cell.id)

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}


def _cells() -> list[Cell]:
    return list(plan(load_config(CONFIGS_DIR / "cpu-default.yaml")).cells)


def _check(name: str, verdict: str, failure_class: str = "") -> CheckResult:
    evidence = {"failure_class": failure_class} if failure_class else {}
    return CheckResult(name=name, verdict=verdict, summary=f"{name} {verdict}", evidence=evidence)  # type: ignore[arg-type]


def test_expected_startup_failure_with_the_right_class() -> None:
    cell = find(_cells(), "agg.cpu_attn.b16.auto.v1.baseline")
    assert cell is not None
    verdict, reason = apply_expectation(cell, [_check("startup", "fail", "no-common-block-size")])
    assert verdict == "expected-fail" and "no-common-block-size" in reason


def test_expected_startup_failure_with_another_class_fails() -> None:
    cell = find(_cells(), "agg.cpu_attn.b16.auto.v1.baseline")
    assert cell is not None
    verdict, reason = apply_expectation(cell, [_check("startup", "fail", "cuda-oom")])
    assert verdict == "fail" and "expected no-common-block-size" in reason


def test_expected_failure_that_passes_is_flagged() -> None:
    cell = find(_cells(), "agg.cpu_attn.b16.auto.v1.baseline")
    assert cell is not None
    verdict, _ = apply_expectation(cell, [_check("startup", "pass"), _check("accuracy", "pass")])
    assert verdict == "unexpected-pass"


def test_no_expectation_takes_the_worst_check() -> None:
    cell = find(_cells(), "agg.cpu_attn.b32.auto.v1.baseline")
    assert cell is not None
    verdict, reason = apply_expectation(cell, [_check("startup", "pass"), _check("accuracy", "fail")])
    assert verdict == "fail" and reason.startswith("accuracy:")


def _pd_mismatch_cell(failing_checks: list[str] | None) -> Cell:
    """cpu-default's p32-d64 cell with a check-fail expectation (the default config's own, or these checks)."""
    overrides = (
        []
        if failing_checks == ["parity", "accuracy", "kv_transfer"]
        else [
            "matrix.expectations="
            + json.dumps(
                [
                    {
                        "match": {"prefill_block_size": 32, "decode_block_size": 64},
                        "expect": "check-fail",
                        "reason": "known",
                        "failing_checks": failing_checks,
                    }
                ]
            )
        ]
    )
    cells = plan(load_config(CONFIGS_DIR / "cpu-default.yaml", overrides)).cells
    cell = find(list(cells), "pd.cpu_attn.p32-d64.auto.v1.baseline")
    assert cell is not None and cell.expect is not None and cell.expect.expect == "check-fail"
    return cell


PASSING = [_check("startup", "pass"), _check("kv_transfer", "pass")]


def test_named_failing_checks_that_all_fail_are_expected() -> None:
    cell = _pd_mismatch_cell(["parity", "accuracy"])
    checks = [*PASSING, _check("parity", "fail"), _check("accuracy", "fail"), _check("throughput", "pass")]
    verdict, reason = apply_expectation(cell, checks)
    assert verdict == "expected-fail" and "parity: parity fail" in reason


def test_a_failure_outside_the_named_checks_is_not_masked() -> None:
    cell = _pd_mismatch_cell(["parity", "accuracy"])
    checks = [*PASSING, _check("parity", "fail"), _check("accuracy", "fail"), _check("throughput", "fail")]
    verdict, reason = apply_expectation(cell, checks)
    assert verdict == "fail" and reason == "throughput: throughput fail"


def test_a_named_check_that_passes_is_an_unexpected_pass() -> None:
    cell = _pd_mismatch_cell(["parity", "accuracy"])
    checks = [*PASSING, _check("parity", "fail"), _check("accuracy", "pass"), _check("throughput", "pass")]
    verdict, reason = apply_expectation(cell, checks)
    assert verdict == "unexpected-pass" and reason.startswith("accuracy did not fail")


def test_unnamed_check_fail_expectation_takes_any_failure() -> None:
    cell = _pd_mismatch_cell(None)
    verdict, _ = apply_expectation(cell, [*PASSING, _check("throughput", "fail")])
    assert verdict == "expected-fail"
    verdict, _ = apply_expectation(cell, PASSING)
    assert verdict == "unexpected-pass"


def test_a_named_check_that_could_not_judge_counts_neither_way() -> None:
    cell = _pd_mismatch_cell(["parity", "accuracy"])
    verdict, reason = apply_expectation(cell, [*PASSING, _check("accuracy", "fail"), _check("parity", "invalid")])
    assert verdict == "expected-fail" and "not judged: parity (invalid)" in reason
    verdict, reason = apply_expectation(cell, [*PASSING, _check("parity", "invalid")])
    assert verdict == "invalid" and "expectation not judged: parity (invalid), accuracy (not run)" in reason
    verdict, reason = apply_expectation(cell, PASSING)
    assert verdict == "skipped" and "parity (not run), accuracy (not run)" in reason


@pytest.mark.parametrize(
    ("disabled", "verdict", "said"),
    [
        ([], "expected-fail", "parity: parity fail"),
        (["parity"], "expected-fail", "not judged: parity (not run)"),
        (["parity", "accuracy", "kv_transfer"], "skipped", "expectation not judged"),
    ],
)
def test_turning_an_expected_check_off_is_not_an_unexpected_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disabled: list[str], verdict: str, said: str
) -> None:
    """cpu-default's p32-d64 cell is expected to fail parity, accuracy and kv_transfer; a run with
    `--set checks.parity.enabled=false` used to make it unexpected-pass and exit 1."""

    def named(name: str, outcome: str) -> checks_base.CheckFn:
        return lambda ctx: _check(name, outcome)

    import canary.run.cells

    fakes = {"startup": named("startup", "pass"), "throughput": named("throughput", "pass")}
    fakes |= {name: named(name, "fail") for name in ("parity", "accuracy", "kv_transfer")}
    monkeypatch.setattr(canary.run.cells, "registered", lambda: fakes)
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", [f"checks.{name}.enabled=false" for name in disabled])
    run = execute(config, plan(config), tmp_path / "run", target=StandInTarget(), progress=lambda _: None)
    cell = next(c for c in run.cells if c.cell.id == "pd.cpu_attn.p32-d64.auto.v1.baseline")
    assert cell.verdict == verdict and said in cell.reason
    assert [c.name for c in cell.checks if c.name in disabled] == []


def _register_temp_checks(monkeypatch: pytest.MonkeyPatch, accuracy_verdict: str) -> None:
    def startup(ctx: checks_base.CheckContext) -> CheckResult:
        return _check("startup", "pass")

    def accuracy(ctx: checks_base.CheckContext) -> CheckResult:
        if accuracy_verdict == "crash":
            raise RuntimeError("boom")
        return _check("accuracy", accuracy_verdict)

    import canary.run.cells

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"startup": startup, "accuracy": accuracy})


def test_execute_runs_planned_cells_and_tears_each_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register_temp_checks(monkeypatch, "pass")
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    the_plan = plan(config)
    target = StandInTarget()
    run = execute(config, the_plan, tmp_path / "run", target=target, progress=lambda _: None)
    assert target.deployed == target.torn_down
    by_id = {c.cell.id: c for c in run.cells}
    assert by_id["agg.cpu_attn.b16.auto.v1.baseline"].verdict == "skipped"
    assert by_id["agg.cpu_attn.b32.auto.v1.baseline"].verdict == "pass"
    assert run.ok and not run.interrupted


def test_a_crashing_check_is_an_error_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register_temp_checks(monkeypatch, "crash")
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    run = execute(config, plan(config), tmp_path / "run", target=StandInTarget(), progress=lambda _: None)
    cell = next(c for c in run.cells if c.cell.id == "agg.cpu_attn.b32.auto.v1.baseline")
    assert cell.verdict == "error"
    accuracy = cell.check("accuracy")
    assert accuracy is not None and "boom" in accuracy.summary
    assert not run.ok


def test_ctrl_c_marks_the_rest_and_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _register_temp_checks(monkeypatch, "pass")
    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    target = StandInTarget(interrupt_on="pd.cpu_attn.p32-d32.auto.v1.baseline")
    run = execute(config, plan(config), tmp_path / "run", target=target, progress=lambda _: None)
    assert run.interrupted
    assert len(run.cells) == len(plan(config).cells)
    rest = [c for c in run.cells if c.reason == "interrupted (Ctrl-C)"]
    assert rest[0].cell.id == "pd.cpu_attn.p32-d32.auto.v1.baseline"
    assert target.deployed == target.torn_down


def test_check_fail_expectation_is_not_met_by_a_startup_crash() -> None:
    """check-fail means: it starts and serves, then a check fails. A crash is another outcome."""
    cell = _pd_mismatch_cell(["startup"])
    crashed = CheckResult(name="startup", verdict="fail", summary="decode exited", evidence={"serving": False})
    verdict, reason = apply_expectation(cell, [crashed])
    assert verdict == "fail" and "did not start" in reason
    gated = CheckResult(name="startup", verdict="fail", summary="layout-nixl-grain", evidence={"serving": True})
    verdict, _ = apply_expectation(cell, [gated, _check("kv_transfer", "pass")])
    assert verdict == "expected-fail"


@pytest.mark.parametrize(("serving", "ran"), [(True, ["startup", "accuracy"]), (False, ["startup"])])
def test_a_serving_cell_whose_startup_check_fails_is_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serving: bool, ran: list[str]
) -> None:
    def startup(ctx: checks_base.CheckContext) -> CheckResult:
        return CheckResult(name="startup", verdict="fail", summary="layout", evidence={"serving": serving})

    def accuracy(ctx: checks_base.CheckContext) -> CheckResult:
        return _check("accuracy", "pass")

    import canary.run.cells

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"startup": startup, "accuracy": accuracy})
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    run = execute(config, plan(config), tmp_path / "run", target=StandInTarget(), progress=lambda _: None)
    cell = next(c for c in run.cells if c.cell.id == "agg.cpu_attn.b32.auto.v1.baseline")
    assert [c.name for c in cell.checks] == ran and cell.verdict == "fail"
