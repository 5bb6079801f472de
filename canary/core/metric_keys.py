"""CheckResult.metrics keys that leave the process: the numbers canary/export/prometheus/schema.py exports.

One constant per key, imported by the check that writes it and by the schema that maps it to a
Prometheus metric, so a renamed key is a renamed constant on both sides. Units are in the key
(`_s` seconds, `_per_s` per second; KL and logprob keys are in nats; ratios are 0..1, but
`_over_floor` keys are multiples of a gate threshold). Checks report more numbers than these (the
load generator's counts, per-role startup times...): those stay in results.json only.

Import-light on purpose: checks, the load generator and the exporters all read it; it imports
nothing of canary.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- startup
READY_S_TOTAL = "ready_s_total"
"""Launch until every server of the cell was ready."""

# --------------------------------------------------------------------------- throughput
REQUESTS_PER_S = "requests_per_s"
OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
GOODPUT_REQUESTS_PER_S = "goodput_requests_per_s"
PAIRED_RATIO = "paired_ratio"
"""Paired verdict (checks.throughput.paired): candidate / baseline throughput, exp(mean log ratio)."""
PAIRED_RATIO_LOW = "paired_ratio_low"
"""Low end of the paired ratio's two-sided t interval (pass when >= 1 - margin)."""
PAIRED_RATIO_HIGH = "paired_ratio_high"
"""High end of the paired ratio's interval (regress when < 1 - margin)."""

# The SLO capacity search (checks.throughput.capacity, canary/load/capacity.py); only when it ran. An
# estimate or an interval end the search could not establish is left out (never 0).
CAPACITY_REQUESTS_PER_S = "capacity_requests_per_s"
"""The highest offered rate at which the SLO held (below every rate at which it did not)."""
CAPACITY_LOW_REQUESTS_PER_S = "capacity_low_requests_per_s"
"""The confident interval's lower end: the highest rate whose attainment's Wilson lower bound passed."""
CAPACITY_HIGH_REQUESTS_PER_S = "capacity_high_requests_per_s"
"""The confident interval's upper end: the lowest rate above it that confidently failed (or over-saturated)."""
CAPACITY_REQUESTS_USED = "capacity_requests_used"
"""Requests the search sent over all its probes: present whenever the search ran."""
CAPACITY_SECONDS_USED = "capacity_seconds_used"
"""Wall seconds of all the search's probes."""

# The disaggregation gain of a P/D cell (canary/judge/capacity_gain.py): its capacity over its
# aggregated control's scaled linearly to the pair's engine count. Unitless multiples (1: no gain).
DISAGG_GAIN = "disagg_gain"
DISAGG_GAIN_LOW = "disagg_gain_low"
DISAGG_GAIN_HIGH = "disagg_gain_high"
DISAGG_ENGINE_SCALE = "disagg_engine_scale"
"""The factor the control's capacity was multiplied by: the pair's engines (x tensor parallel) over the control's."""


EXPORTED_PERCENTILES: tuple[str, ...] = ("p50", "p90", "p99")
"""The latency statistics the exporters read (a `percentile` label value and the key's stat)."""


def latency_key(kind: str, stat: str) -> str:
    """A latency statistic: `<kind>_<stat>_s`, kind ttft/tpot/itl/e2e, stat mean/p50/p90/p99."""
    return f"{kind}_{stat}_s"


# --------------------------------------------------------------------------- throughput: where P/D time goes
PD_TIME_TERMS: tuple[str, ...] = (
    "router",
    "prefill_queue",
    "prefill_compute",
    "decode_wait",
    "kv_transfer",
    "handover",
    "first_decode_step",
    "decode",
)
"""The terms of a P/D request's time, in order (canary/checks/throughput/pdtime.py): all but the last
sum to the client's TTFT; `decode` is the rest of the request."""
PD_TIME_STATS: tuple[str, ...] = ("p50", "p90")
PD_TIME_REQUESTS = "pd_time_requests"
"""Measured requests joined across client, prefill and decode without a problem."""
PD_TIME_RECOMPUTED = "pd_time_recomputed_requests"
"""Of those, requests decode computed the prompt for instead of reading its KV (recompute fallback)."""
PD_TIME_KV_BYTES_P50 = "pd_time_kv_bytes_p50"
"""Median KV bytes one request's read moved (NIXL telemetry); results.json and history only."""


def pd_time_key(term: str, stat: str) -> str:
    """A P/D time term's statistic: `pd_time_<term>_<stat>_s`."""
    return f"pd_time_{term}_{stat}_s"


# --------------------------------------------------------------------------- throughput: prefix-cache hits
PREFIX_CACHE_ROLES: tuple[str, ...] = ("prefill", "decode", "aggregated")
"""The engine roles whose prefix-cache counters the throughput check reads (canary/checks/throughput/prefixcache.py)."""
PREFIX_CACHE_HIT_RATE = "hit_rate"
"""Of the tokens an engine looked up in its own prefix cache during the load, the share it found (0..1)."""


def prefix_cache_key(stat: str, role: str) -> str:
    """An engine's prefix-cache number over the load: `prefix_cache_<stat>_<role>`, stat queried_tokens,
    hit_tokens or hit_rate (exported: hit_rate)."""
    return f"prefix_cache_{stat}_{role}"


# --------------------------------------------------------------------------- accuracy
ACCURACY = "accuracy"
ACCURACY_WILSON_LOW = "accuracy_wilson_low"
ACCURACY_WILSON_HIGH = "accuracy_wilson_high"
ACCURACY_THRESHOLD = "accuracy_threshold"
QUESTIONS = "questions"
MCNEMAR_P_VALUE = "mcnemar_p_value"

