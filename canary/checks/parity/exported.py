"""The parity check's exported metrics: Prometheus name, help, unit and the CheckResult.metrics key each reads."""

from __future__ import annotations

from canary.core import metric_keys as k
from canary.core.metric_spec import Exported, MetricSpec, cell_metric

PARITY = cell_metric(
    "parity_match_ratio",
    "Share of a P/D cell's evidence prompts whose greedy tokens equal its aggregated control's (1 = identical).",
    "ratio",
)
# KV fidelity (canary/checks/parity/check.py, docs/methodology/parity.md):
# per cell, never per prompt (prompt ids and text stay in results.json).
PARITY_KL_MAX = cell_metric(
    "parity_kl_max_nats",
    "Largest per-position top-k KL estimate of a P/D cell's output under its control (teacher-forced), in nats.",
    "nats",
)
PARITY_KL_MEAN = cell_metric(
    "parity_kl_mean_nats",
    "Mean per-position top-k KL estimate of a P/D cell's output under its control over every evidence prompt.",
    "nats",
)
PARITY_ABS_DLOGPROB_MAX = cell_metric(
    "parity_abs_dlogprob_max_nats",
    "Largest absolute logprob difference of a P/D cell's generated token between the P/D cell and its control.",
    "nats",
)
PARITY_TOP1_AGREE_MIN = cell_metric(
    "parity_top1_agreement_min_ratio",
    "Lowest share, over a P/D cell's evidence prompts, of output positions whose argmax agrees with the control's.",
    "ratio",
)
PARITY_NULL_KL_MAX = cell_metric(
    "parity_null_kl_max_nats",
    "Noise floor: largest KL of the control against itself (another batch composition, a prefix-cache hit, "
    "teacher-forced scoring) that the cell's gates compare with.",
    "nats",
)
PARITY_NULL_ABS_DLOGPROB_MAX = cell_metric(
    "parity_null_abs_dlogprob_max_nats",
    "Noise floor: largest absolute logprob difference of the control against itself.",
    "nats",
)
PARITY_NULL_TOKEN_FLIPS = cell_metric(
    "parity_null_token_flips", "Noise floor: null comparisons of an aggregated control whose greedy tokens differ."
)
PARITY_KL_OVER_FLOOR = cell_metric(
    "parity_kl_over_floor",
    "A P/D cell's largest KL as a multiple of its gate's threshold (margin x null floor + tolerance): above 1, "
    "a prompt exceeds the engine's own noise.",
)
PARITY_ABS_DLOGPROB_OVER_FLOOR = cell_metric(
    "parity_abs_dlogprob_over_floor",
    "A P/D cell's largest absolute logprob difference as a multiple of its gate's threshold (above 1: beyond "
    "the noise).",
)
PARITY_FAILING_PROMPTS = cell_metric("parity_failing_prompts", "Evidence prompts of a P/D cell beyond the noise floor.")
PARITY_FIRST_DIVERGENT_BLOCK = cell_metric(
    "parity_first_divergent_block",
    "The earliest KV block (1-based, in blocks of the cell's smaller logical block size) a P/D cell's divergence "
    "can start at, from the prompt lengths that match and fail; only when they fail in a block-position pattern.",
)
PARITY_FIRST_DIFF = cell_metric(
    "parity_first_diff_position",
    "Earliest output position whose greedy token differs from the control's (max_tokens when none does).",
)
PARITY_PROMPTS = cell_metric("parity_prompts", "Parity prompts measured, evidence or not.")
PARITY_EVIDENCE_PROMPTS = cell_metric(
    "parity_evidence_prompts", "Parity prompts whose output depends on their first block: the evidence."
)
PARITY_REJECTED_PROMPTS = cell_metric(
    "parity_rejected_prompts",
    "Parity prompts rejected as evidence (altering their first block changed nothing beyond the noise).",
)
PARITY_DRIFT_PROMPTS = cell_metric(
    "parity_drift_prompts", "Prompts a candidate image's control compared with the same cell on the baseline image."
)
PARITY_DRIFT_TOKEN_FLIPS = cell_metric(
    "parity_drift_token_flips", "Prompts whose greedy tokens on the candidate image differ from the baseline image's."
)
PARITY_DRIFT_KL_MAX = cell_metric(
    "parity_drift_kl_max_nats",
    "Largest per-position KL estimate of a candidate image's control against the baseline image's.",
    "nats",
)
PARITY_DRIFT_ABS_DLOGPROB_MAX = cell_metric(
    "parity_drift_abs_dlogprob_max_nats",
    "Largest absolute logprob difference of a candidate image's control against the baseline image's.",
    "nats",
)
PARITY_DRIFT_FIRST_DIFF = cell_metric(
    "parity_drift_first_diff_position",
    "Earliest output position that differs between the candidate and the baseline image (max_tokens: none).",
)
PARITY_DRIFT_KL_OVER_FLOOR = cell_metric(
    "parity_drift_kl_over_floor",
    "A candidate image's largest drift KL as a multiple of the drift gate's threshold (margin x both images' "
    "null floor + tolerance).",
)
PARITY_DRIFT_FAILED_GATES = cell_metric(
    "parity_drift_failed_gates",
    "Drift gates of a candidate image's control that failed against the baseline image (0: within the noise).",
)

