"""The throughput check's exported metrics (load, latency, paired verdict, capacity, P/D time, prefix cache,
parity under load): Prometheus name, help, unit and the CheckResult.metrics key each reads."""

from __future__ import annotations

from canary.core import metric_keys as k
from canary.core.metric_spec import Exported, MetricSpec, cell_metric
from canary.judge.results import LATENCIES

REQUESTS_PER_S = cell_metric(
    "throughput_requests_per_second", "Completed requests per second under load (median of repeats)."
)
OUTPUT_TOKENS_PER_S = cell_metric(
    "throughput_output_tokens_per_second", "Output tokens per second under load (median of repeats)."
)
GOODPUT_PER_S = cell_metric("goodput_requests_per_second", "Requests per second that met every configured SLO.")
PAIRED_RATIO = cell_metric(
    "throughput_paired_ratio",
    "Paired verdict: candidate / baseline throughput measured in alternating windows (checks.throughput.paired).",
    "ratio",
)
PAIRED_RATIO_LOW = cell_metric(
    "throughput_paired_lower_ratio", "Low end of the paired ratio's t interval (pass when >= 1 - margin).", "ratio"
)
PAIRED_RATIO_HIGH = cell_metric(
    "throughput_paired_upper_ratio", "High end of the paired ratio's t interval (regress when < 1 - margin).", "ratio"
)
# The SLO capacity search (checks.throughput.capacity, off by default; docs/methodology/capacity.md).
# A bound the search could not establish has no series (never 0): with canary_capacity_search_requests
# present (the search ran), a missing estimate means no rate held, a missing lower end "below the
# lowest rate probed", a missing upper end "above the highest".
CAPACITY = cell_metric(
    "capacity_requests_per_second",
    "SLO capacity: the open-loop request rate at which the capacity SLO's attainment crosses its target "
    "(the probes' fitted crossing, else the highest rate that held; checks.throughput.capacity); no series when "
    "no rate held.",
)
CAPACITY_LOW = cell_metric(
    "capacity_lower_requests_per_second",
    "Lower end of the SLO capacity's interval (the fitted crossing's Fieller interval, else the highest rate "
    "whose probes up to the lowest failing one confidently met the target together); no series when nothing "
    "bounds it below.",
)
CAPACITY_HIGH = cell_metric(
    "capacity_upper_requests_per_second",
    "Upper end of the SLO capacity's interval (the fitted crossing's Fieller interval, else the lowest rate "
    "above every passing one that over-saturated or whose probes confidently failed together); no series when "
    "nothing bounds it above.",
)
CAPACITY_REQUESTS = cell_metric(
    "capacity_search_requests", "Requests the SLO capacity search sent over all its probes (present when it ran)."
)
CAPACITY_SECONDS = cell_metric("capacity_search_seconds", "Wall time of the SLO capacity search's probes.", "seconds")
DISAGG_GAIN = cell_metric(
    "disagg_gain",
    "Disaggregation gain of a P/D cell: its SLO capacity over its aggregated control's scaled linearly to the "
    "pair's engine count (canary_disagg_engine_scale; no such aggregated deployment is measured); 1: no gain.",
)
DISAGG_GAIN_LOW = cell_metric(
    "disagg_gain_lower",
    "Lower end of the disaggregation gain's interval (P/D lower end over the scaled control's upper end); no "
    "series when an end is missing.",
)
DISAGG_GAIN_HIGH = cell_metric(
    "disagg_gain_upper",
    "Upper end of the disaggregation gain's interval (P/D upper end over the scaled control's lower end); no "
    "series when an end is missing.",
)
DISAGG_ENGINE_SCALE = cell_metric(
    "disagg_engine_scale",
    "The factor a P/D cell's control capacity is multiplied by for its disaggregation gain: engines x tensor "
    "parallel of the pair over the control's (linear-scaling assumption).",
)
LATENCY: dict[str, MetricSpec] = {
    "ttft": cell_metric("ttft_seconds", "Time to first token under load, by percentile.", "seconds", "percentile"),
    "tpot": cell_metric(
        "tpot_seconds", "Time per output token (after the first) under load, by percentile.", "seconds", "percentile"
    ),
    "itl": cell_metric("itl_seconds", "Inter-token latency under load, by percentile.", "seconds", "percentile"),
    "e2e": cell_metric(
        "e2e_latency_seconds", "End-to-end request latency under load, by percentile.", "seconds", "percentile"
    ),
}
PD_TIME = cell_metric(
    "pd_time_seconds",
    "Where a P/D cell's request time goes under load, by term (router, prefill_queue, prefill_compute, "
    "decode_wait, kv_transfer, handover, first_decode_step: they sum to the TTFT; decode: the rest) and "
    "percentile (p50, p90) over the measured requests (client, router and both engines joined per request).",
    "seconds",
    "term",
    "percentile",
)
PD_TIME_REQUESTS = cell_metric(
    "pd_time_requests", "Measured requests of a P/D cell joined across client, prefill and decode for pd_time."
)
PD_TIME_RECOMPUTED = cell_metric(
    "pd_time_recomputed_requests",
    "Of the joined requests of a P/D cell, those decode computed the prompt for instead of reading its KV.",
)
PREFIX_CACHE_HIT = cell_metric(
    "prefix_cache_hit_ratio",
    "Of the prompt tokens an engine of the cell (role: prefill, decode, aggregated) looked up in its own prefix "
    "cache during the throughput check's load, the share it found (vllm:prefix_cache_hits / queries growth); no "
    "series when the engine exports no such counter or nothing was queried.",
    "ratio",
    "role",
)
# Parity under load (the throughput check's sub-result, canary/checks/throughput/loadparity.py,
# docs/methodology/load-parity.md): per cell, no prompt in any label.
LOAD_PARITY_STATUS = cell_metric(
    "load_parity_status_code",
    "Parity under load, the throughput check's sub-verdict as a number (as canary_cell_status_code): 0 the "
    "samples inside the load agree within the null floor, 7 beyond it, 4 too few samples inside the load.",
)
LOAD_PARITY_SAMPLES = cell_metric(
    "load_parity_samples", "Greedy parity samples that ran entirely inside the load run and were judged."
)
LOAD_PARITY_MATCH = cell_metric(
    "load_parity_match_ratio",
    "Share of the samples under load whose greedy tokens equal the control's reference (1 = identical).",
    "ratio",
)
LOAD_PARITY_FAILING = cell_metric(
    "load_parity_failing_samples", "P/D samples under load beyond the null floor (the parity check's gates)."
)
LOAD_PARITY_KL_OVER_FLOOR = cell_metric(
    "load_parity_kl_over_floor",
    "A P/D cell's largest teacher-forced KL of a sample under load as a multiple of its gate's threshold (above 1: "
    "beyond the noise floor).",
)
LOAD_PARITY_NULL_SAMPLES = cell_metric(
    "load_parity_null_samples", "The null arm under load: the control's own samples compared with its reference."
)
LOAD_PARITY_NULL_TOKEN_FLIPS = cell_metric(
    "load_parity_null_token_flips",
    "Null arm under load: the control's samples whose greedy tokens differ from its own reference (batch-dependent "
    "numerics of an honest engine).",
)
LOAD_PARITY_SECONDS = cell_metric(
    "load_parity_duration_seconds",
    "Seconds parity under load added to the throughput check (reference and re-scoring; the samples ride the load).",
    "seconds",
)
LOAD_PARITY_METRICS: tuple[tuple[MetricSpec, str], ...] = (
    (LOAD_PARITY_STATUS, k.LOAD_PARITY_STATUS),
    (LOAD_PARITY_SAMPLES, k.LOAD_PARITY_SAMPLES),
    (LOAD_PARITY_MATCH, k.LOAD_PARITY_MATCH_RATE),
    (LOAD_PARITY_FAILING, k.LOAD_PARITY_FAILING),
    (LOAD_PARITY_KL_OVER_FLOOR, k.LOAD_PARITY_KL_OVER_FLOOR),
    (LOAD_PARITY_NULL_SAMPLES, k.LOAD_PARITY_NULL_SAMPLES),
    (LOAD_PARITY_NULL_TOKEN_FLIPS, k.LOAD_PARITY_NULL_TOKEN_FLIPS),
    (LOAD_PARITY_SECONDS, k.LOAD_PARITY_SECONDS),
)

