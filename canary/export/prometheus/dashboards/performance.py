"""The performance dashboard (vllm-canary-performance), one function per row of panels."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as gmodel

from canary.checks.accuracy import exported as accuracy_exported
from canary.checks.throughput import exported as tput
from canary.export.prometheus import alerts
from canary.export.prometheus import schema as s
from canary.export.prometheus.dashboards.base import (
    DASHED,
    LIMIT_VAR,
    TAGS,
    U_GAIN,
    U_RATIO,
    U_REQUESTS_PER_S,
    U_SECONDS,
    U_TOKENS_PER_S,
    Group,
    _line,
    _query,
    alert_expr,
    assemble,
    explain,
    on_cells,
    selector,
    top,
)
from canary.export.prometheus.dashboards.fidelity import _instant_table
from canary.export.prometheus.dashboards.panels import (
    HIDDEN_COLUMNS,
    _organize,
    _sort,
    _table,
    _timeseries,
    _variables,
    _with_threshold_line,
)


def _latency_panel(kind: str) -> gts.Panel:
    spec = tput.LATENCY[kind]
    percentiles = selector('percentile=~"$percentile"')
    return _timeseries(
        f"Slowest {kind.upper()}: {s.LATENCIES[kind]}",
        f"The ${LIMIT_VAR} slowest cells and percentiles (the percentile variable): {spec.help} Measured by the "
        "throughput check's load run; lower is better.",
        U_SECONDS,
        _query(top(f"{spec.name}{percentiles}"), "{{cell}} {{percentile}}"),
    )


def _capacity_regression_panel() -> gts.Panel:
    """The candidate's capacity interval top over the baseline's bottom, as CanaryCapacityRegression compares."""
    regression = alerts.rule("CanaryCapacityRegression")
    return _with_threshold_line(
        _timeseries(
            "Candidate capacity top / baseline capacity bottom",
            f"The ${LIMIT_VAR} lowest cells on a candidate image: the upper end of its SLO capacity interval over "
            "the lower end of the same cell's on the baseline image (same run), the ratio "
            f"CanaryCapacityRegression compares, with its threshold as the red line ({regression.threshold:.0%}): "
            "below it the candidate carries less traffic beyond the search's uncertainty; at or above it the "
            "intervals overlap. " + explain("SLO capacity"),
            U_RATIO,
            _query(top(on_cells(regression.value_expr), worst="bottomk"), "{{cell}}"),
        ),
        regression.threshold,
        below="red",
        above="green",
    )


def _of(spec: s.MetricSpec, cells: str) -> str:
    """A metric of the given cells only."""
    return f"{spec.name}{selector()} and on (job, scope, cell) {cells}"


def _col(spec: s.MetricSpec) -> str:
    """A metric of every selected cell (a column of an instant table)."""
    return f"{spec.name}{selector()}"


def _capacity_panels() -> tuple[gts.Panel, gtable.Panel, gts.Panel, gtable.Panel]:
    """SLO capacity with its interval (the lowest cells and every cell), and the disaggregation gain."""
    return (*_capacity_pair(), *_gain_pair())


def _capacity_pair() -> tuple[gts.Panel, gtable.Panel]:
    """The lowest cells' SLO capacity with its interval, and every cell's now."""
    lowest = top(f"{tput.CAPACITY.name}{selector()}", worst="bottomk")
    capacity_chart = (
        _timeseries(
            "Lowest SLO capacity with its interval",
            f"The ${LIMIT_VAR} cells with the lowest SLO capacity (solid), the lower (B) and upper (C, dashed) "
            "ends of its interval, where the capacity search ran (checks.throughput.capacity, off by default). "
            + explain("SLO capacity"),
            U_REQUESTS_PER_S,
            _query(lowest, "{{cell}}"),
            _query(_of(tput.CAPACITY_LOW, lowest), "{{cell}} lower", ref="B"),
            _query(_of(tput.CAPACITY_HIGH, lowest), "{{cell}} upper", ref="C"),
        )
        .min(0)
        .override_by_query("B", DASHED)
        .override_by_query("C", DASHED)
    )
    capacity_table = _instant_table(
        "SLO capacity now",
        "Last SLO capacity of every cell whose capacity search ran, lowest first: the estimate, its interval, and "
        "what the search spent (requests sent, seconds). An empty estimate: no rate held the SLO; an empty end: "
        "no probe was conclusive on that side. " + explain("SLO capacity"),
        U_REQUESTS_PER_S,
        (
            (_col(tput.CAPACITY), "capacity", U_REQUESTS_PER_S),
            (_col(tput.CAPACITY_LOW), "lower", U_REQUESTS_PER_S),
            (_col(tput.CAPACITY_HIGH), "upper", U_REQUESTS_PER_S),
            (_col(tput.CAPACITY_REQUESTS), "requests used", "none"),
            (_col(tput.CAPACITY_SECONDS), "search time", U_SECONDS),
        ),
        12,
        "capacity",
        desc=False,
    )
    return capacity_chart, capacity_table


def _gain_pair() -> tuple[gts.Panel, gtable.Panel]:
    """The lowest P/D cells' disaggregation gain with its interval, and every P/D cell's by backend and block."""
    lowest_gain = top(f"{tput.DISAGG_GAIN.name}{selector()}", worst="bottomk")
    gain_chart = _with_threshold_line(
        _timeseries(
            "Lowest disaggregation gain with its interval",
            f"The ${LIMIT_VAR} P/D cells with the lowest disaggregation gain (solid) and the ends of its interval "
            "(B lower, C upper, dashed); the line at 1: P/D carries what the same engines carry aggregated. "
            + explain("disaggregation gain", "SLO capacity"),
            U_GAIN,
            _query(lowest_gain, "{{cell}}"),
            _query(_of(tput.DISAGG_GAIN_LOW, lowest_gain), "{{cell}} lower", ref="B"),
            _query(_of(tput.DISAGG_GAIN_HIGH, lowest_gain), "{{cell}} upper", ref="C"),
        )
        .min(0)
        .override_by_query("B", DASHED)
        .override_by_query("C", DASHED),
        1.0,
        below="orange",
        above="green",
    )
    gain_table = _instant_table(
        "Disaggregation gain by backend and block size",
        "Every P/D cell with a disaggregation gain, one row per backend and prefill/decode block size (and "
        "image), lowest gain first: the gain, its interval, the engine scale its control was multiplied by "
        "and the cell's own SLO capacity. " + explain("disaggregation gain", "SLO capacity"),
        U_GAIN,
        (
            (_col(tput.DISAGG_GAIN), "gain", U_GAIN),
            (_col(tput.DISAGG_GAIN_LOW), "gain lower", U_GAIN),
            (_col(tput.DISAGG_GAIN_HIGH), "gain upper", U_GAIN),
            (_col(tput.DISAGG_ENGINE_SCALE), "control scaled ×", "none"),
            (
                _of(tput.CAPACITY, f"{tput.DISAGG_GAIN.name}{selector()}"),
                "P/D capacity",
                U_REQUESTS_PER_S,
            ),
        ),
        12,
        "gain",
        desc=False,
        hidden=(*HIDDEN_COLUMNS, "model", "kernel_block_size", "topology"),
    )
    return gain_chart, gain_table


def _pd_time_panel() -> gts.Panel:
    """Where the slowest P/D cells' time goes, term by term (canary_pd_time_seconds), and how many of their
    requests were joined and fell back to recompute."""
    percentiles = selector('percentile=~"$percentile"', 'term!="decode"')
    largest = top(f"{tput.PD_TIME.name}{percentiles}")
    same = f"{selector()} and on (job, scope, cell) {largest}"
    return _timeseries(
        "Where P/D time goes: TTFT by term",
        f"The ${LIMIT_VAR} largest terms of P/D cells' TTFT (the percentile variable): "
        f"{tput.PD_TIME.help} Dashed "
        f"(B), requests joined; C, of those decode recomputed instead of reading the KV. "
        "Per-request rows: results.json, evidence.pd_time of the throughput check.",
        U_SECONDS,
        _query(largest, "{{cell}} {{term}} {{percentile}}"),
        _query(f"{tput.PD_TIME_REQUESTS.name}{same}", "{{cell}} joined", "B"),
        _query(f"{tput.PD_TIME_RECOMPUTED.name}{same}", "{{cell}} recomputed", "C"),
    ).override_by_query("B", DASHED)


def _prefix_cache_panel() -> gts.Panel:
    """The prefix-cache hit ratio of each engine under the throughput check's load, lowest first."""
    return _timeseries(
        "Prefix-cache hits under load by engine",
        f"The ${LIMIT_VAR} lowest prefix-cache hit ratios (cell and engine role): "
        f"{tput.PREFIX_CACHE_HIT.help} "
        "A shared-prefix workload hits on prefill; fresh synthetic prompts hit nothing. Queried and hit tokens: "
        "results.json, evidence.prefix_cache of the throughput check.",
        U_RATIO,
        _query(top(f"{tput.PREFIX_CACHE_HIT.name}{selector()}", worst="bottomk"), "{{cell}} {{role}}"),
    )