# The parity check's numbers (canary/checks/parity/metrics.py, parity_drift.py), every one exported.
PARITY_METRICS: tuple[tuple[MetricSpec, str], ...] = (
    (PARITY, k.PARITY_MATCH_RATE),
    (PARITY_KL_MAX, k.PARITY_KL_MAX),
    (PARITY_KL_MEAN, k.PARITY_KL_MEAN),
    (PARITY_ABS_DLOGPROB_MAX, k.PARITY_ABS_DLOGPROB_MAX),
    (PARITY_TOP1_AGREE_MIN, k.PARITY_TOP1_AGREE_MIN),
    (PARITY_NULL_KL_MAX, k.PARITY_NULL_KL_MAX),
    (PARITY_NULL_ABS_DLOGPROB_MAX, k.PARITY_NULL_ABS_DLOGPROB_MAX),
    (PARITY_NULL_TOKEN_FLIPS, k.PARITY_NULL_TOKEN_FLIPS),
    (PARITY_KL_OVER_FLOOR, k.PARITY_KL_OVER_FLOOR),
    (PARITY_ABS_DLOGPROB_OVER_FLOOR, k.PARITY_ABS_DLOGPROB_OVER_FLOOR),
    (PARITY_FAILING_PROMPTS, k.PARITY_FAILING_PROMPTS),
    (PARITY_FIRST_DIVERGENT_BLOCK, k.PARITY_FIRST_DIVERGENT_BLOCK),
    (PARITY_FIRST_DIFF, k.PARITY_FIRST_DIFF_MIN),
    (PARITY_PROMPTS, k.PARITY_PROMPTS),
    (PARITY_EVIDENCE_PROMPTS, k.PARITY_EVIDENCE_PROMPTS),
    (PARITY_REJECTED_PROMPTS, k.PARITY_REJECTED_PROMPTS),
    (PARITY_DRIFT_PROMPTS, k.PARITY_DRIFT_PROMPTS),
    (PARITY_DRIFT_TOKEN_FLIPS, k.PARITY_DRIFT_TOKEN_FLIPS),
    (PARITY_DRIFT_KL_MAX, k.PARITY_DRIFT_KL_MAX),
    (PARITY_DRIFT_ABS_DLOGPROB_MAX, k.PARITY_DRIFT_ABS_DLOGPROB_MAX),
    (PARITY_DRIFT_FIRST_DIFF, k.PARITY_DRIFT_FIRST_DIFF_MIN),
    (PARITY_DRIFT_KL_OVER_FLOOR, k.PARITY_DRIFT_KL_OVER_FLOOR),
    (PARITY_DRIFT_FAILED_GATES, k.PARITY_DRIFT_FAILED_GATES),
)

EXPORTED: tuple[Exported, ...] = (*(Exported(spec, key) for spec, key in PARITY_METRICS),)
"""What this check exports, in order (its `register(metrics=...)`)."""