EXPORTED: tuple[Exported, ...] = (
    Exported(REQUESTS_PER_S, k.REQUESTS_PER_S),
    Exported(OUTPUT_TOKENS_PER_S, k.OUTPUT_TOKENS_PER_S),
    Exported(GOODPUT_PER_S, k.GOODPUT_REQUESTS_PER_S),
    Exported(PAIRED_RATIO, k.PAIRED_RATIO),
    Exported(PAIRED_RATIO_LOW, k.PAIRED_RATIO_LOW),
    Exported(PAIRED_RATIO_HIGH, k.PAIRED_RATIO_HIGH),
    *(
        Exported(LATENCY[kind], k.latency_key(kind, pct), (("percentile", pct),))
        for kind in LATENCIES
        for pct in k.EXPORTED_PERCENTILES
    ),
    Exported(CAPACITY, k.CAPACITY_REQUESTS_PER_S),
    Exported(CAPACITY_LOW, k.CAPACITY_LOW_REQUESTS_PER_S),
    Exported(CAPACITY_HIGH, k.CAPACITY_HIGH_REQUESTS_PER_S),
    Exported(CAPACITY_REQUESTS, k.CAPACITY_REQUESTS_USED),
    Exported(CAPACITY_SECONDS, k.CAPACITY_SECONDS_USED),
    Exported(DISAGG_GAIN, k.DISAGG_GAIN),
    Exported(DISAGG_GAIN_LOW, k.DISAGG_GAIN_LOW),
    Exported(DISAGG_GAIN_HIGH, k.DISAGG_GAIN_HIGH),
    Exported(DISAGG_ENGINE_SCALE, k.DISAGG_ENGINE_SCALE),
    *(
        Exported(PD_TIME, k.pd_time_key(term, stat), (("term", term), ("percentile", stat)))
        for term in k.PD_TIME_TERMS
        for stat in k.PD_TIME_STATS
    ),
    Exported(PD_TIME_REQUESTS, k.PD_TIME_REQUESTS),
    Exported(PD_TIME_RECOMPUTED, k.PD_TIME_RECOMPUTED),
    *(
        Exported(PREFIX_CACHE_HIT, k.prefix_cache_key(k.PREFIX_CACHE_HIT_RATE, role), (("role", role),))
        for role in k.PREFIX_CACHE_ROLES
    ),
    *(Exported(spec, key) for spec, key in LOAD_PARITY_METRICS),
)
"""What this check exports, in order (its `register(metrics=...)`)."""