class _Performance(NamedTuple):
    """What several of the performance dashboard's rows use."""

    coords: str
    accuracy_hidden: tuple[str, ...]
    regression: alerts.AlertRule
    below_gate: str
    worst_accuracy: str
    of_worst: Callable[[s.MetricSpec], str]
    capacity_chart: gts.Panel
    capacity_table: gtable.Panel
    gain_chart: gts.Panel
    gain_table: gtable.Panel


def _performance_queries() -> _Performance:
    """The queries and panels the performance dashboard's rows share."""
    coords = (
        f'label_join({tput.OUTPUT_TOKENS_PER_S.name}{selector()}, "coordinates", " ", '
        '"topology", "backend", "prefill_block_size", "decode_block_size", "kv_cache_dtype", "runner", "model")'
    )
    accuracy_hidden = (*HIDDEN_COLUMNS, "model", "prefill_block_size", "decode_block_size", "kernel_block_size")
    regression = alerts.rule("CanaryThroughputRegression")
    below_gate = alert_expr("CanaryAccuracyBelowGate")
    worst_accuracy = top(f"{accuracy_exported.ACCURACY.name}{selector()}", worst="bottomk")

    def of_worst(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()} and on (job, scope, cell) {worst_accuracy}"

    capacity_chart, capacity_table, gain_chart, gain_table = _capacity_panels()
    return _Performance(
        coords,
        accuracy_hidden,
        regression,
        below_gate,
        worst_accuracy,
        of_worst,
        capacity_chart,
        capacity_table,
        gain_chart,
        gain_table,
    )


