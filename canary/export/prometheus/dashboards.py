"""Grafana dashboards of the canary, generated from code (grafana-foundation-sdk, Grafana 11).

`python -m canary.export.prometheus.dashboards --out configs/dashboards` (or `make dashboards`) regenerates the JSON;
it is committed and shipped by the canary chart as a ConfigMap for Grafana's dashboard sidecar.
A test fails when the committed JSON is stale.

Every query is built from the metric names and labels of canary.export.prometheus.schema, so the
dashboards, the exporters and the alert rules cannot drift apart; the Prometheus tests run
each panel query against a real Prometheus holding a pushed run.

Dashboards:
- vllm-canary-overview: last run, failing cells, the matrix status (backend x block size per
  topology and image, coloured by verdict), status history of cells and checks, startup times
  and failure classes, P/D health (NIXL bytes, greedy parity), KV fidelity against the null arm
  (KL, |delta logprob|, top-1 agreement, failing prompts, first divergent block) and drift of
  candidate images against the baseline image.
- vllm-canary-performance: throughput and latency trends (TTFT/TPOT/ITL/E2E percentiles), GSM8K
  accuracy with its Wilson bounds and gate, baseline vs candidate images.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as gcommonb
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import statushistory as gstatus
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as gcommon
from grafana_foundation_sdk.models import dashboard as gmodel
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from canary.export.prometheus import schema as s
from canary.judge.verdicts import VERDICT_COLOR

DATASOURCE = gmodel.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Dashboard variables filtering cell metrics (name -> label); "All" is the regex .* so a label a
# source does not set (scope for the textfile and the exporter) still matches.
FILTERS: dict[str, str] = {
    "scope": "scope",
    "image": "image",
    "topology": "topology",
    "model": "model",
    "backend": "backend",
}
VARIABLE_SOURCE = s.CELL_STATUS.name
TAGS = ["vllm", "canary"]


def selector(*extra: str, skip: Sequence[str] = ()) -> str:
    """The label matchers of every filter variable, plus extra matchers."""
    matchers = [f'{label}=~"${var}"' for var, label in FILTERS.items() if var not in skip]
    return "{" + ",".join([*matchers, *extra]) + "}"


def scope_only() -> str:
    """Matchers for run-level metrics (they carry no cell labels)."""
    return '{scope=~"$scope"}'


def _verdict_mappings() -> list[gmodel.ValueMapping]:
    options = {
        str(code): gmodel.ValueMappingResult(text=verdict, color=VERDICT_COLOR[verdict], index=code)
        for verdict, code in s.VERDICT_CODES.items()
    }
    return [gmodel.ValueMap(options=options)]


def _query(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False) -> gprom.Dataquery:
    query = gprom.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        query = query.legend_format(legend)
    return query.instant().format(PromQueryFormat.TABLE) if instant else query.range()


# --------------------------------------------------------------------------- variables


def _variables(percentile: bool) -> list[gdash.DatasourceVariable | gdash.QueryVariable | gdash.CustomVariable]:
    out: list[gdash.DatasourceVariable | gdash.QueryVariable | gdash.CustomVariable] = [
        gdash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    ]
    for var, label in FILTERS.items():
        source = s.RUN_TIMESTAMP.name if var == "scope" else VARIABLE_SOURCE
        out.append(
            gdash.QueryVariable(var)
            .label(var)
            .datasource(DATASOURCE)
            .query(f"label_values({source}, {label})")
            .refresh(gmodel.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(gmodel.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(gmodel.VariableOption(selected=True, text="All", value="$__all"))
        )
    if percentile:
        out.append(
            gdash.CustomVariable("percentile")
            .label("percentile")
            .values(",".join(s.PERCENTILES))
            .multi(True)
            .include_all(True)
            .all_value("|".join(s.PERCENTILES))
            .current(gmodel.VariableOption(selected=True, text="p50", value="p50"))
        )
    return out


# --------------------------------------------------------------------------- panels


def _timeseries(title: str, description: str, unit: str, *queries: gprom.Dataquery) -> gts.Panel:
    panel = (
        gts.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(12)
        .show_points(gcommon.VisibilityMode.ALWAYS)
        .point_size(5)
        .span_nulls(True)
        .legend(
            gcommonb.VizLegendOptions()
            .display_mode(gcommon.LegendDisplayMode.TABLE)
            .placement(gcommon.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["lastNotNull"])
        )
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _stat(title: str, description: str, unit: str, query: gprom.Dataquery, span: int = 6) -> gstat.Panel:
    return (
        gstat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(4)
        .span(span)
        .with_target(query)
        .reduce_options(gcommonb.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def _status_history(title: str, description: str, query: gprom.Dataquery) -> gstatus.Panel:
    return (
        gstatus.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(10)
        .span(24)
        .with_target(query)
        .mappings(_verdict_mappings())
        .color_scheme(gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color("transparent"))
        .show_value(gcommon.VisibilityMode.NEVER)
        .legend(gcommonb.VizLegendOptions().show_legend(False))
    )


def _table(title: str, description: str, *queries: gprom.Dataquery, height: int = 8, span: int = 24) -> gtable.Panel:
    panel = gtable.Panel().title(title).description(description).datasource(DATASOURCE).height(height).span(span)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _organize(exclude: Sequence[str], rename: dict[str, str] | None = None) -> gmodel.DataTransformerConfig:
    return gmodel.DataTransformerConfig(
        id_val="organize",
        options={"excludeByName": {name: True for name in exclude}, "renameByName": rename or {}},
    )


def _matrix_panel() -> gtable.Panel:
    """Backend (columns) x block sizes (rows) coloured by verdict; one panel per topology, a row per image."""
    blocks = f'label_join({s.CELL_STATUS.name}{selector()}, "blocks", "/", "prefill_block_size", "decode_block_size")'
    expr = f'label_join({blocks}, "row", " ", "blocks", "kv_cache_dtype", "runner", "model")'
    return (
        _table(
            "Matrix status: $topology",
            "Last verdict of every cell: rows prefill/decode block size, KV dtype, runner, model; "
            "columns attention backend. Colours as the verdict legend of summary.md.",
            _query(expr, ref="A", instant=True),
            height=9,
            span=12,
        )
        .repeat("topology")
        .repeat_direction("h")
        .max_per_row(2)
        .with_transformation(
            gmodel.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "backend", "rowField": "row", "valueField": "Value", "emptyValue": "null"},
            )
        )
        .mappings(_verdict_mappings())
        .cell_options(gcommon.TableColoredBackgroundCellOptions(mode=gcommon.TableCellBackgroundDisplayMode.BASIC))
        .align(gcommon.FieldTextAlignment.CENTER)
        .override_by_name(
            "row\\backend",
            [
                gmodel.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "auto"}),
                gmodel.DynamicConfigValue(id_val="displayName", value="block p/d · kv · runner · model"),
                gmodel.DynamicConfigValue(id_val="custom.align", value="left"),
            ],
        )
    )


CELL_COLUMNS_HIDDEN = ("Time", "__name__", "job", "instance", "Value")


def overview() -> gdash.Dashboard:
    """The matrix at a glance: last run, failures, status heatmaps, startup, P/D health."""
    failing_matcher = f'verdict=~"{s.FAILING_VERDICT_REGEX}"'
    failing = f"{s.CELL_VERDICT.name}{selector(failing_matcher)} == 1"
    pd_only = selector('topology="pd-nixl"')
    return (
        gdash.Dashboard("vLLM canary: overview")
        .uid("vllm-canary-overview")
        .description(
            "The vLLM P/D canary matrix: verdicts, startup, KV transfer. "
            "Generated by canary/export/prometheus/dashboards.py."
        )
        .tags(TAGS)
        .editable()
        .time("now-7d", "now")
        .refresh("5m")
        .tooltip(gmodel.DashboardCursorSync.CROSSHAIR)
        .variables(_variables(percentile=False))  # type: ignore[arg-type]
        .with_row(gdash.Row("Last run"))
        .with_panel(
            _stat(
                "Since the last run",
                "Time since the newest run finished (alert CanaryStale above 48 h).",
                "s",
                _query(f"time() - max({s.RUN_TIMESTAMP.name}{scope_only()})"),
            ).thresholds(
                gdash.ThresholdsConfig()
                .mode(gmodel.ThresholdsMode.ABSOLUTE)
                .steps(
                    [
                        gmodel.Threshold(value=None, color="green"),
                        gmodel.Threshold(value=86400 * 1.5, color="orange"),
                        gmodel.Threshold(value=86400 * 2, color="red"),
                    ]
                )
            )
        )
        .with_panel(
            _stat(
                "Run duration",
                "Wall time of the newest run.",
                "s",
                _query(f"max({s.RUN_DURATION.name}{scope_only()})"),
            )
        )
        .with_panel(
            _stat(
                "Cells by verdict",
                "Cells of the newest run per verdict.",
                "none",
                _query(f"sum by (verdict) ({s.RUN_CELLS.name}{scope_only()})", "{{verdict}}"),
                span=12,
            )
        )
        .with_panel(
            _table(
                "Failing cells",
                "Cells whose verdict fails the run (fail, error, unexpected-pass, invalid): alert CanaryCellFailing.",
                _query(failing, instant=True),
            ).with_transformation(_organize(CELL_COLUMNS_HIDDEN))
        )
        .with_row(gdash.Row("Matrix status: $image").repeat("image"))
        .with_panel(_matrix_panel())
        .with_row(gdash.Row("Status history"))
        .with_panel(
            _status_history(
                "Cell verdicts over time",
                "One row per cell, one column per run: the matrix over time.",
                _query(f"max by (cell) ({s.CELL_STATUS.name}{selector()})", "{{cell}}"),
            )
        )
        .with_panel(
            _status_history(
                "Check verdicts over time",
                "One row per cell and check.",
                _query(f"max by (cell, check) ({s.CHECK_STATUS.name}{selector()})", "{{cell}} {{check}}"),
            )
        )
        .with_row(gdash.Row("Startup"))
        .with_panel(
            _timeseries(
                "Startup time",
                "Launch until every server of the cell was ready.",
                "s",
                _query(f"{s.STARTUP_SECONDS.name}{selector()}", "{{cell}}"),
            )
        )
        .with_panel(
            _table(
                "Startup failures",
                "Cells that did not start, with the failure class from the signature catalog.",
                _query(f"{s.STARTUP_FAILURE.name}{selector()} == 1", instant=True),
                span=12,
            ).with_transformation(_organize(CELL_COLUMNS_HIDDEN))
        )
        .with_row(gdash.Row("Rolling coverage"))
        .with_panel(
            _table(
                "Cell age (rolling coverage)",
                "Time since each planned cell was last checked: a matrix larger than one night runs its nightly "
                "cells every night and the rest in rotation (target.kubernetes.gpu_budget, rotation).",
                _query(f"time() - max by (cell) ({s.CELL_LAST_CHECKED.name}{selector()})", instant=True),
                span=24,
            ).with_transformation(_organize(("Time",), {"Value": "age (s)"}))
        )
        .with_row(gdash.Row("Prefill/decode"))
        .with_panel(
            _timeseries(
                "KV bytes moved by NIXL",
                "Bytes the decode server received from prefill during the checks: 0 means decode recomputed the "
                "prefill (alert CanaryPDWithoutKVTransfer).",
                "bytes",
                _query(f"{s.NIXL_BYTES.name}{pd_only}", "{{cell}}"),
            )
        )
        .with_panel(
            _timeseries(
                "Decode prompt tokens recomputed",
                f"{s.DECODE_RECOMPUTED.help} Near 1: decode did the prefill again.",
                "percentunit",
                _query(f"{s.DECODE_RECOMPUTED.name}{pd_only}", "{{cell}}"),
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            _timeseries(
                "Greedy token parity vs the aggregated control",
                "Share of prompts whose greedy tokens are identical through P/D and the aggregated control.",
                "percentunit",
                _query(f"{s.PARITY.name}{selector()}", "{{cell}}"),
            )
            .min(0)
            .max(1)
        )
        .with_row(gdash.Row("KV fidelity (parity)"))
        .with_panel(
            _timeseries(
                "Worst P/D prompt over the noise floor",
                f"{s.PARITY_KL_OVER_FLOOR.help} B: {s.PARITY_ABS_DLOGPROB_OVER_FLOOR.help} "
                "Alert CanaryKVFidelityBreach when the parity check fails.",
                "none",
                _query(f"{s.PARITY_KL_OVER_FLOOR.name}{pd_only}", "{{cell}} KL"),
                _query(f"{s.PARITY_ABS_DLOGPROB_OVER_FLOOR.name}{pd_only}", "{{cell}} |dlogprob|", ref="B"),
            )
            .scale_distribution(gcommonb.ScaleDistributionConfig().type(gcommon.ScaleDistribution.LOG).log(10))
            .thresholds(_over_floor_thresholds())
        )
        .with_panel(
            _timeseries(
                "KL estimate against the control and the null floor",
                "Max (A) and mean (B) per-position top-k KL of P/D output under its control (nats); C: "
                + s.PARITY_NULL_KL_MAX.help,
                "none",
                _query(f"{s.PARITY_KL_MAX.name}{pd_only}", "{{cell}} max"),
                _query(f"{s.PARITY_KL_MEAN.name}{pd_only}", "{{cell}} mean", ref="B"),
                _query(f"{s.PARITY_NULL_KL_MAX.name}{selector()}", "{{cell}} null floor", ref="C"),
            ).override_by_query(
                "C", [gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [4, 4]})]
            )
        )
        .with_panel(_fidelity_table())
        .with_panel(
            _timeseries(
                "Drift against the baseline image",
                f"{s.PARITY_DRIFT_KL_OVER_FLOOR.help} Alert CanaryImageDrift when a drift gate fails.",
                "none",
                _query(f"{s.PARITY_DRIFT_KL_OVER_FLOOR.name}{selector()}", "{{cell}}"),
            ).thresholds(_over_floor_thresholds())
        )
        .with_panel(_drift_table())
    )


def _over_floor_thresholds() -> gdash.ThresholdsConfig:
    """Green up to the gate's threshold (1), red beyond."""
    return (
        gdash.ThresholdsConfig()
        .mode(gmodel.ThresholdsMode.ABSOLUTE)
        .steps([gmodel.Threshold(value=None, color="green"), gmodel.Threshold(value=1, color="red")])
    )


