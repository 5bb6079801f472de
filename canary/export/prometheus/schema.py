"""The Prometheus metric schema of the canary, defined once.

Every exporter (Pushgateway, node-exporter textfile, `canary serve-metrics`), the Grafana
dashboards (canary/export/prometheus/dashboards/) and the alert rules (configs/alerts/canary-rules.yaml, checked
against this module by tests) use the names, help texts, units and labels below: the cell and run
metrics defined here, and every check's own (its folder's `exported.py`, declared with
`register(metrics=...)`), which ``CHECK_METRICS`` reads from the check registry.

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
exposes at most ``SERIES_PER_CELL`` (128) series per cell plus ~15 run series: the CPU default
(10 cells) < 1300 series, a 500-cell GPU matrix about 64k (a cell has only its topology's share: P/D
cells no drift series, aggregated cells no P/D fidelity, P/D time or gain series). Every push replaces the whole
group, so series of cells no longer in the matrix disappear with the next run. ``verdict`` and
``failure_class`` series exist only for the current value (one series per cell), so a change of
verdict does not leave a second live series behind.

Where the numbers come from
---------------------------
Check results carry numbers in ``CheckResult.metrics`` under the keys of ``CHECK_METRIC_KEYS``
(each check's declared keys, most of them constants of ``canary.core.metric_keys``; unit in the key: ``_s`` seconds,
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

from canary.checks.accuracy.exported import (
    ACCURACY as ACCURACY,
)
from canary.checks.accuracy.exported import (
    ACCURACY_HIGH as ACCURACY_HIGH,
)
from canary.checks.accuracy.exported import (
    ACCURACY_LOW as ACCURACY_LOW,
)
from canary.checks.accuracy.exported import (
    ACCURACY_PAIRED_P as ACCURACY_PAIRED_P,
)
from canary.checks.accuracy.exported import (
    ACCURACY_QUESTIONS as ACCURACY_QUESTIONS,
)
from canary.checks.accuracy.exported import (
    ACCURACY_THRESHOLD as ACCURACY_THRESHOLD,
)
from canary.checks.base import specs
from canary.checks.kv_transfer.exported import (
    DECODE_RECOMPUTED as DECODE_RECOMPUTED,
)
from canary.checks.kv_transfer.exported import (
    NIXL_BYTES as NIXL_BYTES,
)
from canary.checks.kv_transfer.exported import (
    NIXL_FAILED as NIXL_FAILED,
)
from canary.checks.parity.exported import (
    PARITY as PARITY,
)
from canary.checks.parity.exported import (
    PARITY_ABS_DLOGPROB_MAX as PARITY_ABS_DLOGPROB_MAX,
)
from canary.checks.parity.exported import (
    PARITY_ABS_DLOGPROB_OVER_FLOOR as PARITY_ABS_DLOGPROB_OVER_FLOOR,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_ABS_DLOGPROB_MAX as PARITY_DRIFT_ABS_DLOGPROB_MAX,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_FAILED_GATES as PARITY_DRIFT_FAILED_GATES,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_FIRST_DIFF as PARITY_DRIFT_FIRST_DIFF,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_KL_MAX as PARITY_DRIFT_KL_MAX,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_KL_OVER_FLOOR as PARITY_DRIFT_KL_OVER_FLOOR,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_PROMPTS as PARITY_DRIFT_PROMPTS,
)
from canary.checks.parity.exported import (
    PARITY_DRIFT_TOKEN_FLIPS as PARITY_DRIFT_TOKEN_FLIPS,
)
from canary.checks.parity.exported import (
    PARITY_EVIDENCE_PROMPTS as PARITY_EVIDENCE_PROMPTS,
)
from canary.checks.parity.exported import (
    PARITY_FAILING_PROMPTS as PARITY_FAILING_PROMPTS,
)
from canary.checks.parity.exported import (
    PARITY_FIRST_DIFF as PARITY_FIRST_DIFF,
)
from canary.checks.parity.exported import (
    PARITY_FIRST_DIVERGENT_BLOCK as PARITY_FIRST_DIVERGENT_BLOCK,
)
from canary.checks.parity.exported import (
    PARITY_KL_MAX as PARITY_KL_MAX,
)
from canary.checks.parity.exported import (
    PARITY_KL_MEAN as PARITY_KL_MEAN,
)
from canary.checks.parity.exported import (
    PARITY_KL_OVER_FLOOR as PARITY_KL_OVER_FLOOR,
)
from canary.checks.parity.exported import (
    PARITY_METRICS as PARITY_METRICS,
)
from canary.checks.parity.exported import (
    PARITY_NULL_ABS_DLOGPROB_MAX as PARITY_NULL_ABS_DLOGPROB_MAX,
)
from canary.checks.parity.exported import (
    PARITY_NULL_KL_MAX as PARITY_NULL_KL_MAX,
)
from canary.checks.parity.exported import (
    PARITY_NULL_TOKEN_FLIPS as PARITY_NULL_TOKEN_FLIPS,
)
from canary.checks.parity.exported import (
    PARITY_PROMPTS as PARITY_PROMPTS,
)
from canary.checks.parity.exported import (
    PARITY_REJECTED_PROMPTS as PARITY_REJECTED_PROMPTS,
)
from canary.checks.parity.exported import (
    PARITY_TOP1_AGREE_MIN as PARITY_TOP1_AGREE_MIN,
)
from canary.core import metric_keys as k
from canary.core.metric_spec import CELL_LABELS as CELL_LABELS
from canary.core.metric_spec import PREFIX as PREFIX
from canary.core.metric_spec import RESERVED_LABELS as RESERVED_LABELS
from canary.core.metric_spec import MetricSpec as MetricSpec
from canary.core.metric_spec import cell_metric
from canary.export.history.tracked import TRACKED, TRACKED_CHECK
from canary.judge import verdicts
from canary.judge.results import LATENCIES as LATENCIES
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.plan.cell import RISKS, Cell

RUN_LABELS: tuple[str, ...] = ("config", "platform", "target", "canary_version")
IMAGE_LABELS: tuple[str, ...] = ("image", "image_ref", "baseline")

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
class CheckMetric:
    """Where a metric's value comes from: CheckResult.metrics[key] of check `check`."""

    spec: MetricSpec
    check: str
    key: str
    extra: tuple[tuple[str, str], ...] = field(default=())