def _throughput_row(q: _Performance) -> Group:
    """The row 'Throughput' and its panels: the slowest cells, then candidate against baseline."""
    return gdash.Row("Throughput"), [*_slowest_cells(), *_against_the_baseline(q)]


def _slowest_cells() -> list[cogbuilder.Builder[gmodel.Panel]]:
    """Throughput's first panels: the slowest cells, their goodput and the history's change points."""
    return [
        _timeseries(
            "Lowest output tokens per second",
            f"The ${LIMIT_VAR} slowest cells: {tput.OUTPUT_TOKENS_PER_S.help} Higher is better.",
            U_TOKENS_PER_S,
            _query(top(f"{tput.OUTPUT_TOKENS_PER_S.name}{selector()}", worst="bottomk"), "{{cell}}"),
        ),
        _timeseries(
            "Lowest requests per second and their goodput",
            f"The ${LIMIT_VAR} cells with the fewest requests per second: "
            f"{tput.REQUESTS_PER_S.help} Dashed "
            f"(B), the same cells' goodput: {tput.GOODPUT_PER_S.help}",
            U_REQUESTS_PER_S,
            _query(top(f"{tput.REQUESTS_PER_S.name}{selector()}", worst="bottomk"), "{{cell}}"),
            _query(
                f"{tput.GOODPUT_PER_S.name}{selector()} and on (job, scope, cell) "
                + top(f"{tput.REQUESTS_PER_S.name}{selector()}", worst="bottomk"),
                "{{cell}} goodput",
                ref="B",
            ),
        ).override_by_query("B", DASHED),
        _timeseries(
            "Change points in the run history: CanaryHistoryChangePoint",
            "How much worse a throughput metric got at a change point of the run history (E-Divisive over the "
            "nightly runs), as a share of the earlier mean: exactly the series the warning alert "
            "CanaryHistoryChangePoint fires for (its expression), while the change point is recent. "
            "`canary history changes --cell CELL` names the run and the image change.",
            U_RATIO,
            _query(top(on_cells(alert_expr("CanaryHistoryChangePoint"))), "{{cell}} {{metric}}"),
        ),
    ]


