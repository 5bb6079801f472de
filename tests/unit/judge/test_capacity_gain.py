"""The disaggregation gain (canary.judge.capacity_gain): a P/D cell's SLO capacity over its aggregated
control's scaled to the pair's engines, with the conservative interval, the missing ends kept missing,
and the reasons it is not computed; informational (verdict and gates untouched). The end to end path
through the throughput check (CheckContext.control_for, engines x tensor parallel) is at the bottom."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from canary.checks.base import CheckContext
from canary.checks.throughput.check import add_capacity, add_gain
from canary.config.load import load_config
from canary.core import metric_keys as k
from canary.judge.capacity_gain import EVIDENCE_KEY, Capacity, Gain, gain_of, gains, judge_gain
from canary.judge.results import CellResult, CheckResult, Gate
from canary.paths import REPO_ROOT
from canary.plan.matrix import plan
from canary.targets.base import Deployment
from tests.support.sample import SyntheticServer, sample_config

CELLS = {c.id: c for c in plan(sample_config()).planned()}
AGG = CELLS["agg.cpu_attn.b32.auto.v1.baseline"]
PD = CELLS["pd.cpu_attn.p32-d32.auto.v1.baseline"]


def _throughput(estimate: float | None, low: float | None, high: float | None, verdict: str = "pass") -> CheckResult:
    metrics = {k.CAPACITY_REQUESTS_USED: 400.0, k.CAPACITY_SECONDS_USED: 120.0}
    for key, value in (
        (k.CAPACITY_REQUESTS_PER_S, estimate),
        (k.CAPACITY_LOW_REQUESTS_PER_S, low),
        (k.CAPACITY_HIGH_REQUESTS_PER_S, high),
    ):
        if value is not None:
            metrics[key] = value
    gate = Gate(name="error-rate", passed=verdict == "pass")
    return CheckResult(name="throughput", verdict=verdict, summary="8 req/s", metrics=metrics, gates=[gate])  # type: ignore[arg-type]


def _control(throughput: CheckResult, cell_id: str = AGG.id) -> CellResult:
    cell = CELLS[cell_id]
    return CellResult(cell=cell, verdict="pass", checks=[CheckResult(name="startup", verdict="pass"), throughput])


def test_the_gain_scales_the_control_and_takes_opposite_ends_for_the_interval() -> None:
    gain, low, high = gain_of(Capacity(6.0, 5.0, 7.0), Capacity(20.0, 18.0, 22.0), 2.0)
    assert gain == pytest.approx(6.0 / 40.0)
    assert low == pytest.approx(5.0 / 44.0) and high == pytest.approx(7.0 / 36.0)
    assert low < gain < high  # type: ignore[operator]
    assert gain_of(Capacity(6.0, 5.0, 7.0), Capacity(20.0, 18.0, 22.0), 1.0)[0] == pytest.approx(0.3)


def test_missing_interval_ends_stay_missing() -> None:
    # P/D's lower end missing -> the gain's lower end; the control's lower end missing -> the gain's upper end
    assert gain_of(Capacity(6.0, None, 7.0), Capacity(20.0, 18.0, 22.0), 2.0)[1:] == (None, pytest.approx(7 / 36))
    assert gain_of(Capacity(6.0, 5.0, 7.0), Capacity(20.0, None, 22.0), 2.0)[1:] == (pytest.approx(5 / 44), None)
    assert gain_of(Capacity(6.0, 5.0, None), Capacity(20.0, 18.0, None), 2.0)[1:] == (None, None)
    assert gain_of(Capacity(None, None, 0.25), Capacity(20.0, 18.0, 22.0), 2.0) == (None, None, None)
    with pytest.raises(ValueError, match="positive"):
        gain_of(Capacity(1.0, 1.0, 1.0), Capacity(1.0, 1.0, 1.0), 0.0)


def test_judge_gain_writes_metrics_evidence_and_summary_and_never_the_verdict() -> None:
    check = _throughput(6.0, 5.0, None, verdict="fail")
    before = (check.verdict, list(check.gates))
    gain = judge_gain(PD, check, _control(_throughput(20.0, 18.0, 22.0)), 2, 1)
    assert gain is not None and gain.gain == pytest.approx(0.15)
    assert (check.verdict, check.gates) == before
    assert check.metrics[k.DISAGG_GAIN] == pytest.approx(0.15)
    assert check.metrics[k.DISAGG_GAIN_LOW] == pytest.approx(5 / 44)
    assert k.DISAGG_GAIN_HIGH not in check.metrics  # the P/D upper end is missing: no number, never 0
    assert check.metrics[k.DISAGG_ENGINE_SCALE] == 2.0
    assert "x2, linear-scaling assumption" in check.summary and "[0.114, above]" in check.summary
    evidence = check.evidence[EVIDENCE_KEY]
    assert evidence["control_cell"] == AGG.id and evidence["skipped"] == ""
    assert "linear-scaling assumption" in evidence["assumption"]
    assert Gain.from_json(evidence) == gain


@pytest.mark.parametrize(
    ("pd", "control", "why"),
    [
        (_throughput(None, None, 0.25), _control(_throughput(20.0, 18.0, 22.0)), "of this cell found no rate"),
        (_throughput(6.0, 5.0, 7.0), _control(_throughput(None, None, 1.0)), f"of the control {AGG.id} found no"),
        (_throughput(6.0, 5.0, 7.0), _control(CheckResult(name="throughput", verdict="pass")), "ran no capacity"),
        (_throughput(6.0, 5.0, 7.0), None, "no aggregated control"),
    ],
)
def test_no_gain_says_why(pd: CheckResult, control: CellResult | None, why: str) -> None:
    gain = judge_gain(PD, pd, control, 2, 1)
    assert gain is not None and gain.gain is None and why in gain.skipped
    assert not {k.DISAGG_GAIN, k.DISAGG_GAIN_LOW, k.DISAGG_GAIN_HIGH, k.DISAGG_ENGINE_SCALE} & set(pd.metrics)
    assert pd.evidence[EVIDENCE_KEY]["skipped"] == gain.skipped
    assert "disaggregation gain" not in pd.summary


def test_a_control_of_another_backend_is_no_control() -> None:
    other = _control(_throughput(20.0, 18.0, 22.0)).model_copy(deep=True)
    other.cell = other.cell.model_copy(update={"backend": "FLASH_ATTN"})
    gain = judge_gain(PD, _throughput(6.0, 5.0, 7.0), other, 2, 1)
    assert gain is not None and gain.gain is None and "same model, backend" in gain.skipped
    assert gain.control_cell == "" and gain.control is None  # the other backend's numbers are not shown


def test_aggregated_cells_and_cells_without_a_search_get_nothing() -> None:
    check = _throughput(20.0, 18.0, 22.0)
    assert judge_gain(AGG, check, None, 1, 1) is None and EVIDENCE_KEY not in check.evidence
    bare = CheckResult(name="throughput", verdict="pass")
    assert judge_gain(PD, bare, _control(check), 2, 1) is None and EVIDENCE_KEY not in bare.evidence


def test_gains_lists_the_p_d_cells_with_a_gain_block() -> None:
    pd = _throughput(6.0, 5.0, 7.0)
    judge_gain(PD, pd, _control(_throughput(20.0, 18.0, 22.0)), 2, 1)
    cells = [_control(_throughput(20.0, 18.0, 22.0)), CellResult(cell=PD, verdict="pass", checks=[pd])]
    ((result, gain),) = gains(cells)
    assert result.cell.id == PD.id and gain.gain == pytest.approx(0.15)


def test_through_the_check_the_control_is_found_and_tensor_parallel_counts(tmp_path: Path) -> None:
    """add_capacity on the control then on the P/D cell (the real search against the synthetic server),
    then add_gain: the control comes from CheckContext.control_for, the engines from the model's
    tensor_parallel_size (2 per engine here: 4 devices against 2, still x2)."""
    config = load_config(REPO_ROOT / "configs/cpu-default.yaml", [])
    models = [m.model_copy(update={"tensor_parallel_size": 2}) for m in config.models]
    config = config.model_copy(update={"models": models})
    cells = {c.id: c for c in plan(config).planned()}
    agg, pd = cells["agg.cpu_attn.b128.auto.v1.baseline"], cells["pd.cpu_attn.p128-d128.auto.v1.baseline"]
    earlier: dict[str, CellResult] = {}
    results = {}
    for cell, capacity in ((agg, 20.0), (pd, 6.0)):
        ctx = CheckContext(cell, Deployment(cell, "http://127.0.0.1:9", "tiny", {}, started=True), config, tmp_path)
        ctx.earlier = dict(earlier)
        result = CheckResult(name="throughput", verdict="pass", summary="x")
        server = SyntheticServer(capacity=capacity, idle_ttft_s=0.05, itl_s=0.01)
        add_capacity(ctx, (None, 1.0, {}), result, measure_factory=lambda found=server, **_: found)
        add_gain(ctx, result)
        results[cell.id] = result
        startup = CheckResult(name="startup", verdict="pass")
        earlier[cell.id] = CellResult(cell=cell, verdict="pass", checks=[startup, result])
    assert EVIDENCE_KEY not in results[agg.id].evidence
    evidence = results[pd.id].evidence[EVIDENCE_KEY]
    assert (evidence["engines_pd"], evidence["engines_control"], evidence["scale"]) == (4, 2, 2.0)
    assert evidence["control_cell"] == agg.id
    mine, theirs = (results[c].metrics[k.CAPACITY_REQUESTS_PER_S] for c in (pd.id, agg.id))
    assert math.isclose(results[pd.id].metrics[k.DISAGG_GAIN], mine / (2 * theirs))


def test_a_model_missing_from_the_config_is_no_gain_and_no_error(tmp_path: Path) -> None:
    """add_gain never raises (an error would change the check's verdict): engines it cannot count are
    a skipped gain, which the reports read back."""
    config = load_config(REPO_ROOT / "configs/cpu-default.yaml", [])
    pd = next(c for c in plan(config).planned() if c.topology == "pd-nixl").model_copy(update={"model": "gone"})
    ctx = CheckContext(pd, Deployment(pd, "http://127.0.0.1:9", "gone", {}, started=True), config, tmp_path)
    result = _throughput(6.0, 5.0, 7.0)
    add_gain(ctx, result)
    assert result.verdict == "pass" and "gone" in result.evidence[EVIDENCE_KEY]["skipped"]
    ((_, gain),) = gains([CellResult(cell=pd, verdict="pass", checks=[result])])
    assert gain.gain is None and gain.pd.estimate == 6.0 and "gone" in gain.skipped