# --------------------------------------------------------------------------- the metrics

CELL_VERDICT = cell_metric("cell_verdict", "1 for the cell's verdict in the last run (label verdict).", "", "verdict")
CELL_STATUS = cell_metric(
    "cell_status_code",
    "The cell's verdict as a number ("
    + ", ".join(f"{code} {verdict}" for verdict, code in VERDICT_CODES.items())
    + "): higher is worse.",
)
CELL_RISK = cell_metric(
    "cell_risk_info",
    "1 per risk flag the planner gave the cell (label risk: "
    + ", ".join(RISKS)
    + "); a cell without one has no series.",
    "",
    "risk",
)
CELL_DURATION = cell_metric("cell_duration_seconds", "Wall time of the cell: deploy, checks, teardown.", "seconds")
CHECK_VERDICT = cell_metric(
    "check_verdict", "1 for a check's verdict on the cell (labels check, verdict).", "", "check", "verdict"
)
CHECK_STATUS = cell_metric(
    "check_status_code", "A check's verdict as a number (as canary_cell_status_code).", "", "check"
)
CHECK_DURATION = cell_metric("check_duration_seconds", "Wall time of a check.", "seconds", "check")
STARTUP_FAILURE = cell_metric(
    "startup_failure_info",
    "1 when the cell failed to start; failure_class names the known signature.",
    "",
    "failure_class",
)
HISTORY_CHANGE_WORSE = cell_metric(
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
CELL_LAST_CHECKED = cell_metric(
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

# What each registered check declares (`register(metrics=...)`, its folder's exported.py), in check order,
# then the history's change points (written into a check's numbers after the run).
CHECK_METRICS: tuple[CheckMetric, ...] = (
    *(CheckMetric(m.spec, name, m.key, m.extra) for name, spec in specs().items() for m in spec.metrics),
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
# 4 cell series (verdict, status, duration, failure), 3 per check (7 check names), the check numbers,
# the last-checked time, one per risk flag.
SERIES_PER_CELL = 4 + 3 * 7 + len(CHECK_METRICS) + len(COVERAGE_METRICS) + len(RISKS)


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