def _against_the_baseline(q: _Performance) -> list[cogbuilder.Builder[gmodel.Panel]]:
    """Throughput's last panels: candidate / baseline (unpaired and paired) and every image side by side."""
    coords, regression = q.coords, q.regression
    return [
        _with_threshold_line(
            _timeseries(
                "Candidate / baseline output tokens per second",
                f"The ${LIMIT_VAR} slowest cells on a candidate image relative to the same cell on the baseline "
                "image (same run): the ratio CanaryThroughputRegression compares, with its threshold as the "
                f"red line ({regression.threshold:.0%}); 100%: as fast as the baseline.",
                U_RATIO,
                _query(top(on_cells(regression.value_expr), worst="bottomk"), "{{cell}}"),
            ),
            regression.threshold,
            below="red",
            above="green",
        ),
        _timeseries(
            "Paired candidate / baseline throughput with its interval",
            f"The ${LIMIT_VAR} lowest paired verdicts (checks.throughput.paired): "
            f"{tput.PAIRED_RATIO.help} Dashed, "
            f"the ends of its t interval (B: {tput.PAIRED_RATIO_LOW.help} "
            f"C: {tput.PAIRED_RATIO_HIGH.help})",
            U_RATIO,
            _query(top(f"{tput.PAIRED_RATIO.name}{selector()}", worst="bottomk"), "{{cell}}"),
            _query(
                f"{tput.PAIRED_RATIO_LOW.name}{selector()} and on (job, scope, cell) "
                + top(f"{tput.PAIRED_RATIO.name}{selector()}", worst="bottomk"),
                "{{cell}} low",
                ref="B",
            ),
            _query(
                f"{tput.PAIRED_RATIO_HIGH.name}{selector()} and on (job, scope, cell) "
                + top(f"{tput.PAIRED_RATIO.name}{selector()}", worst="bottomk"),
                "{{cell}} high",
                ref="C",
            ),
        )
        .override_by_query("B", DASHED)
        .override_by_query("C", DASHED),
        _table(
            "Output tokens/s by image",
            "The same cell coordinates on every image side by side (last run): topology, backend, block sizes, "
            "KV-cache dtype, runner and model per row, one column per image.",
            U_TOKENS_PER_S,
            _query(coords, ref="A", instant=True),
            span=24,
        ).with_transformation(
            gmodel.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "image", "rowField": "coordinates", "valueField": "Value"},
            )
        ),
    ]


def _slo_capacity_and_disaggregation_gain_row(q: _Performance) -> Group:
    """The row 'SLO capacity and disaggregation gain' and its panels."""
    capacity_chart, capacity_table, gain_chart, gain_table = (
        q.capacity_chart,
        q.capacity_table,
        q.gain_chart,
        q.gain_table,
    )
    return (
        gdash.Row("SLO capacity and disaggregation gain"),
        [
            capacity_chart,
            capacity_table,
            _capacity_regression_panel(),
            gain_chart,
            gain_table,
        ],
    )


def _latency_under_load_row(q: _Performance) -> Group:
    """The row 'Latency under load' and its panels."""
    return (
        gdash.Row("Latency under load"),
        [
            _latency_panel("ttft"),
            _latency_panel("tpot"),
            _latency_panel("itl"),
            _latency_panel("e2e"),
            _pd_time_panel(),
            _prefix_cache_panel(),
        ],
    )


