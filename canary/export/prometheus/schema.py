"""The Prometheus metric schema of the canary, defined once.

Every exporter (Pushgateway, node-exporter textfile, `canary serve-metrics`), the Grafana
dashboards (canary/export/prometheus/dashboards.py) and the alert rules (configs/alerts/canary-rules.yaml, checked
against this module by tests) use the names, help texts, units and labels below.

All metrics are gauges: a run is a snapshot, and the whole run replaces the previous one.

Labels
------
Cell metrics carry the cell's coordinates (``CELL_LABELS``), taken from ``canary.plan.cell.Cell``:

==================  ==========================================================================
label               value
==================  ==========================================================================
cell                the cell id, e.g. ``pd.cpu_attn.p32-d64.auto.v1.baseline``
model               served model name
backend             attention backend asked for (``FLASHINFER``)
prefill_block_size  ``--block-size`` of prefill (or of the aggregated server)
decode_block_size   ``--block-size`` of decode (== prefill when aggregated)
kernel_block_size   kernel block(s) the backend runs with: ``64``, ``64/64`` for P/D, ``-`` none
kv_cache_dtype      ``--kv-cache-dtype``
runner              model runner ``v1`` / ``v2``
topology            ``aggregated`` / ``pd-nixl``
image               image key of the config (``baseline``, ``patched``)
==================  ==========================================================================

plus, where relevant: ``check`` (startup, parity, accuracy, throughput, kv_transfer, deploy),
``verdict`` (one of the 8 verdicts), ``percentile`` (p50, p90, p99), ``term`` (a term of
``canary_pd_time_seconds``), ``role`` (an engine of the cell: prefill, decode, aggregated),
``risk`` (a risk flag of the planner) and ``failure_class`` (a name of the failure-signature catalog, ``unclassified``
otherwise). Run metrics carry
``config``, ``platform``, ``target``, ``canary_version`` (``canary_run_info``) and
``image``, ``image_ref``, ``baseline`` (``canary_image_info``). The Pushgateway adds its grouping
key ``job`` and ``scope``; no metric defines labels of those names (the grouping key would
silently override them).

Cardinality
-----------
Bounded by the config, never by time: there is no run id, timestamp, URL or free text in any
label (the parity metrics are per cell: no prompt text, length or fingerprint in any label). A run
exposes at most ``SERIES_PER_CELL`` (123) series per cell plus ~15 run series: the CPU default
(10 cells) < 1250 series, a 500-cell GPU matrix < 62k (a cell has only its topology's share: P/D
cells no drift series, aggregated cells no P/D fidelity, P/D time or gain series). Every push replaces the whole
group, so series of cells no longer in the matrix disappear with the next run. ``verdict`` and
``failure_class`` series exist only for the current value (one series per cell), so a change of
verdict does not leave a second live series behind.

Where the numbers come from
---------------------------
Check results carry numbers in ``CheckResult.metrics`` under the keys of ``CHECK_METRIC_KEYS``:
constants of ``canary.core.metric_keys``, which the checks write with (unit in the key: ``_s`` seconds,
``_per_s`` per second, ratios in 0..1, bytes as counts; KL and logprobs in nats). A key that a
check does not report produces no series; a NaN or infinite value produces none either.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from canary.core import metric_keys as k
from canary.export.history.tracked import TRACKED, TRACKED_CHECK
from canary.judge import verdicts
from canary.judge.results import LATENCIES as LATENCIES
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.plan.cell import RISKS, Cell

PREFIX = "canary_"

CELL_LABELS: tuple[str, ...] = (
    "cell",
    "model",
    "backend",
    "prefill_block_size",
    "decode_block_size",
    "kernel_block_size",
    "kv_cache_dtype",
    "runner",
    "topology",
    "image",
)
RUN_LABELS: tuple[str, ...] = ("config", "platform", "target", "canary_version")
IMAGE_LABELS: tuple[str, ...] = ("image", "image_ref", "baseline")
# Labels the Pushgateway's grouping key owns: no metric may define them.
RESERVED_LABELS = frozenset({"job", "scope", "instance"})

# Numeric status of a verdict, for heatmaps (Grafana value mappings): 0 pass, higher is worse.
# Codes, outcome classes and their order come from the one verdict table (canary.judge.verdicts).
VERDICT_CODES: dict[str, int] = verdicts.VERDICT_CODES
# Verdicts that keep a run from passing; those that page (CanaryCellFailing); those that say the
# canary could not measure (CanaryRunInconclusive reads the run outcome instead).
FAILING_VERDICT_REGEX = verdicts.regex(verdicts.FAILING_VERDICTS)
DEFINITIVE_FAILURE_REGEX = verdicts.regex(verdicts.DEFINITIVE_FAILURES)
INCONCLUSIVE_VERDICT_REGEX = verdicts.regex(verdicts.INCONCLUSIVE_VERDICTS)

# Latency percentiles: label value -> CheckResult.metrics key infix. The label is not called
# `quantile`: Prometheus reserves that for summaries (promtool check metrics).
PERCENTILES: tuple[str, ...] = k.EXPORTED_PERCENTILES

_FAILURE_CLASS = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass(frozen=True)
class MetricSpec:
    """One metric: name (unit suffix included), help, unit and label names."""

    name: str
    help: str
    unit: str
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX):
            raise ValueError(f"{self.name}: metric names start with {PREFIX}")
        if self.unit and not self.name.endswith(f"_{self.unit}"):
            raise ValueError(f"{self.name}: the name must end with its unit _{self.unit}")
        if RESERVED_LABELS & set(self.labels):
            raise ValueError(f"{self.name}: labels {sorted(RESERVED_LABELS & set(self.labels))} are reserved")


@dataclass(frozen=True)
class CheckMetric:
    """Where a metric's value comes from: CheckResult.metrics[key] of check `check`."""

    spec: MetricSpec
    check: str
    key: str
    extra: tuple[tuple[str, str], ...] = field(default=())


