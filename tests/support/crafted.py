"""Check results made to order, for what a real measurement cannot be made to land on (a p-value of
0.02): the run's judging around them is what is under test."""

from __future__ import annotations

from canary.judge.request_tests import gates_verdict
from canary.judge.results import CheckResult, Gate


def crafted_throughput(p_values: list[float], shift: float = 0.3) -> CheckResult:
    """A throughput check with per-request comparisons of these p-values (provisional gates at 0.05)."""
    comparisons = [
        {"metric": metric, "n_baseline": 100, "n_candidate": 100, "baseline_median": 1.0,
         "candidate_median": 1.0 + shift, "p_value": p, "hl_shift": shift, "hl_low": shift / 2,
         "hl_high": shift * 2, "confidence": 0.95}
        for metric, p in zip(("ttft_s", "itl_mean_s", "e2e_s"), p_values, strict=True)
    ]  # fmt: skip
    gates = [Gate(name="error-rate", passed=True)] + [
        Gate(name=f"per-request-{c['metric']}", passed=c["p_value"] >= 0.05, observed=shift) for c in comparisons
    ]
    return CheckResult(
        name="throughput",
        verdict=gates_verdict(gates),
        summary="head",
        gates=gates,
        evidence={"per_request": {"baseline_cell": "b", "comparisons": comparisons}},
    )