def _gsm8k_accuracy_row(q: _Performance) -> Group:
    """The row 'GSM8K accuracy' and its panels."""
    accuracy_hidden, below_gate, of_worst, worst_accuracy = (
        q.accuracy_hidden,
        q.below_gate,
        q.of_worst,
        q.worst_accuracy,
    )
    return (
        gdash.Row("GSM8K accuracy"),
        [
            _timeseries(
                "Lowest GSM8K accuracy with Wilson bounds: CanaryAccuracyBelowGate",
                f"The ${LIMIT_VAR} cells with the lowest GSM8K accuracy (solid), their 95% Wilson interval (dashed, B "
                "and C: where the true accuracy lies given the questions asked) and the gate (red, D: expected "
                "accuracy minus tolerance). Big red points (E): the Wilson upper bounds below the gate, exactly the "
                "cells the critical alert CanaryAccuracyBelowGate fires for (its expression): worse than the model "
                "can be, beyond chance.",
                U_RATIO,
                _query(worst_accuracy, "{{cell}}"),
                _query(of_worst(accuracy_exported.ACCURACY_LOW), "{{cell}} lower", ref="B"),
                _query(of_worst(accuracy_exported.ACCURACY_HIGH), "{{cell}} upper", ref="C"),
                _query(f"max({accuracy_exported.ACCURACY_THRESHOLD.name}{selector()})", "gate", ref="D"),
                _query(on_cells(below_gate), "{{cell}} below the gate", ref="E"),
            )
            .min(0)
            .max(1)
            .override_by_query("B", DASHED)
            .override_by_query("C", DASHED)
            .override_by_query(
                "D",
                [
                    gmodel.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"}),
                    gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 5]}),
                ],
            )
            .override_by_query("E", _line("red")),
            _table(
                "GSM8K accuracy now",
                "Last accuracy of every cell, lowest first, with its Wilson interval, the gate and, for P/D cells, "
                "the exact McNemar p-value against the aggregated control on the same questions (small: P/D answers "
                "differently from its control beyond chance).",
                U_RATIO,
                _query(f"{accuracy_exported.ACCURACY.name}{selector()}", ref="A", instant=True),
                _query(f"{accuracy_exported.ACCURACY_LOW.name}{selector()}", ref="B", instant=True),
                _query(f"{accuracy_exported.ACCURACY_HIGH.name}{selector()}", ref="C", instant=True),
                _query(f"{accuracy_exported.ACCURACY_THRESHOLD.name}{selector()}", ref="D", instant=True),
                _query(f"{accuracy_exported.ACCURACY_PAIRED_P.name}{selector()}", ref="E", instant=True),
                span=12,
            )
            .override_by_name(
                "McNemar p vs control",
                [
                    gmodel.DynamicConfigValue(id_val="unit", value="none"),
                    gmodel.DynamicConfigValue(id_val="decimals", value=4),
                ],
            )
            .with_transformation(gmodel.DataTransformerConfig(id_val="merge", options={}))
            .with_transformation(
                _organize(
                    accuracy_hidden,
                    {
                        "Value #A": "accuracy",
                        "Value #B": "Wilson low",
                        "Value #C": "Wilson high",
                        "Value #D": "gate",
                        "Value #E": "McNemar p vs control",
                    },
                )
            )
            .sort_by(_sort("accuracy", desc=False)),
        ],
    )


def performance() -> gdash.Dashboard:
    """Throughput, latency and GSM8K accuracy over time; baseline vs candidate."""
    q = _performance_queries()
    board = (
        gdash.Dashboard("vLLM canary: performance and accuracy")
        .uid("vllm-canary-performance")
        .description(
            "Throughput, latency and GSM8K accuracy of every canary cell. "
            "Generated by canary/export/prometheus/dashboards.py."
        )
        .tags(TAGS)
        .editable()
        .time("now-30d", "now")
        .refresh("5m")
        .tooltip(gmodel.DashboardCursorSync.CROSSHAIR)
        .variables(_variables(percentile=True))  # type: ignore[arg-type]
    )
    return assemble(
        board,
        [
            _throughput_row(q),
            _slo_capacity_and_disaggregation_gain_row(q),
            _latency_under_load_row(q),
            _gsm8k_accuracy_row(q),
        ],
    )