# --------------------------------------------------------------------------- kv_transfer
NIXL_BYTES_TRANSFERRED = "nixl_bytes_transferred"
NIXL_FAILED_TRANSFERS = "nixl_failed_transfers"
DECODE_RECOMPUTED_TOKEN_SHARE = "decode_recomputed_token_share"

# --------------------------------------------------------------------------- parity (KV fidelity)
PARITY_MATCH_RATE = "parity_match_rate"
"""P/D: share of evidence prompts whose greedy tokens equal the control's."""
PARITY_FIRST_DIFF_MIN = "parity_first_diff_min"
"""P/D: the earliest output position whose token differs from the control's (max_tokens: none)."""
PARITY_PROMPTS = "parity_prompts"
"""Prompts measured (evidence or not)."""
PARITY_EVIDENCE_PROMPTS = "parity_evidence_prompts"
"""Prompts whose output depends on their first block (the others prove nothing)."""
PARITY_REJECTED_PROMPTS = "parity_rejected_prompts"
"""Prompts rejected as evidence (altering the first block changed nothing)."""
PARITY_KL_MAX = "parity_kl_max"
"""P/D: largest per-position top-k KL estimate, P/D generation vs the control's teacher-forced scoring."""
PARITY_KL_MEAN = "parity_kl_mean"
"""P/D: mean per-position KL estimate over every compared position of every evidence prompt."""
PARITY_ABS_DLOGPROB_MAX = "parity_abs_dlogprob_max"
"""P/D: largest |delta logprob| of a P/D token under the control."""
PARITY_TOP1_AGREE_MIN = "parity_top1_agree_min"
"""P/D: lowest per-prompt share of positions whose argmax agrees with the control's."""
PARITY_NULL_KL_MAX = "parity_null_kl_max"
"""Noise floor: largest KL of the control against itself (the null arm the gates use)."""
PARITY_NULL_ABS_DLOGPROB_MAX = "parity_null_abs_dlogprob_max"
"""Noise floor: largest |delta logprob| of the control against itself."""
PARITY_NULL_TOKEN_FLIPS = "parity_null_token_flips"
"""Noise floor: null comparisons whose greedy tokens differ (aggregated cells)."""
PARITY_KL_OVER_FLOOR = "parity_kl_over_floor"
"""P/D: largest KL over the KL gate's threshold (margin x null floor + tolerance); above 1 a prompt
exceeds the engine's own noise."""
PARITY_ABS_DLOGPROB_OVER_FLOOR = "parity_abs_dlogprob_over_floor"
"""P/D: largest |delta logprob| over its gate's threshold."""
PARITY_FAILING_PROMPTS = "parity_failing_prompts"
"""P/D: evidence prompts beyond the noise floor."""
PARITY_FIRST_DIVERGENT_BLOCK = "parity_first_divergent_block"
"""P/D: the earliest KV block (1-based, of the cell's smaller logical block size) the divergence can
start at, from the prompt lengths that match and fail (canary.checks.parity.gates.first_divergent_block);
only when prompts fail in a block-position pattern."""
PARITY_DRIFT_PROMPTS = "parity_drift_prompts"
"""Candidate image: prompts compared with the baseline image's control."""
PARITY_DRIFT_TOKEN_FLIPS = "parity_drift_token_flips"
"""Candidate image: prompts whose greedy tokens differ from the baseline image's."""
PARITY_DRIFT_KL_MAX = "parity_drift_kl_max"
"""Candidate image: largest KL estimate against the baseline image's generation."""
PARITY_DRIFT_ABS_DLOGPROB_MAX = "parity_drift_abs_dlogprob_max"
"""Candidate image: largest |delta logprob| against the baseline image."""
PARITY_DRIFT_FIRST_DIFF_MIN = "parity_drift_first_diff_min"
"""Candidate image: the earliest output position that differs from the baseline image's."""
PARITY_DRIFT_KL_OVER_FLOOR = "parity_drift_kl_over_floor"
"""Candidate image: largest drift KL over the drift KL gate's threshold (both images' null arms)."""
PARITY_DRIFT_FAILED_GATES = "parity_drift_failed_gates"
"""Candidate image: drift gates that failed (0: within both images' noise)."""

# Parity under load (the throughput check's sub-result, canary/checks/throughput/loadparity.py).
LOAD_PARITY_STATUS = "load_parity_status_code"
"""The sub-verdict's code (canary.judge.verdicts.VERDICT_CODES: 0 pass, higher is worse)."""
LOAD_PARITY_SAMPLES = "load_parity_samples"
"""Parity samples that ran entirely inside the load run and were judged (evidence prompts)."""
LOAD_PARITY_MATCH_RATE = "load_parity_match_rate"
"""Share of those samples whose greedy tokens equal the control's reference."""
LOAD_PARITY_FAILING = "load_parity_failing_samples"
"""Samples beyond the null floor (P/D cells)."""
LOAD_PARITY_KL_OVER_FLOOR = "load_parity_kl_over_floor"
"""P/D: largest teacher-forced KL of a sample over its gate's threshold (above 1: beyond the noise)."""
LOAD_PARITY_NULL_SAMPLES = "load_parity_null_samples"
"""Samples of the null arm under load (the control's own samples, judged against its reference)."""
LOAD_PARITY_NULL_TOKEN_FLIPS = "load_parity_null_token_flips"
"""Null arm under load: the control's samples whose greedy tokens differ from its own reference."""
LOAD_PARITY_SECONDS = "load_parity_seconds"
"""Wall seconds the sub-result added to the check (reference, rescoring; the samples ride inside the load)."""
