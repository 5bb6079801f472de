"""The per-request regression gate of the throughput check, and its family-wise control over a run.

In the check (``per_request_gates``): the candidate cell's per-request TTFT, mean ITL and E2E
samples (every repeat, warm-up and failed requests left out) against those of the baseline cell,
read back from the baseline's raw load files; one Mann-Whitney U test and Hodges-Lehmann interval
per metric (canary/core/request_stats.py). The raw comparisons go into the check's evidence under
``per_request``; the gates the check adds there are provisional (unadjusted p-values).

After every cell ran (``apply_family_control``, called by canary/run/cells.py): Holm's step-down over
every comparison of the run (all cells x metrics), then each gate is re-judged with its adjusted
p-value and the throughput check's verdict is re-derived: a regression -> fail; too few samples
or no baseline samples -> invalid (inconclusive: never a pass); otherwise pass. The caller then
re-derives the cell verdicts of the cells returned.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from canary.config import PerRequestTestConfig
from canary.core.request_stats import Comparison, Shift, compare_samples, describe, holm, judge
from canary.judge.results import CellResult, CheckResult, Gate, Verdict
from canary.load.stats import Sample

METRICS = ("ttft_s", "itl_mean_s", "e2e_s")
GATE_PREFIX = "per-request-"
PAIRED_GATE_PREFIX = "paired-"
"""The paired build-vs-build gate (canary/checks/throughput/paired.py): failed with a number is a
regression, failed without one (an inconclusive interval, too few windows) is invalid."""
EVIDENCE_KEY = "per_request"


def per_request_values(samples: Iterable[Sample]) -> dict[str, list[float]]:
    """metric -> one value per successful measured request."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for s in samples:
        if s.warmup or not s.ok:
            continue
        if s.ttft_s is not None and math.isfinite(s.ttft_s):
            out["ttft_s"].append(s.ttft_s)
        if s.itl_s:
            out["itl_mean_s"].append(statistics.fmean(s.itl_s))
        if s.e2e_s is not None and math.isfinite(s.e2e_s):
            out["e2e_s"].append(s.e2e_s)
    return out


def raw_samples(check: CheckResult) -> list[Sample]:
    """The per-request samples of a throughput check, read back from its raw load files."""
    return [s for run in raw_runs(check) for s in run]


