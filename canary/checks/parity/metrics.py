"""The numbers the parity check reports (CheckResult.metrics), from its references and P/D rows.

Every key is a constant of canary.core.metric_keys and is exported by canary/export/prometheus/schema.py: KV
fidelity of P/D against the control (KL mean and max, |delta logprob|, top-1 agreement), the null
arm's noise floor, how far the worst prompt is beyond the gate's threshold, the prompts failing and
rejected as evidence, and the block the divergence starts at. Pure functions: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from canary.checks.parity.fidelity import Fidelity
from canary.checks.parity.gates import FloorGate, first_divergent_block
from canary.checks.parity.reference import Reference
from canary.core import metric_keys as k

FORCED_KL_GATE = "forced-kl"
FORCED_ABS_DLOGPROB_GATE = "forced-abs-dlogprob"
OVER_FLOOR_LIMIT = 1.0
"""An over_floor value at the gate's threshold: beyond it a prompt exceeds the engine's own noise
(what the dashboards draw as the threshold line of every *_over_floor series)."""


def over_floor(value: float, threshold: float) -> float:
    """`value` as a multiple of a gate threshold (above OVER_FLOOR_LIMIT, 1: beyond the noise floor); inf when the
    threshold is 0 and the value is not (exporters drop non-finite numbers)."""
    if threshold > 0:
        return value / threshold
    return 0.0 if value <= 0 else math.inf


def evidence_metrics(refs: Sequence[Reference]) -> dict[str, float]:
    """Prompts measured, kept as evidence, rejected as evidence."""
    kept = sum(r.evidence for r in refs)
    return {
        k.PARITY_PROMPTS: float(len(refs)),
        k.PARITY_EVIDENCE_PROMPTS: float(kept),
        k.PARITY_REJECTED_PROMPTS: float(len(refs) - kept),
    }


def reference_metrics(refs: Sequence[Reference], floors: Mapping[str, float]) -> dict[str, float]:
    """An aggregated cell's reference: prompts and the null arm's floor (`floors`: kl, abs_dlp,
    token_flips, as parity._floors measures them)."""
    return {
        **evidence_metrics(refs),
        k.PARITY_NULL_KL_MAX: floors["kl"],
        k.PARITY_NULL_ABS_DLOGPROB_MAX: floors["abs_dlp"],
        k.PARITY_NULL_TOKEN_FLIPS: floors["token_flips"],
    }


def pd_metrics(
    refs: Sequence[Reference],
    used: Sequence[tuple[Fidelity, Fidelity]],
    forced_null: Sequence[Fidelity],
    gates: Mapping[str, FloorGate],
    divergence: tuple[Sequence[tuple[int, int]], Sequence[int], int],
    max_tokens: int,
) -> dict[str, float]:
    """A P/D cell against its control. `used`: (generation vs the control's generation, teacher-forced
    scoring) per evidence prompt; `forced_null`: the control's teacher-forced null comparisons;
    `gates`: the floor gates by name; `divergence`: (failing (length, onset), passing lengths,
    smallest logical block) as fidelity_gate.diagnose takes them."""
    forced = [f for _, f in used]
    positions = [x for f in forced for x in f.kl]
    first_diffs = [g.first_token_diff for g, _ in used if g.first_token_diff is not None]
    matched = sum(g.first_token_diff is None for g, _ in used)
    kl_max = max((f.max_kl for f in forced), default=0.0)
    dlp_max = max((f.max_abs_dlp for f in forced), default=0.0)
    failing, passing, block = divergence
    metrics = {
        **evidence_metrics(refs),
        k.PARITY_MATCH_RATE: round(matched / len(used), 4) if used else 0.0,
        k.PARITY_FIRST_DIFF_MIN: float(min(first_diffs, default=max_tokens)),
        k.PARITY_KL_MAX: kl_max,
        k.PARITY_KL_MEAN: sum(positions) / len(positions) if positions else 0.0,
        k.PARITY_ABS_DLOGPROB_MAX: dlp_max,
        k.PARITY_TOP1_AGREE_MIN: min((1.0 - f.top1_disagree for f in forced), default=1.0),
        k.PARITY_NULL_KL_MAX: max((f.max_kl for f in forced_null), default=0.0),
        k.PARITY_NULL_ABS_DLOGPROB_MAX: max((f.max_abs_dlp for f in forced_null), default=0.0),
        k.PARITY_FAILING_PROMPTS: float(len(failing)),
    }
    if FORCED_KL_GATE in gates:
        metrics[k.PARITY_KL_OVER_FLOOR] = over_floor(kl_max, gates[FORCED_KL_GATE].threshold)
    if FORCED_ABS_DLOGPROB_GATE in gates:
        metrics[k.PARITY_ABS_DLOGPROB_OVER_FLOOR] = over_floor(dlp_max, gates[FORCED_ABS_DLOGPROB_GATE].threshold)
    start = first_divergent_block(failing, passing, block)
    if start is not None:
        metrics[k.PARITY_FIRST_DIVERGENT_BLOCK] = float(start)
    return metrics
