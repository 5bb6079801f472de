"""The per-request gate (canary.judge.request_tests): samples, provisional gates, Holm over the run, the
re-judged verdicts, and the runner hook that applies it and records the history."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.checks import base as checks_base
from canary.config import CanaryConfig, PerRequestTestConfig
from canary.export.history.store import open_store
from canary.judge.request_tests import apply_family_control, per_request_gates, per_request_values
from canary.judge.results import CellResult, CheckResult, Gate
from canary.load.stats import Sample
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import Plan
from canary.run.cells import execute
from canary.targets.base import Deployment
from tests.support.synth import requests, sample_cells

CFG = PerRequestTestConfig()


def _sample(index: int, **kw: Any) -> Sample:
    base: dict[str, Any] = dict(
        index=index, warmup=False, sent_at=0.0, ended_at=1.0, expected_prompt_tokens=4, expected_output_tokens=3
    )
    return Sample(**{**base, **kw})


def test_per_request_values_keep_one_value_per_successful_measured_request() -> None:
    samples = [
        _sample(0, ttft_s=0.1, itl_s=[0.01, 0.03], e2e_s=0.2, output_tokens=3),
        _sample(1, warmup=True, ttft_s=9.0, itl_s=[9.0], e2e_s=9.0),
        _sample(2, error="http-500", ttft_s=8.0, e2e_s=8.0),
        _sample(3, ttft_s=0.2, itl_s=[], e2e_s=0.3),
    ]
    values = per_request_values(samples)
    assert values == {"ttft_s": [0.1, 0.2], "itl_mean_s": [pytest.approx(0.02)], "e2e_s": [0.2, 0.3]}


def _check_with_raw(tmp_path: Path, name: str, samples: list[Sample]) -> CheckResult:
    import json

    raw = tmp_path / f"{name}.json"
    raw.write_text(json.dumps({"samples": [s.to_json() for s in samples]}))
    return CheckResult(name="throughput", verdict="pass", evidence={"runs": [{"raw": str(raw)}]})


def test_missing_baseline_samples_are_inconclusive_never_a_pass(tmp_path: Path) -> None:
    candidate = requests(random.Random(1), 40, ttft_s=0.1, itl_s=0.01)
    baseline = CheckResult(name="throughput", verdict="pass", evidence={"runs": [{"raw": str(tmp_path / "gone.json")}]})
    check = CheckResult(
        name="throughput", verdict="pass", summary="40 req", gates=[Gate(name="error-rate", passed=True)]
    )
    check.gates.extend(per_request_gates(CFG, candidate, baseline, "base", check.evidence))
    assert [g.passed for g in check.gates[1:]] == [False, False, False]
    cell = CellResult(cell=sample_cells()[3], verdict="pass", checks=[check])
    assert apply_family_control([cell], CFG) == {cell.cell.id}
    assert check.verdict == "invalid"
    assert "inconclusive, 40 candidate and 0 baseline requests (need >= 20 each)" in check.summary


def test_disabled_adds_nothing(tmp_path: Path) -> None:
    evidence: dict[str, Any] = {}
    base = _check_with_raw(tmp_path, "b", requests(random.Random(2), 30, ttft_s=0.1, itl_s=0.01))
    assert per_request_gates(PerRequestTestConfig(enabled=False), [], base, "b", evidence) == []
    assert evidence == {}


def _crafted(cell: Cell, p_values: list[float], shift: float = 0.3) -> CellResult:
    comparisons = [
        {
            "metric": metric,
            "n_baseline": 100,
            "n_candidate": 100,
            "baseline_median": 1.0,
            "candidate_median": 1.0 + shift,
            "p_value": p,
            "hl_shift": shift,
            "hl_low": shift / 2,
            "hl_high": shift * 2,
            "confidence": 0.95,
        }
        for metric, p in zip(("ttft_s", "itl_mean_s", "e2e_s"), p_values, strict=True)
    ]
    gates = [Gate(name="error-rate", passed=True)] + [
        Gate(name=f"per-request-{c['metric']}", passed=c["p_value"] >= 0.05, observed=shift) for c in comparisons
    ]
    verdict = "pass" if all(g.passed for g in gates) else "fail"
    check = CheckResult(
        name="throughput",
        verdict=verdict,  # type: ignore[arg-type]
        summary="head",
        gates=gates,
        evidence={"per_request": {"baseline_cell": "b", "comparisons": comparisons}},
    )
    return CellResult(cell=cell, verdict=verdict, checks=[check])  # type: ignore[arg-type]


def test_holm_over_the_run_turns_a_lone_small_p_into_no_alarm() -> None:
    """p = 0.02 alone fails at 0.05; among nine tests of the run Holm makes it 0.18: no regression."""
    cells = sample_cells()[3:6]
    results = [
        _crafted(cells[0], [0.02, 0.6, 0.7]),
        _crafted(cells[1], [0.5, 0.6, 0.7]),
        _crafted(cells[2], [0.3, 0.4, 0.9]),
    ]
    assert results[0].checks[0].verdict == "fail"  # provisional, unadjusted
    changed = apply_family_control(results, CFG)
    assert changed == {cells[0].id}
    check = results[0].checks[0]
    assert check.verdict == "pass"
    assert check.evidence["per_request"]["comparisons"][0]["p_holm"] == pytest.approx(0.18)
    assert "(Holm 0.18)" in check.gates[1].detail and check.gates[1].passed


def test_a_strong_regression_survives_holm() -> None:
    cells = sample_cells()[3:6]
    results = [_crafted(cells[0], [1e-9, 1e-6, 1e-8]), _crafted(cells[1], [0.5, 0.6, 0.7])]
    apply_family_control(results, CFG)
    assert results[0].checks[0].verdict == "fail"
    assert results[1].checks[0].verdict == "pass"
    assert results[0].checks[0].summary == "head"  # verdict unchanged: the check's own wording stays
    assert "ttft_s: HL shift" in results[0].checks[0].gates[1].detail
    assert "(Holm 6e-09)" in results[0].checks[0].gates[1].detail  # 6 tests x 1e-9


class _Target:
    kind = "stand-in"

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        yield Deployment(cell=cell, base_url="http://127.0.0.1:9", served_model=cell.model, started=True)

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}


def test_execute_applies_holm_and_records_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner hook: a cell failed by an unadjusted p (0.02) passes after Holm over the run, its
    cell verdict is re-derived, and the run lands in <results>/history.sqlite."""
    import canary.run.cells

    config = CanaryConfig.model_validate(yaml.safe_load((CONFIGS_DIR / "cpu-default.yaml").read_text()))
    cells = sample_cells()[3:6]
    crafted = {
        cells[0].id: _crafted(cells[0], [0.02, 0.6, 0.7]).checks[0],
        cells[1].id: _crafted(cells[1], [0.5, 0.6, 0.7]).checks[0],
        cells[2].id: _crafted(cells[2], [1e-9, 1e-9, 1e-9]).checks[0],
    }

    def throughput(ctx: checks_base.CheckContext) -> CheckResult:
        return crafted[ctx.cell.id].model_copy(deep=True)

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"throughput": throughput})
    the_plan = Plan(
        config_name="cpu-default",
        platform="cpu",
        reduction="full",
        cells=tuple(cells),
        full_cell_count=3,
        full_planned_count=3,
    )
    lines: list[str] = []
    run = execute(config, the_plan, tmp_path / "run", target=_Target(), progress=lines.append)
    by_id = {c.cell.id: c for c in run.cells}
    assert by_id[cells[0].id].verdict == "pass"
    assert by_id[cells[1].id].verdict == "pass"
    assert by_id[cells[2].id].verdict == "fail"
    assert f"history: recorded {run.run_id} in {tmp_path / 'history.sqlite'}" in lines
    with open_store(sqlite=tmp_path / "history.sqlite") as store:
        assert store.cells_of(run.run_id)[cells[2].id][0] == "fail"