def _instant_table(
    title: str, description: str, columns: Sequence[tuple[s.MetricSpec, str]], span: int
) -> gtable.Panel:
    """One row per cell, one column per metric (instant queries, merged)."""
    refs = [chr(ord("A") + index) for index in range(len(columns))]
    queries = [
        _query(f"{spec.name}{selector()}", ref=ref, instant=True) for ref, (spec, _) in zip(refs, columns, strict=True)
    ]
    hidden = (*CELL_COLUMNS_HIDDEN[:-1], "model", "prefill_block_size", "decode_block_size", "scope", "kv_cache_dtype")
    rename = {f"Value #{ref}": name for ref, (_, name) in zip(refs, columns, strict=True)}
    return (
        _table(title, description, *queries, span=span)
        .with_transformation(gmodel.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(_organize(hidden, rename))
    )


def _fidelity_table() -> gtable.Panel:
    columns = (
        (s.PARITY_FAILING_PROMPTS, "failing prompts"),
        (s.PARITY_FIRST_DIVERGENT_BLOCK, "first divergent block"),
        (s.PARITY_EVIDENCE_PROMPTS, "evidence prompts"),
        (s.PARITY_REJECTED_PROMPTS, "rejected as evidence"),
        (s.PARITY_PROMPTS, "prompts"),
        (s.PARITY_TOP1_AGREE_MIN, "top-1 agreement min"),
        (s.PARITY_ABS_DLOGPROB_MAX, "max |dlogprob|"),
        (s.PARITY_NULL_ABS_DLOGPROB_MAX, "null max |dlogprob|"),
        (s.PARITY_NULL_TOKEN_FLIPS, "null token flips"),
        (s.PARITY_FIRST_DIFF, "first differing token"),
    )
    return _instant_table(
        "KV fidelity now",
        "Last parity result of every cell: P/D prompts beyond the null arm and the KV block their divergence "
        "starts at (in blocks of the smaller logical block size), prompts kept and rejected as evidence, top-1 "
        "agreement and |delta logprob| against the control and the control's own noise. Per-prompt series: "
        "results.json (evidence.per_prompt).",
        columns,
        24,
    )


def _drift_table() -> gtable.Panel:
    columns = (
        (s.PARITY_DRIFT_FAILED_GATES, "failed drift gates"),
        (s.PARITY_DRIFT_TOKEN_FLIPS, "prompts with other tokens"),
        (s.PARITY_DRIFT_PROMPTS, "prompts compared"),
        (s.PARITY_DRIFT_KL_MAX, "KL max"),
        (s.PARITY_DRIFT_ABS_DLOGPROB_MAX, "max |dlogprob|"),
        (s.PARITY_DRIFT_FIRST_DIFF, "first differing token"),
    )
    return _instant_table(
        "Drift now",
        "Candidate images' aggregated controls against the same cell on the baseline image (same prompts, same "
        "run): the size of the difference, gated against both images' null arms.",
        columns,
        12,
    )


def _latency_panel(kind: str) -> gts.Panel:
    spec = s.LATENCY[kind]
    percentiles = selector('percentile=~"$percentile"')
    return _timeseries(
        f"{kind.upper()}: {s.LATENCIES[kind]}",
        f"{spec.help} Percentiles: the percentile variable.",
        "s",
        _query(f"{spec.name}{percentiles}", "{{cell}} {{percentile}}"),
    )


def _baseline_ratio_expr() -> str:
    """Candidate / baseline output tokens/s per cell (the CanaryThroughputRegression ratio)."""
    metric = s.OUTPUT_TOKENS_PER_S.name
    baseline = f'{s.IMAGE_INFO.name}{{baseline="true"}}'
    return (
        f"({metric}{selector()} unless on (job, scope, image) {baseline})"
        f" / ignoring (cell, image) group_left () "
        f"({metric}{selector(skip=('image',))} and on (job, scope, image) {baseline})"
    )


def performance() -> gdash.Dashboard:
    """Throughput, latency and GSM8K accuracy over time; baseline vs candidate."""
    coords = (
        f'label_join({s.OUTPUT_TOKENS_PER_S.name}{selector()}, "coordinates", " ", '
        '"topology", "backend", "prefill_block_size", "decode_block_size", "kv_cache_dtype", "runner", "model")'
    )
    accuracy_hidden = (*CELL_COLUMNS_HIDDEN[:-1], "model", "prefill_block_size", "decode_block_size", "scope")
    return (
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
        .with_row(gdash.Row("Throughput"))
        .with_panel(
            _timeseries(
                "Output tokens per second",
                s.OUTPUT_TOKENS_PER_S.help,
                "none",
                _query(f"{s.OUTPUT_TOKENS_PER_S.name}{selector()}", "{{cell}}"),
            )
        )
        .with_panel(
            _timeseries(
                "Requests per second and goodput",
                f"{s.REQUESTS_PER_S.help} Goodput (B): {s.GOODPUT_PER_S.help}",
                "reqps",
                _query(f"{s.REQUESTS_PER_S.name}{selector()}", "{{cell}}"),
                _query(f"{s.GOODPUT_PER_S.name}{selector()}", "{{cell}} goodput", ref="B"),
            ).override_by_query(
                "B", [gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})]
            )
        )
        .with_panel(
            _timeseries(
                "Change points in the run history",
                s.HISTORY_CHANGE_WORSE.help,
                "percentunit",
                _query(f"{s.HISTORY_CHANGE_WORSE.name}{selector()}", "{{cell}} {{metric}}"),
            )
        )
        .with_row(gdash.Row("Latency under load"))
        .with_panel(_latency_panel("ttft"))
        .with_panel(_latency_panel("tpot"))
        .with_panel(_latency_panel("itl"))
        .with_panel(_latency_panel("e2e"))
        .with_row(gdash.Row("GSM8K accuracy"))
        .with_panel(
            _timeseries(
                "GSM8K accuracy with Wilson bounds",
                "Accuracy (solid), the Wilson interval (dashed, B and C) and the threshold (red, D): a cell fails "
                "when its upper bound is below the threshold (alert CanaryAccuracyBelowGate).",
                "percentunit",
                _query(f"{s.ACCURACY.name}{selector()}", "{{cell}}"),
                _query(f"{s.ACCURACY_LOW.name}{selector()}", "{{cell}} lower", ref="B"),
                _query(f"{s.ACCURACY_HIGH.name}{selector()}", "{{cell}} upper", ref="C"),
                _query(f"max({s.ACCURACY_THRESHOLD.name}{selector()})", "threshold", ref="D"),
            )
            .min(0)
            .max(1)
            .override_by_query(
                "B", [gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [4, 4]})]
            )
            .override_by_query(
                "C", [gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [4, 4]})]
            )
            .override_by_query(
                "D",
                [
                    gmodel.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"}),
                    gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 5]}),
                ],
            )
        )
        .with_panel(
            _table(
                "GSM8K accuracy now",
                "Last accuracy of every cell with its Wilson interval, threshold and, for P/D cells, the paired "
                "McNemar p-value against the aggregated control.",
                _query(f"{s.ACCURACY.name}{selector()}", ref="A", instant=True),
                _query(f"{s.ACCURACY_LOW.name}{selector()}", ref="B", instant=True),
                _query(f"{s.ACCURACY_HIGH.name}{selector()}", ref="C", instant=True),
                _query(f"{s.ACCURACY_THRESHOLD.name}{selector()}", ref="D", instant=True),
                _query(f"{s.ACCURACY_PAIRED_P.name}{selector()}", ref="E", instant=True),
                span=12,
            )
            .unit("percentunit")
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
                        "Value #D": "threshold",
                        "Value #E": "McNemar p vs control",
                    },
                )
            )
        )
        .with_row(gdash.Row("Baseline vs candidate"))
        .with_panel(
            _table(
                "Output tokens/s by image",
                "The same cell coordinates on every image, side by side (last run).",
                _query(coords, ref="A", instant=True),
                span=12,
            ).with_transformation(
                gmodel.DataTransformerConfig(
                    id_val="groupingToMatrix",
                    options={"columnField": "image", "rowField": "coordinates", "valueField": "Value"},
                )
            )
        )
        .with_panel(
            _timeseries(
                "Candidate / baseline output tokens per second",
                "Per non-baseline cell: its output tokens/s over the same cell's on the baseline image "
                "(alert CanaryThroughputRegression below 0.8).",
                "percentunit",
                _query(_baseline_ratio_expr(), "{{cell}}"),
            )
        )
    )


# --------------------------------------------------------------------------- output


@dataclass(frozen=True)
class Rendered:
    """One dashboard as committed: file name and JSON text."""

    filename: str
    text: str


def render_all() -> list[Rendered]:
    """Every dashboard as the JSON text that is committed."""
    out = []
    for builder in (overview(), performance()):
        model = builder.build()
        for index, panel in enumerate(model.panels or [], start=1):
            panel.id_val = index  # unique, stable ids: Grafana links and repeats rely on them
        text = json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        out.append(Rendered(f"{model.uid}.json", text))
    return out


def write_all(out_dir: Path) -> list[Path]:
    """Write every dashboard into out_dir; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rendered in render_all():
        path = out_dir / rendered.filename
        path.write_text(rendered.text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: python -m canary.export.prometheus.dashboards --out configs/dashboards."""
    parser = argparse.ArgumentParser(
        prog="python -m canary.export.prometheus.dashboards", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=Path("configs/dashboards"), help="output directory")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