def _cell(name: str, help_text: str, unit: str = "", *extra: str) -> MetricSpec:
    return MetricSpec(PREFIX + name, help_text, unit, (*CELL_LABELS, *extra))


# --------------------------------------------------------------------------- the metrics

CELL_VERDICT = _cell("cell_verdict", "1 for the cell's verdict in the last run (label verdict).", "", "verdict")
CELL_STATUS = _cell(
    "cell_status_code",
    "The cell's verdict as a number ("
    + ", ".join(f"{code} {verdict}" for verdict, code in VERDICT_CODES.items())
    + "): higher is worse.",
)
CELL_RISK = _cell(
    "cell_risk_info",
    "1 per risk flag the planner gave the cell (label risk: "
    + ", ".join(RISKS)
    + "); a cell without one has no series.",
    "",
    "risk",
)
CELL_DURATION = _cell("cell_duration_seconds", "Wall time of the cell: deploy, checks, teardown.", "seconds")
CHECK_VERDICT = _cell(
    "check_verdict", "1 for a check's verdict on the cell (labels check, verdict).", "", "check", "verdict"
)
CHECK_STATUS = _cell("check_status_code", "A check's verdict as a number (as canary_cell_status_code).", "", "check")
CHECK_DURATION = _cell("check_duration_seconds", "Wall time of a check.", "seconds", "check")
STARTUP_SECONDS = _cell(
    "startup_duration_seconds", "Time from launch until every server of the cell was ready.", "seconds"
)
STARTUP_FAILURE = _cell(
    "startup_failure_info",
    "1 when the cell failed to start; failure_class names the known signature.",
    "",
    "failure_class",
)
REQUESTS_PER_S = _cell(
    "throughput_requests_per_second", "Completed requests per second under load (median of repeats)."
)
OUTPUT_TOKENS_PER_S = _cell(
    "throughput_output_tokens_per_second", "Output tokens per second under load (median of repeats)."
)
GOODPUT_PER_S = _cell("goodput_requests_per_second", "Requests per second that met every configured SLO.")
PAIRED_RATIO = _cell(
    "throughput_paired_ratio",
    "Paired verdict: candidate / baseline throughput measured in alternating windows (checks.throughput.paired).",
    "ratio",
)
PAIRED_RATIO_LOW = _cell(
    "throughput_paired_lower_ratio", "Low end of the paired ratio's t interval (pass when >= 1 - margin).", "ratio"
)
PAIRED_RATIO_HIGH = _cell(
    "throughput_paired_upper_ratio", "High end of the paired ratio's t interval (regress when < 1 - margin).", "ratio"
)
# The SLO capacity search (checks.throughput.capacity, off by default; docs/methodology/capacity.md).
# A bound the search could not establish has no series (never 0): with canary_capacity_search_requests
# present (the search ran), a missing estimate means no rate held, a missing lower end "below the
# lowest rate probed", a missing upper end "above the highest".
CAPACITY = _cell(
    "capacity_requests_per_second",
    "SLO capacity: the open-loop request rate at which the capacity SLO's attainment crosses its target "
    "(the probes' fitted crossing, else the highest rate that held; checks.throughput.capacity); no series when "
    "no rate held.",
)
CAPACITY_LOW = _cell(
    "capacity_lower_requests_per_second",
    "Lower end of the SLO capacity's interval (the fitted crossing's Fieller interval, else the highest rate "
    "whose probes up to the lowest failing one confidently met the target together); no series when nothing "
    "bounds it below.",
)
CAPACITY_HIGH = _cell(
    "capacity_upper_requests_per_second",
    "Upper end of the SLO capacity's interval (the fitted crossing's Fieller interval, else the lowest rate "
    "above every passing one that over-saturated or whose probes confidently failed together); no series when "
    "nothing bounds it above.",
)
CAPACITY_REQUESTS = _cell(
    "capacity_search_requests", "Requests the SLO capacity search sent over all its probes (present when it ran)."
)
CAPACITY_SECONDS = _cell("capacity_search_seconds", "Wall time of the SLO capacity search's probes.", "seconds")
DISAGG_GAIN = _cell(
    "disagg_gain",
    "Disaggregation gain of a P/D cell: its SLO capacity over its aggregated control's scaled linearly to the "
    "pair's engine count (canary_disagg_engine_scale; no such aggregated deployment is measured); 1: no gain.",
)
DISAGG_GAIN_LOW = _cell(
    "disagg_gain_lower",
    "Lower end of the disaggregation gain's interval (P/D lower end over the scaled control's upper end); no "
    "series when an end is missing.",
)
DISAGG_GAIN_HIGH = _cell(
    "disagg_gain_upper",
    "Upper end of the disaggregation gain's interval (P/D upper end over the scaled control's lower end); no "
    "series when an end is missing.",
)
DISAGG_ENGINE_SCALE = _cell(
    "disagg_engine_scale",
    "The factor a P/D cell's control capacity is multiplied by for its disaggregation gain: engines x tensor "
    "parallel of the pair over the control's (linear-scaling assumption).",
)
LATENCY: dict[str, MetricSpec] = {
    "ttft": _cell("ttft_seconds", "Time to first token under load, by percentile.", "seconds", "percentile"),
    "tpot": _cell(
        "tpot_seconds", "Time per output token (after the first) under load, by percentile.", "seconds", "percentile"
    ),
    "itl": _cell("itl_seconds", "Inter-token latency under load, by percentile.", "seconds", "percentile"),
    "e2e": _cell(
        "e2e_latency_seconds", "End-to-end request latency under load, by percentile.", "seconds", "percentile"
    ),
}
PD_TIME = _cell(
    "pd_time_seconds",
    "Where a P/D cell's request time goes under load, by term (router, prefill_queue, prefill_compute, "
    "decode_wait, kv_transfer, handover, first_decode_step: they sum to the TTFT; decode: the rest) and "
    "percentile (p50, p90) over the measured requests (client, router and both engines joined per request).",
    "seconds",
    "term",
    "percentile",
)
PD_TIME_REQUESTS = _cell(
    "pd_time_requests", "Measured requests of a P/D cell joined across client, prefill and decode for pd_time."
)
PD_TIME_RECOMPUTED = _cell(
    "pd_time_recomputed_requests",
    "Of the joined requests of a P/D cell, those decode computed the prompt for instead of reading its KV.",
)
PREFIX_CACHE_HIT = _cell(
    "prefix_cache_hit_ratio",
    "Of the prompt tokens an engine of the cell (role: prefill, decode, aggregated) looked up in its own prefix "
    "cache during the throughput check's load, the share it found (vllm:prefix_cache_hits / queries growth); no "
    "series when the engine exports no such counter or nothing was queried.",
    "ratio",
    "role",
)
ACCURACY = _cell(
    "gsm8k_accuracy_ratio", "GSM8K exact-match accuracy (flexible extract) of the questions evaluated.", "ratio"
)
ACCURACY_LOW = _cell(
    "gsm8k_accuracy_wilson_lower_ratio", "Lower bound of the Wilson interval of GSM8K accuracy.", "ratio"
)
ACCURACY_HIGH = _cell(
    "gsm8k_accuracy_wilson_upper_ratio", "Upper bound of the Wilson interval of GSM8K accuracy.", "ratio"
)
ACCURACY_THRESHOLD = _cell(
    "gsm8k_accuracy_threshold_ratio",
    "The absolute accuracy gate: a cell fails when its Wilson upper bound is below it.",
    "ratio",
)
ACCURACY_PAIRED_P = _cell(
    "gsm8k_paired_p_value",
    "Exact McNemar p-value of a P/D cell against its aggregated control on the same questions.",
)
ACCURACY_QUESTIONS = _cell("gsm8k_questions", "GSM8K questions evaluated (early stop may end before the limit).")
PARITY = _cell(
    "parity_match_ratio",
    "Share of a P/D cell's evidence prompts whose greedy tokens equal its aggregated control's (1 = identical).",
    "ratio",
)
# KV fidelity (canary/checks/parity/check.py, docs/methodology/parity.md):
# per cell, never per prompt (prompt ids and text stay in results.json).
PARITY_KL_MAX = _cell(
    "parity_kl_max_nats",
    "Largest per-position top-k KL estimate of a P/D cell's output under its control (teacher-forced), in nats.",
    "nats",
)
PARITY_KL_MEAN = _cell(
    "parity_kl_mean_nats",
    "Mean per-position top-k KL estimate of a P/D cell's output under its control over every evidence prompt.",
    "nats",
)
PARITY_ABS_DLOGPROB_MAX = _cell(
    "parity_abs_dlogprob_max_nats",
    "Largest absolute logprob difference of a P/D cell's generated token between the P/D cell and its control.",
    "nats",
)
PARITY_TOP1_AGREE_MIN = _cell(
    "parity_top1_agreement_min_ratio",
    "Lowest share, over a P/D cell's evidence prompts, of output positions whose argmax agrees with the control's.",
    "ratio",
)
PARITY_NULL_KL_MAX = _cell(
    "parity_null_kl_max_nats",
    "Noise floor: largest KL of the control against itself (another batch composition, a prefix-cache hit, "
    "teacher-forced scoring) that the cell's gates compare with.",
    "nats",
)
PARITY_NULL_ABS_DLOGPROB_MAX = _cell(
    "parity_null_abs_dlogprob_max_nats",
    "Noise floor: largest absolute logprob difference of the control against itself.",
    "nats",
)
PARITY_NULL_TOKEN_FLIPS = _cell(
    "parity_null_token_flips", "Noise floor: null comparisons of an aggregated control whose greedy tokens differ."
)
PARITY_KL_OVER_FLOOR = _cell(
    "parity_kl_over_floor",
    "A P/D cell's largest KL as a multiple of its gate's threshold (margin x null floor + tolerance): above 1, "
    "a prompt exceeds the engine's own noise.",
)
PARITY_ABS_DLOGPROB_OVER_FLOOR = _cell(
    "parity_abs_dlogprob_over_floor",
    "A P/D cell's largest absolute logprob difference as a multiple of its gate's threshold (above 1: beyond "
    "the noise).",
)
PARITY_FAILING_PROMPTS = _cell("parity_failing_prompts", "Evidence prompts of a P/D cell beyond the noise floor.")
PARITY_FIRST_DIVERGENT_BLOCK = _cell(
    "parity_first_divergent_block",
    "The earliest KV block (1-based, in blocks of the cell's smaller logical block size) a P/D cell's divergence "
    "can start at, from the prompt lengths that match and fail; only when they fail in a block-position pattern.",
)
PARITY_FIRST_DIFF = _cell(
    "parity_first_diff_position",
    "Earliest output position whose greedy token differs from the control's (max_tokens when none does).",
)
PARITY_PROMPTS = _cell("parity_prompts", "Parity prompts measured, evidence or not.")
PARITY_EVIDENCE_PROMPTS = _cell(
    "parity_evidence_prompts", "Parity prompts whose output depends on their first block: the evidence."
)
PARITY_REJECTED_PROMPTS = _cell(
    "parity_rejected_prompts",
    "Parity prompts rejected as evidence (altering their first block changed nothing beyond the noise).",
)
PARITY_DRIFT_PROMPTS = _cell(
    "parity_drift_prompts", "Prompts a candidate image's control compared with the same cell on the baseline image."
)
PARITY_DRIFT_TOKEN_FLIPS = _cell(
    "parity_drift_token_flips", "Prompts whose greedy tokens on the candidate image differ from the baseline image's."
)
PARITY_DRIFT_KL_MAX = _cell(
    "parity_drift_kl_max_nats",
    "Largest per-position KL estimate of a candidate image's control against the baseline image's.",
    "nats",
)
PARITY_DRIFT_ABS_DLOGPROB_MAX = _cell(
    "parity_drift_abs_dlogprob_max_nats",
    "Largest absolute logprob difference of a candidate image's control against the baseline image's.",
    "nats",
)
PARITY_DRIFT_FIRST_DIFF = _cell(
    "parity_drift_first_diff_position",
    "Earliest output position that differs between the candidate and the baseline image (max_tokens: none).",
)
PARITY_DRIFT_KL_OVER_FLOOR = _cell(
    "parity_drift_kl_over_floor",
    "A candidate image's largest drift KL as a multiple of the drift gate's threshold (margin x both images' "
    "null floor + tolerance).",
)
PARITY_DRIFT_FAILED_GATES = _cell(
    "parity_drift_failed_gates",
    "Drift gates of a candidate image's control that failed against the baseline image (0: within the noise).",
)
# Parity under load (the throughput check's sub-result, canary/checks/throughput/loadparity.py,
# docs/methodology/load-parity.md): per cell, no prompt in any label.
LOAD_PARITY_STATUS = _cell(
    "load_parity_status_code",
    "Parity under load, the throughput check's sub-verdict as a number (as canary_cell_status_code): 0 the "
    "samples inside the load agree within the null floor, 7 beyond it, 4 too few samples inside the load.",
)
LOAD_PARITY_SAMPLES = _cell(
    "load_parity_samples", "Greedy parity samples that ran entirely inside the load run and were judged."
)
LOAD_PARITY_MATCH = _cell(
    "load_parity_match_ratio",
    "Share of the samples under load whose greedy tokens equal the control's reference (1 = identical).",
    "ratio",
)
LOAD_PARITY_FAILING = _cell(
    "load_parity_failing_samples", "P/D samples under load beyond the null floor (the parity check's gates)."
)
LOAD_PARITY_KL_OVER_FLOOR = _cell(
    "load_parity_kl_over_floor",
    "A P/D cell's largest teacher-forced KL of a sample under load as a multiple of its gate's threshold (above 1: "
    "beyond the noise floor).",
)
LOAD_PARITY_NULL_SAMPLES = _cell(
    "load_parity_null_samples", "The null arm under load: the control's own samples compared with its reference."
)
LOAD_PARITY_NULL_TOKEN_FLIPS = _cell(
    "load_parity_null_token_flips",
    "Null arm under load: the control's samples whose greedy tokens differ from its own reference (batch-dependent "
    "numerics of an honest engine).",
)
LOAD_PARITY_SECONDS = _cell(
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
NIXL_BYTES = _cell(
    "nixl_transferred_bytes", "KV-cache bytes NIXL moved from prefill to decode during the checks.", "bytes"
)
DECODE_RECOMPUTED = _cell(
    "decode_recomputed_prompt_ratio",
    "Share of the decode server's prompt tokens it computed itself instead of receiving them over NIXL.",
    "ratio",
)
NIXL_FAILED = _cell("nixl_failed_transfers", "NIXL transfers that failed during the checks.")
HISTORY_CHANGE_WORSE = _cell(
    "history_change_worse_ratio",
    "How much worse a throughput metric (label metric) got at a change point of the run history "
    "(E-Divisive, canary/history), as a fraction of the earlier mean; only while the change point lies "
    "within the last export.history.recent_runs runs.",
    "ratio",
    "metric",
)
# Cell age: every cell the run checked (its start) and, in a rolling coverage (Kubernetes waves), every
# planned cell, checked tonight or not. A timestamp, not an age, so the age stays true between runs:
# dashboards show time() - this.
CELL_LAST_CHECKED = _cell(
    "cell_last_checked_timestamp_seconds",
    "When the cell's checks last ran (Unix time; age = time() - value): every cell the run checked, and every "
    "planned cell of a rotating matrix, also those not run tonight; cells never checked have no series.",
    "seconds",
)
LAST_CHECKED_SOURCE = "the cell's start, or the rotation state"
"""Where canary_cell_last_checked_timestamp_seconds comes from (the metrics reference's *from*)."""
COVERAGE_METRICS: tuple[MetricSpec, ...] = (CELL_LAST_CHECKED,)

RUN_TIMESTAMP = MetricSpec(PREFIX + "run_timestamp_seconds", "When the last run finished (Unix time).", "seconds", ())
RUN_DURATION = MetricSpec(PREFIX + "run_duration_seconds", "Wall time of the last run.", "seconds", ())
RUN_CELLS = MetricSpec(
    PREFIX + "run_cells", "Cells of the last run, by verdict (every verdict, 0 included).", "", ("verdict",)
)
RUN_INTERRUPTED = MetricSpec(PREFIX + "run_interrupted", "1 when the last run was stopped before it finished.", "", ())
RUN_OUTCOME = MetricSpec(
    PREFIX + "run_outcome_code",
    "Outcome of the last run ("
    + ", ".join(f"{code} {outcome}" for outcome, code in verdicts.OUTCOME_CODES.items())
    + "): inconclusive when the only cells that did not pass could not be measured (invalid, error).",
    "",
    (),
)
RUN_INFO = MetricSpec(PREFIX + "run_info", "1; labels describe the last run.", "", RUN_LABELS)
IMAGE_INFO = MetricSpec(
    PREFIX + "image_info", '1 per image of the last run; baseline="true" marks the baseline image.', "", IMAGE_LABELS
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

# CheckResult.metrics keys (constants of canary.core.metric_keys, which the checks write) -> metrics.
CHECK_METRICS: tuple[CheckMetric, ...] = (
    CheckMetric(STARTUP_SECONDS, "startup", k.READY_S_TOTAL),
    CheckMetric(REQUESTS_PER_S, "throughput", k.REQUESTS_PER_S),
    CheckMetric(OUTPUT_TOKENS_PER_S, "throughput", k.OUTPUT_TOKENS_PER_S),
    CheckMetric(GOODPUT_PER_S, "throughput", k.GOODPUT_REQUESTS_PER_S),
    CheckMetric(PAIRED_RATIO, "throughput", k.PAIRED_RATIO),
    CheckMetric(PAIRED_RATIO_LOW, "throughput", k.PAIRED_RATIO_LOW),
    CheckMetric(PAIRED_RATIO_HIGH, "throughput", k.PAIRED_RATIO_HIGH),
    *(
        CheckMetric(LATENCY[kind], "throughput", k.latency_key(kind, pct), (("percentile", pct),))
        for kind in LATENCIES
        for pct in PERCENTILES
    ),
    CheckMetric(CAPACITY, "throughput", k.CAPACITY_REQUESTS_PER_S),
    CheckMetric(CAPACITY_LOW, "throughput", k.CAPACITY_LOW_REQUESTS_PER_S),
    CheckMetric(CAPACITY_HIGH, "throughput", k.CAPACITY_HIGH_REQUESTS_PER_S),
    CheckMetric(CAPACITY_REQUESTS, "throughput", k.CAPACITY_REQUESTS_USED),
    CheckMetric(CAPACITY_SECONDS, "throughput", k.CAPACITY_SECONDS_USED),
    CheckMetric(DISAGG_GAIN, "throughput", k.DISAGG_GAIN),
    CheckMetric(DISAGG_GAIN_LOW, "throughput", k.DISAGG_GAIN_LOW),
    CheckMetric(DISAGG_GAIN_HIGH, "throughput", k.DISAGG_GAIN_HIGH),
    CheckMetric(DISAGG_ENGINE_SCALE, "throughput", k.DISAGG_ENGINE_SCALE),
    *(
        CheckMetric(PD_TIME, "throughput", k.pd_time_key(term, stat), (("term", term), ("percentile", stat)))
        for term in k.PD_TIME_TERMS
        for stat in k.PD_TIME_STATS
    ),
    CheckMetric(PD_TIME_REQUESTS, "throughput", k.PD_TIME_REQUESTS),
    CheckMetric(PD_TIME_RECOMPUTED, "throughput", k.PD_TIME_RECOMPUTED),
    *(
        CheckMetric(
            PREFIX_CACHE_HIT, "throughput", k.prefix_cache_key(k.PREFIX_CACHE_HIT_RATE, role), (("role", role),)
        )
        for role in k.PREFIX_CACHE_ROLES
    ),
    *(CheckMetric(spec, "throughput", key) for spec, key in LOAD_PARITY_METRICS),
    CheckMetric(ACCURACY, "accuracy", k.ACCURACY),
    CheckMetric(ACCURACY_LOW, "accuracy", k.ACCURACY_WILSON_LOW),
    CheckMetric(ACCURACY_HIGH, "accuracy", k.ACCURACY_WILSON_HIGH),
    CheckMetric(ACCURACY_THRESHOLD, "accuracy", k.ACCURACY_THRESHOLD),
    CheckMetric(ACCURACY_QUESTIONS, "accuracy", k.QUESTIONS),
    CheckMetric(ACCURACY_PAIRED_P, "accuracy", k.MCNEMAR_P_VALUE),
    *(CheckMetric(spec, "parity", key) for spec, key in PARITY_METRICS),
    CheckMetric(NIXL_BYTES, "kv_transfer", k.NIXL_BYTES_TRANSFERRED),
    CheckMetric(NIXL_FAILED, "kv_transfer", k.NIXL_FAILED_TRANSFERS),
    CheckMetric(DECODE_RECOMPUTED, "kv_transfer", k.DECODE_RECOMPUTED_TOKEN_SHARE),
    *(CheckMetric(HISTORY_CHANGE_WORSE, TRACKED_CHECK, key, (("metric", metric),)) for metric, key in TRACKED.items()),
)
# The contract with the checks: check name -> the CheckResult.metrics keys the exporters read.
CHECK_METRIC_KEYS: dict[str, tuple[str, ...]] = {}
for _m in CHECK_METRICS:
    CHECK_METRIC_KEYS[_m.check] = (*CHECK_METRIC_KEYS.get(_m.check, ()), _m.key)

CELL_METRICS: tuple[MetricSpec, ...] = (
    CELL_VERDICT,
    CELL_STATUS,
    CELL_RISK,
    CELL_DURATION,
    CHECK_VERDICT,
    CHECK_STATUS,
    CHECK_DURATION,
    STARTUP_FAILURE,
)
RUN_METRICS: tuple[MetricSpec, ...] = (
    RUN_TIMESTAMP,
    RUN_DURATION,
    RUN_CELLS,
    RUN_INTERRUPTED,
    RUN_OUTCOME,
    RUN_INFO,
    IMAGE_INFO,
)


def _all_specs() -> tuple[MetricSpec, ...]:
    seen: dict[str, MetricSpec] = {}
    for spec in (*CELL_METRICS, *(m.spec for m in CHECK_METRICS), *RUN_METRICS, *COVERAGE_METRICS):
        seen.setdefault(spec.name, spec)
    return tuple(seen.values())


ALL_METRICS: tuple[MetricSpec, ...] = _all_specs()
METRICS_BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in ALL_METRICS}
# Upper bound of series one cell can produce (for the cardinality estimate above).
# 4 cell series (verdict, status, duration, failure), 3 per check (6 check names), the check numbers,
# the last-checked time, one per risk flag.
SERIES_PER_CELL = 4 + 3 * 6 + len(CHECK_METRICS) + len(COVERAGE_METRICS) + len(RISKS)


# --------------------------------------------------------------------------- canary bisect
# `canary bisect` (canary.bisect) writes these to bisect.prom in the bisected run's directory, one
# set per bisected cell. They are not part of a run's exposition (ALL_METRICS): a bisection is its
# own snapshot, taken after the run. `range` is `series` (prefixes of a patch series) or `images`.
BISECT_LABELS: tuple[str, ...] = ("cell", "image", "range")
BISECT_OUTCOME = MetricSpec(
    PREFIX + "bisect_outcome_code",
    "Outcome of the cell's last bisection: 0 found, 1 not-reproduced, 2 inconclusive, 3 interrupted.",
    "",
    BISECT_LABELS,
)
BISECT_CULPRIT = MetricSpec(
    PREFIX + "bisect_culprit_position",
    "1-based position of the first bad patch (or image) in the range; label culprit names it (found only).",
    "",
    (*BISECT_LABELS, "culprit"),
)
BISECT_RANGE_SIZE = MetricSpec(
    PREFIX + "bisect_range_size", "Patches (or images after the good one) in the bisected range.", "", BISECT_LABELS
)
BISECT_CELL_RUNS = MetricSpec(
    PREFIX + "bisect_cell_runs", "Cell runs the bisection spent (endpoints, search, confirmation).", "", BISECT_LABELS
)
BISECT_DURATION = MetricSpec(
    PREFIX + "bisect_duration_seconds", "Wall time of the bisection.", "seconds", BISECT_LABELS
)
BISECT_TIMESTAMP = MetricSpec(
    PREFIX + "bisect_timestamp_seconds", "When the bisection ended (Unix time).", "seconds", BISECT_LABELS
)
BISECT_METRICS: tuple[MetricSpec, ...] = (
    BISECT_OUTCOME,
    BISECT_CULPRIT,
    BISECT_RANGE_SIZE,
    BISECT_CELL_RUNS,
    BISECT_DURATION,
    BISECT_TIMESTAMP,
)


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """One series and its value."""

    name: str
    labels: dict[str, str]
    value: float


def cell_labels(cell: Cell) -> dict[str, str]:
    """The label values of a cell (CELL_LABELS order)."""
    return {
        "cell": cell.id,
        "model": cell.model,
        "backend": cell.backend,
        "prefill_block_size": str(cell.prefill_block_size),
        "decode_block_size": str(cell.decode_block_size),
        "kernel_block_size": cell.kernel_label,
        "kv_cache_dtype": cell.kv_cache_dtype,
        "runner": cell.runner,
        "topology": cell.topology,
        "image": cell.image,
    }


def failure_class(check: CheckResult) -> str:
    """The startup failure class of a failed startup check, bounded to catalog-like names."""
    raw = str(check.evidence.get("failure_class") or "")
    return raw if _FAILURE_CLASS.match(raw) else "unclassified"


def _finite(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _cell_samples(result: CellResult) -> Iterator[Sample]:
    base = cell_labels(result.cell)
    yield Sample(CELL_VERDICT.name, {**base, "verdict": result.verdict}, 1.0)
    yield Sample(CELL_STATUS.name, base, float(VERDICT_CODES[result.verdict]))
    for risk in dict.fromkeys(result.cell.risks):
        yield Sample(CELL_RISK.name, {**base, "risk": risk}, 1.0)
    if result.checks:
        yield Sample(CELL_DURATION.name, base, result.duration_s)
    for check in result.checks:
        labels = {**base, "check": check.name}
        yield Sample(CHECK_VERDICT.name, {**labels, "verdict": check.verdict}, 1.0)
        yield Sample(CHECK_STATUS.name, labels, float(VERDICT_CODES[check.verdict]))
        yield Sample(CHECK_DURATION.name, labels, check.duration_s)
    startup = result.check("startup") or result.check("deploy")
    if startup is not None and startup.verdict in ("fail", "error"):
        yield Sample(STARTUP_FAILURE.name, {**base, "failure_class": failure_class(startup)}, 1.0)
    for mapping in CHECK_METRICS:
        check_result = result.check(mapping.check)
        if check_result is None or mapping.key not in check_result.metrics:
            continue
        value = check_result.metrics[mapping.key]
        if _finite(value):
            yield Sample(mapping.spec.name, {**base, **dict(mapping.extra)}, float(value))


def run_timestamp(run: RunResult) -> float:
    """When the run finished (its start + duration if it has no end), Unix seconds."""
    if run.finished_at is not None:
        return run.finished_at.timestamp()
    return run.started_at.timestamp() + run.duration_s


def baseline_image(run: RunResult) -> str:
    """The run's baseline image key: RunResult.baseline_image when recorded, else the first image."""
    if run.baseline_image:
        return run.baseline_image
    return run.cells[0].cell.image if run.cells else ""


def _run_samples(run: RunResult) -> Iterator[Sample]:
    yield Sample(RUN_TIMESTAMP.name, {}, run_timestamp(run))
    yield Sample(RUN_DURATION.name, {}, run.duration_s)
    counts = run.counts()
    for verdict in VERDICT_CODES:
        yield Sample(RUN_CELLS.name, {"verdict": verdict}, float(counts.get(verdict, 0)))
    yield Sample(RUN_INTERRUPTED.name, {}, 1.0 if run.interrupted else 0.0)
    yield Sample(RUN_OUTCOME.name, {}, float(verdicts.OUTCOME_CODES[run.outcome]))
    yield Sample(
        RUN_INFO.name,
        {
            "config": run.config_name,
            "platform": run.platform,
            "target": run.target,
            "canary_version": run.canary_version,
        },
        1.0,
    )
    baseline = baseline_image(run)
    images = {c.cell.image: c.cell.image_ref for c in run.cells}
    for image, ref in images.items():
        yield Sample(
            IMAGE_INFO.name, {"image": image, "image_ref": ref, "baseline": str(image == baseline).lower()}, 1.0
        )


def samples(run: RunResult) -> list[Sample]:
    """Every series a run exports, in schema order (run metrics first)."""
    out = list(_run_samples(run))
    for result in run.cells:
        out.extend(_cell_samples(result))
    covered = set()
    for seen in run.coverage:
        if seen.last_checked is not None:
            covered.add(seen.cell.id)
            out.append(Sample(CELL_LAST_CHECKED.name, cell_labels(seen.cell), seen.last_checked.timestamp()))
    for result in run.cells:  # a run without rotation state: its checked cells are as old as their start
        if result.checks and result.cell.id not in covered:
            out.append(Sample(CELL_LAST_CHECKED.name, cell_labels(result.cell), result.started_at.timestamp()))
    order = {
        spec.name: index
        for index, spec in enumerate((*RUN_METRICS, *CELL_METRICS, *(m.spec for m in CHECK_METRICS), *COVERAGE_METRICS))
    }
    return sorted(out, key=lambda s: order[s.name])


def families(run: RunResult) -> list[Metric]:
    """The run as prometheus-client metric families (only metrics with samples)."""
    return _families(samples(run), METRICS_BY_NAME)


def _families(all_samples: Iterable[Sample], specs: dict[str, MetricSpec]) -> list[Metric]:
    grouped: dict[str, list[Sample]] = {}
    for sample in all_samples:
        grouped.setdefault(sample.name, []).append(sample)
    out: list[Metric] = []
    for name, group in grouped.items():
        spec = specs[name]
        family = GaugeMetricFamily(name, spec.help, labels=_label_names(spec, group))
        for sample in group:
            family.add_metric([sample.labels[label] for label in _label_names(spec, group)], sample.value)
        out.append(family)
    return out


def _label_names(spec: MetricSpec, group: list[Sample]) -> list[str]:
    present = set().union(*(s.labels for s in group)) if group else set()
    unknown = present - set(spec.labels)
    if unknown:
        raise ValueError(f"{spec.name}: labels {sorted(unknown)} are not in the schema")
    return [label for label in spec.labels if label in present]


class _RunCollector(Collector):
    def __init__(self, run: RunResult) -> None:
        self._run = run

    def collect(self) -> Iterable[Metric]:
        return families(self._run)


def registry_for(run: RunResult) -> CollectorRegistry:
    """A registry holding exactly the run's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RunCollector(run))
    return registry


def exposition(run: RunResult) -> bytes:
    """The run in Prometheus text format 0.0.4 (what the textfile, the exporter and the push carry)."""
    return generate_latest(registry_for(run))


class _SamplesCollector(Collector):
    def __init__(self, metric_families: list[Metric]) -> None:
        self._families = metric_families

    def collect(self) -> Iterable[Metric]:
        return self._families


def bisect_exposition(bisect_samples: Iterable[Sample]) -> bytes:
    """Bisection samples (names of BISECT_METRICS only) in Prometheus text format 0.0.4."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SamplesCollector(_families(bisect_samples, {m.name: m for m in BISECT_METRICS})))
    return generate_latest(registry)


# --------------------------------------------------------------------------- documentation


def metrics_markdown() -> str:
    """The metric reference as a Markdown table, for docs/reference/metrics.md."""
    sources = {m.spec.name: f"`{m.check}`: `{m.key}`" for m in CHECK_METRICS}
    sources[CELL_LAST_CHECKED.name] = LAST_CHECKED_SOURCE
    for m in CHECK_METRICS:
        if m.extra:
            sources[m.spec.name] = f"`{m.check}`: `{m.key.replace(m.extra[0][1], '<' + m.extra[0][0] + '>')}`"
    rows = ["| metric | labels (besides the cell labels) | from | meaning |", "|---|---|---|---|"]
    for spec in ALL_METRICS:
        cell = spec.labels[: len(CELL_LABELS)] == CELL_LABELS
        extra = spec.labels[len(CELL_LABELS) :] if cell else spec.labels
        labels = ", ".join(f"`{label}`" for label in extra) or "-"
        if not cell:
            labels = f"run: {labels}"
        rows.append(f"| `{spec.name}` | {labels} | {sources.get(spec.name, 'run / verdicts')} | {spec.help} |")
    return "\n".join(rows) + "\n"
