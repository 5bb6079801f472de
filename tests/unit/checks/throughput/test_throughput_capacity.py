"""checks.throughput.capacity: off by default; when on, the SLO capacity search runs after the measurement
and lands in metrics and evidence without touching the verdict. The search is fed a synthetic server here
(a deterministic attainment curve that crosses the target, 0.9, at 6.1 req/s); the real probes are the open-loop
client's (tests/unit/load/test_load_openloop.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import pytest

from canary.checks.base import CheckContext
from canary.checks.throughput.check import add_capacity, build_spec, capacity_slo
from canary.config import CanaryConfig, ThroughputCheckConfig
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.load.capacity import CapacitySlo, RateResult
from canary.load.workload import WorkloadSpec
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.targets.base import Deployment


def _ctx(tmp_path: Path, *overrides: str) -> CheckContext:
    config: CanaryConfig = load_config(REPO_ROOT / "configs/cpu-default.yaml", list(overrides))
    cell = Cell.model_construct(id="standin.synthetic", image=config.baseline, topology="aggregated", model="tiny")
    deployment = Deployment(cell=cell, base_url="http://127.0.0.1:9", served_model="tiny", started=True)
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path)


class SyntheticMeasure:
    """Stands in for LoadMeasure: attainment 1 below 6 req/s, then 1 - (rate - 6): 0.9 at 6.1 (200 requests a probe)."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, *, base: WorkloadSpec, work_dir: Path, slo: CapacitySlo, seconds_per_probe: float) -> None:
        SyntheticMeasure.made.append({"base": base, "work_dir": work_dir, "slo": slo, "seconds": seconds_per_probe})

    def __call__(self, rate: float) -> RateResult:
        met = 200 if rate <= 6.0 else max(0, round(200 * (1 - (rate - 6.0))))
        return RateResult(offered_rate=rate, requests=200, met=met, seconds=10.0)


def test_capacity_and_open_loop_are_off_by_default() -> None:
    cfg = ThroughputCheckConfig()
    assert not cfg.capacity.enabled and not cfg.open_loop
    config = load_config(REPO_ROOT / "configs/cpu-default.yaml", [])
    assert not config.checks.throughput.capacity.enabled and not config.checks.throughput.open_loop


def test_open_loop_config_reaches_the_spec_and_is_validated(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "checks.throughput.request_rate=3", "checks.throughput.open_loop=true")
    spec = build_spec(ctx.config.checks.throughput, ctx.deployment)
    assert spec.open_loop and spec.request_rate == 3.0
    with pytest.raises(ValueError, match="request_rate"):
        ThroughputCheckConfig(open_loop=True)
    with pytest.raises(ValueError, match="no workers"):
        ThroughputCheckConfig(open_loop=True, request_rate=1.0, workers=2)


def test_the_search_lands_in_metrics_and_evidence_not_in_the_verdict(tmp_path: Path) -> None:
    ctx = _ctx(
        tmp_path, "checks.throughput.capacity.enabled=true", "checks.throughput.capacity.ttft_ms=400",
        "checks.throughput.capacity.itl_statistic=mean", "checks.throughput.capacity.precision=0.05",
    )  # fmt: skip
    result = CheckResult(name="throughput", verdict="pass", summary="4.0 req/s")
    SyntheticMeasure.made.clear()
    add_capacity(ctx, ([1, 2, 3], 1.0, {}), result, measure_factory=SyntheticMeasure)
    made = SyntheticMeasure.made[0]
    assert made["base"].token_pool == [1, 2, 3] and made["base"].base_url == "http://127.0.0.1:9"
    assert made["slo"] == CapacitySlo(ttft_s=0.4, itl_s=0.05, itl_statistic="mean")
    assert made["work_dir"] == tmp_path / "throughput" / "capacity"
    assert result.verdict == "pass" and not result.gates
    # the fitted crossing and its interval (the search's `estimate` and `interval`) are the metrics
    assert 5.9 <= result.metrics["capacity_requests_per_s"] <= 6.3
    assert result.metrics["capacity_low_requests_per_s"] <= 6.1 <= result.metrics["capacity_high_requests_per_s"]
    evidence = result.evidence["capacity"]
    assert [result.metrics["capacity_low_requests_per_s"], result.metrics["capacity_high_requests_per_s"]] == (
        evidence["interval"]
    )
    assert evidence["crossing"]["rate"] == result.metrics["capacity_requests_per_s"]
    assert result.metrics["capacity_requests_used"] == 200 * len(evidence["curve"])
    assert result.summary.startswith("4.0 req/s; SLO capacity 6.")
    assert evidence["stop_reason"].startswith("bracket within 5%")


def test_an_unjudged_measurement_skips_the_search(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "checks.throughput.capacity.enabled=true")
    result = CheckResult(name="throughput", verdict="invalid", summary="client lag")
    add_capacity(ctx, (None, 1.0, {}), result, measure_factory=SyntheticMeasure)
    assert result.evidence["capacity"] == {"skipped": "the throughput measurement was invalid"}
    assert "capacity_requests_per_s" not in result.metrics


def test_capacity_slo_converts_milliseconds() -> None:
    slo = capacity_slo(ThroughputCheckConfig().capacity)
    assert math.isclose(slo.ttft_s, 1.0) and math.isclose(slo.itl_s, 0.05) and slo.attainment == 0.9
