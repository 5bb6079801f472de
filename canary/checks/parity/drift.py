"""Drift across images: a candidate image's control against the baseline image's, same cell and prompts.

Both aggregated cells measured a reference (greedy generation with top-k logprobs) and a null arm
on the same prompts in the same run. The candidate's generations are compared with the baseline's
(canary/checks/parity/fidelity.py, generation vs generation) and gated like P/D against the control: greedy-token
flips against both images' null flips (Fisher, token-exact when neither image's null arm flips) and
the top-k KL against both null arms' largest value (exact on a zero floor, binomial otherwise). A
failing gate is drift: the images' numerics differ beyond their own noise; its size (flipped
prompts, largest KL and its multiple of the gate's threshold, first differing position, failed
gates) is in the metrics (canary.core.metric_keys, exported) and the evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from canary.checks.parity.fidelity import compare
from canary.checks.parity.gates import floor_gate, token_gate
from canary.checks.parity.metrics import over_floor
from canary.checks.parity.reference import GEN_NULL_ARMS, Reference
from canary.config import ParityCheckConfig
from canary.core import metric_keys as k
from canary.judge.results import Gate


def judge_drift(
    settings: ParityCheckConfig, candidate: Sequence[Reference], baseline: Sequence[Reference], baseline_id: str
) -> tuple[list[Gate], dict[str, float], dict[str, Any]]:
    """Gates, metrics and evidence of the candidate's references against the baseline's (matched by
    prompt fingerprint; prompts that are evidence on both sides)."""
    by_sha = {r.prompt.sha: r for r in baseline}
    pairs = [(by_sha[r.prompt.sha], r) for r in candidate if r.prompt.sha in by_sha and r.evidence]
    pairs = [(b, c) for b, c in pairs if b.evidence]
    diffs = [compare(b.miss, c.miss) for b, c in pairs]
    null = [r.null[a] for r in [*candidate, *baseline] for a in GEN_NULL_ARMS if a in r.null]
    tokens = token_gate(
        [d.first_token_diff is not None for d in diffs], [f.token_diff > 0 for f in null], settings.alpha
    )
    kl = floor_gate(
        "kl",
        [d.max_kl for d in diffs],
        [f.max_kl for f in null],
        settings.margin,
        settings.kl_tolerance,
        settings.alpha,
    )
    gates = [
        Gate(
            name="drift-tokens-vs-baseline",
            passed=tokens.passed,
            observed=float(tokens.pd_diff),
            threshold=float(tokens.null_diff),
            detail=f"vs baseline image {baseline_id}: " + tokens.detail().replace("the control", "the baseline"),
        ),
        Gate(
            name="drift-kl-vs-baseline",
            passed=kl.passed,
            observed=round(kl.p_value, 6),
            threshold=settings.alpha,
            detail=f"vs baseline image {baseline_id}: {kl.detail()}",
        ),
    ]
    first = [d.first_token_diff for d in diffs if d.first_token_diff is not None]
    kl_max = max((d.max_kl for d in diffs), default=0.0)
    metrics = {
        k.PARITY_DRIFT_PROMPTS: float(len(pairs)),
        k.PARITY_DRIFT_TOKEN_FLIPS: float(tokens.pd_diff),
        k.PARITY_DRIFT_KL_MAX: kl_max,
        k.PARITY_DRIFT_ABS_DLOGPROB_MAX: max((d.max_abs_dlp for d in diffs), default=0.0),
        k.PARITY_DRIFT_FIRST_DIFF_MIN: float(min(first, default=settings.max_tokens)),
        k.PARITY_DRIFT_KL_OVER_FLOOR: over_floor(kl_max, kl.threshold),
        k.PARITY_DRIFT_FAILED_GATES: float(sum(not g.passed for g in gates)),
    }
    evidence = {
        "baseline_cell": baseline_id,
        "per_prompt": [
            {"length": c.prompt.length, "prompt_sha": c.prompt.sha, **d.to_json()}
            for (_, c), d in zip(pairs, diffs, strict=True)
        ],
    }
    return gates, metrics, evidence