def raw_runs(check: CheckResult) -> list[list[Sample]]:
    """The per-request samples of each load run (repeat) of a throughput check, from its raw files."""
    out: list[list[Sample]] = []
    for run in check.evidence.get("runs", []):
        raw = run.get("raw") if isinstance(run, dict) else None
        if not raw:
            continue
        try:
            data = json.loads(Path(str(raw)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a missing file means no samples: the gate is inconclusive, never a pass
        out.append([Sample.from_json(s) for s in data.get("samples", [])])
    return out


def _to_evidence(c: Comparison) -> dict[str, Any]:
    shift = c.shift
    return {
        "metric": c.metric,
        "n_baseline": c.n_baseline,
        "n_candidate": c.n_candidate,
        "baseline_median": c.baseline_median,
        "candidate_median": c.candidate_median,
        "p_value": c.p_value,
        "hl_shift": None if shift is None else shift.estimate,
        "hl_low": None if shift is None else shift.low,
        "hl_high": None if shift is None else shift.high,
        "confidence": None if shift is None else shift.confidence,
    }


def _from_evidence(data: dict[str, Any]) -> Comparison:
    shift = None
    if data.get("hl_shift") is not None:
        shift = Shift(
            estimate=float(data["hl_shift"]),
            low=float(data["hl_low"]),
            high=float(data["hl_high"]),
            confidence=float(data["confidence"]),
        )
    return Comparison(
        metric=str(data["metric"]),
        n_baseline=int(data["n_baseline"]),
        n_candidate=int(data["n_candidate"]),
        baseline_median=float(data["baseline_median"]),
        candidate_median=float(data["candidate_median"]),
        p_value=float(data["p_value"]),
        shift=shift,
    )


def _gate(c: Comparison, adjusted_p: float, cfg: PerRequestTestConfig) -> Gate:
    outcome = judge(c, adjusted_p, alpha=cfg.alpha, tolerance=cfg.tolerance, min_samples=cfg.min_samples)
    relative = c.relative_shift
    return Gate(
        name=f"{GATE_PREFIX}{c.metric}",
        passed=outcome == "no-regression",
        observed=relative if math.isfinite(relative) else None,
        threshold=cfg.tolerance,
        detail=describe(c, adjusted_p, outcome, cfg.min_samples),
    )


def compare_cells(
    candidate: Sequence[Sample], baseline: Sequence[Sample], cfg: PerRequestTestConfig
) -> list[Comparison]:
    """One comparison per metric."""
    cand, base = per_request_values(candidate), per_request_values(baseline)
    return [
        compare_samples(m, base[m], cand[m], confidence=cfg.confidence, min_samples=cfg.min_samples) for m in METRICS
    ]


def per_request_gates(
    cfg: PerRequestTestConfig,
    candidate: Sequence[Sample],
    baseline_check: CheckResult,
    baseline_id: str,
    evidence: dict[str, Any],
) -> list[Gate]:
    """Provisional per-request gates (unadjusted p); the comparisons go into evidence[EVIDENCE_KEY]."""
    if not cfg.enabled:
        return []
    comparisons = compare_cells(candidate, raw_samples(baseline_check), cfg)
    evidence[EVIDENCE_KEY] = {"baseline_cell": baseline_id, "comparisons": [_to_evidence(c) for c in comparisons]}
    return [_gate(c, c.p_value, cfg) for c in comparisons]


ERROR_RATE_GATE = "error-rate"
CLIENT_GATE = "client-not-bottleneck"
FINISHED_GATE = "finished-in-time"
MISSING_GATE_PREFIX = "missing-"
"""A gate that could not be judged because a number it needs is missing on one side (failed, no observed
value): the check is invalid, never a pass and never a regression."""
LOAD_VALIDITY_GATES = frozenset({ERROR_RATE_GATE, CLIENT_GATE, FINISHED_GATE})
"""The throughput check's gates on the load itself (its errors, its client, its deadline): they can fail the
check, but none judges the server's speed, so they alone never make a throughput pass (ungated)."""


def gates_verdict(gates: Sequence[Gate]) -> Verdict:
    """The throughput check's verdict from its gates: the one rule for the check's own (provisional)
    verdict and for the re-judged one after family control, so what a progress line announces is
    what is recorded. Any failed gate that is not ours fails; a failed gate of ours with a number is a
    regression (fail), without one (too few samples, no baseline samples) it is inconclusive (invalid,
    never a pass). The paired gate (PAIRED_GATE_PREFIX) follows the same rule. With only the load's own
    validity gates (no floor, no baseline, no paired verdict) it is ungated, never a pass."""
    ours = (GATE_PREFIX, PAIRED_GATE_PREFIX, MISSING_GATE_PREFIX)
    others = [g for g in gates if not g.name.startswith(ours)]
    mine = [g for g in gates if g.name.startswith(ours)]
    if not all(g.passed for g in others) or any(not g.passed and g.observed is not None for g in mine):
        return "fail"
    if any(not g.passed for g in mine):
        return "invalid"
    if all(g.name in LOAD_VALIDITY_GATES for g in gates):
        return "ungated"  # the load ran cleanly, but no floor, baseline or paired verdict judged its speed
    return "pass"


def provisional(check: CheckResult) -> bool:
    """Whether family control over the run may still change this throughput verdict: a per-request
    gate failed on its unadjusted p-value (Holm only ever raises a p-value, so no other gate can change)."""
    return check.name == "throughput" and any(
        g.name.startswith(GATE_PREFIX) and not g.passed and g.observed is not None for g in check.gates
    )


def _rejudge(check: CheckResult) -> None:
    """The verdict from the gates after family control; the summary names the first failed gate
    when the verdict changed (the check's own wording is kept otherwise)."""
    verdict = gates_verdict(check.gates)
    if verdict == check.verdict:
        return
    check.verdict = verdict
    failed = [g.detail for g in check.gates if not g.passed]
    head = check.summary.split("; ")[0]
    check.summary = f"{head}; {failed[0]}" if failed else head


def apply_family_control(cells: Sequence[CellResult], cfg: PerRequestTestConfig) -> set[str]:
    """Holm over every per-request comparison of a run; re-judge the gates and throughput verdicts.

    Returns the ids of cells whose throughput verdict changed (their cell verdict must be re-derived).
    """
    entries: list[tuple[CheckResult, int, Comparison]] = []
    for result in cells:
        check = result.check("throughput")
        if check is None or check.verdict not in ("pass", "fail", "invalid"):
            continue
        block = check.evidence.get(EVIDENCE_KEY)
        if not isinstance(block, dict):
            continue
        for index, data in enumerate(block.get("comparisons", [])):
            entries.append((check, index, _from_evidence(data)))
    adjusted = holm([c.p_value for _, _, c in entries])
    changed: set[str] = set()
    for (check, index, comparison), p_adj in zip(entries, adjusted, strict=True):
        check.evidence[EVIDENCE_KEY]["comparisons"][index]["p_holm"] = p_adj
        gate = _gate(comparison, p_adj, cfg)
        check.gates = [gate if g.name == gate.name else g for g in check.gates]
    for result in cells:
        check = result.check("throughput")
        if check is None or not any(g.name.startswith(GATE_PREFIX) for g in check.gates):
            continue
        before = check.verdict
        _rejudge(check)
        if check.verdict != before:
            changed.add(result.cell.id)
    return changed
