"""Grafana dashboards of the canary, generated from code (grafana-foundation-sdk, Grafana 11).

`python -m canary.export.prometheus.dashboards --out configs/dashboards` (or `make dashboards`) regenerates the JSON;
it is committed and shipped by the canary chart as a ConfigMap for Grafana's dashboard sidecar.
A test fails when the committed JSON is stale.

Every query is built from the metric names and labels of canary.export.prometheus.schema, so the
dashboards, the exporters and the alert rules cannot drift apart; a panel that names an alert shows
that alert's own expression, read from configs/alerts/canary-rules.yaml (canary.export.prometheus.alerts),
never a copy. Every query is kept to the chosen job and scope (several canaries may share one
Prometheus), panels of cells show the $limit worst (a GPU matrix has hundreds of cells), every panel
has a unit and a description that explains its words (tests/unit/export/prometheus/test_dashboards.py);
the Prometheus tests run each panel query against a real Prometheus holding a pushed run, also a
GPU-sized matrix (tests/prometheus/test_prom_gpu_matrix.py).

Dashboards:
- vllm-canary-overview: alerts firing now (one number per rule), last run (age, outcome, duration,
  cells by verdict), failing cells (CanaryCellFailing: fail, unexpected-pass) apart from
  inconclusive ones (invalid, error), both grouped by backend and block size, the matrix status
  (backend x block size per topology and image, coloured by verdict), the worst cells and checks
  over time, slowest startups and failure classes, cell age (stale and oldest cells of a rotating
  matrix), P/D health (NIXL bytes, recomputed prompt tokens, greedy parity), KV fidelity against
  the null floor (the gate's threshold drawn, cells reading corrupt KV) and drift of candidate
  images against the baseline image.
- vllm-canary-performance: the slowest cells' throughput and latency (TTFT/TPOT/ITL/E2E
  percentiles), history change points, candidate/baseline throughput with the alert's threshold,
  SLO capacity with its interval and each P/D cell's disaggregation gain over its control (where
  checks.throughput.capacity ran), GSM8K accuracy with its Wilson bounds and gate.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge as gbar
from grafana_foundation_sdk.builders import common as gcommonb
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import statushistory as gstatus
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as gcommon
from grafana_foundation_sdk.models import dashboard as gmodel
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from canary.checks.parity import metrics as parity_metrics
from canary.export.prometheus import alerts
from canary.export.prometheus import schema as s
from canary.judge import verdicts
from canary.judge.verdicts import VERDICT_COLOR
from canary.plan.cell import HIGH_RISKS, RISKS

DATASOURCE = gmodel.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Dashboard variables filtering cell metrics (name -> label), each listing only the values the ones
# before it leave (job, then scope, then the cell coordinates), so several canaries on one
# Prometheus do not mix. "All" is the regex .* so a label a source does not set (scope for the
# textfile and the exporter) still matches.
FILTERS: dict[str, str] = {
    "job": "job",
    "scope": "scope",
    "image": "image",
    "topology": "topology",
    "model": "model",
    "backend": "backend",
}
RUN_FILTERS = ("job", "scope")
"""The filters run-level metrics carry (they have no cell labels)."""
VARIABLE_SOURCE = s.CELL_STATUS.name
LIMIT_VAR = "limit"
LIMIT_CHOICES = ("5", "10", "20", "50")
LIMIT_DEFAULT = "10"
"""Top-N panels show the $limit worst cells: readable with a GPU matrix of hundreds of cells."""
TAGS = ["vllm", "canary"]

# Units of the panels (Grafana unit ids; `suffix:` is Grafana's custom unit).
U_TOKENS_PER_S = "suffix:tok/s"
U_REQUESTS_PER_S = "reqps"
U_SECONDS = "s"
U_BYTES = "bytes"
U_RATIO = "percentunit"
U_NATS = "suffix:nats"
U_OVER_THRESHOLD = "suffix:× threshold"
U_CELLS = "suffix:cells"
U_CANARIES = "suffix:canaries"
U_FIRING = "suffix:firing"
U_PROMPTS = "suffix:prompts"
U_GATES = "suffix:gates"
U_POSITION = "suffix:tokens"
U_BLOCK = "suffix:block"
U_GAIN = "suffix:× scaled control"
"""A disaggregation gain: P/D capacity over the aggregated control's scaled to the pair's engines."""
U_VERDICT = "none"
"""Verdict codes: shown as the verdict's word by value mappings, never as a number."""

# Words a newcomer needs, said where they appear (no README needed).
GLOSSARY: dict[str, str] = {
    "null floor": (
        "Null floor: how far the aggregated control differs from ITSELF when nothing is wrong (the same "
        "prompts again in another batch, from the prefix cache, re-scored teacher-forced), measured in the same "
        "run on the same engine; a P/D difference counts only beyond a margin over it."
    ),
    "evidence prompts": (
        "Evidence prompts: parity prompts whose output really depends on their first KV block (replacing that "
        "block changes the output), so a corrupt KV transfer would show in them; the others are rejected as "
        "evidence."
    ),
    "× threshold": (
        "× threshold: the value divided by its gate's threshold (margin × null floor + a float tolerance); "
        "above 1 (the red line) the worst prompt is beyond the engine's own noise and the gate fails."
    ),
    "SLO capacity": (
        "SLO capacity: the highest open-loop request rate at which the capacity SLO (checks.throughput.capacity: "
        "TTFT and per-request inter-token limits met by the target share of requests) still held, found by "
        "probing rates; its interval is where the probes were conclusive (Wilson bounds of the attainment). "
        "A bound the search could not establish has no series: a missing line or an empty column, never 0."
    ),
    "disaggregation gain": (
        "Disaggregation gain: a P/D cell's SLO capacity over its aggregated control's multiplied by the engine "
        "scale (x2: prefill + decode against one server, tensor parallel counted), the linear-scaling "
        "assumption: no 2-engine aggregated deployment is measured. 1: P/D carries what the same engines "
        "would aggregated; the interval divides the P/D interval's ends by the scaled control's opposite ends."
    ),
    "KL": (
        "KL: top-k estimate of the Kullback-Leibler divergence of the P/D output distribution from the "
        "control's at one output position, in nats (0: identical)."
    ),
}
OVER_FLOOR_LIMIT = parity_metrics.OVER_FLOOR_LIMIT
"""Where an *_over_floor value crosses its gate's threshold (the same threshold the parity gate uses)."""
STATUS_CODE_FAILING = min(s.VERDICT_CODES[v] for v in verdicts.FAILING_VERDICTS)
"""Verdict codes at or above this keep a run from passing (failing or inconclusive)."""
if {v for v, code in s.VERDICT_CODES.items() if code >= STATUS_CODE_FAILING} != verdicts.FAILING_VERDICTS:
    raise ValueError("the verdict codes of failing verdicts must be the highest")
FAILED_WORD = verdicts.OUTCOME_WORD["failed"]
INCONCLUSIVE_WORD = verdicts.OUTCOME_WORD["inconclusive"]


def explain(*terms: str) -> str:
    """The glossary sentences of terms, for a panel description."""
    return " ".join(GLOSSARY[term] for term in terms)


def selector(*extra: str, skip: Sequence[str] = ()) -> str:
    """The label matchers of every filter variable, plus extra matchers."""
    matchers = [f'{label}=~"${var}"' for var, label in FILTERS.items() if var not in skip]
    return "{" + ",".join([*matchers, *extra]) + "}"


def run_selector(*extra: str) -> str:
    """Matchers for run-level metrics (they carry no cell labels): job and scope."""
    return "{" + ",".join([*(f'{FILTERS[var]}=~"${var}"' for var in RUN_FILTERS), *extra]) + "}"


def on_cells(expr: str) -> str:
    """An expression (an alert's, unchanged) kept to the cells the variables select."""
    return f"({expr}) and on (job, scope, cell) {s.CELL_STATUS.name}{selector()}"


def on_runs(expr: str) -> str:
    """A run-level expression (an alert's, unchanged) kept to the canaries the variables select."""
    return f"({expr}) and on (job, scope) {s.RUN_TIMESTAMP.name}{run_selector()}"


def top(expr: str, *, worst: str = "topk") -> str:
    """The $limit worst series of expr (topk: the largest, bottomk: the smallest)."""
    return f"{worst}(${LIMIT_VAR}, {expr})"


def alert_expr(name: str) -> str:
    """The alert's expression exactly as the rules file has it."""
    return alerts.rule(name).expr


def _verdict_mappings() -> list[gmodel.ValueMapping]:
    options = {
        str(code): gmodel.ValueMappingResult(text=verdict, color=VERDICT_COLOR[verdict], index=code)
        for verdict, code in s.VERDICT_CODES.items()
    }
    return [gmodel.ValueMap(options=options)]


def _verdict_word_mappings() -> list[gmodel.ValueMapping]:
    """The verdict label's words in the verdict colours (tables of cells)."""
    options = {
        verdict: gmodel.ValueMappingResult(text=verdict, color=VERDICT_COLOR[verdict], index=index)
        for index, verdict in enumerate(s.VERDICT_CODES)
    }
    return [gmodel.ValueMap(options=options)]


def _outcome_mappings() -> list[gmodel.ValueMapping]:
    options = {
        str(code): gmodel.ValueMappingResult(
            text=verdicts.OUTCOME_WORD[outcome], color=verdicts.OUTCOME_COLOR[outcome], index=code
        )
        for outcome, code in verdicts.OUTCOME_CODES.items()
    }
    return [gmodel.ValueMap(options=options)]


def _query(
    expr: str, legend: str = "", ref: str = "A", *, instant: bool = False, table: bool = True
) -> gprom.Dataquery:
    query = gprom.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        query = query.legend_format(legend)
    if instant:
        query = query.instant()
        return query.format(PromQueryFormat.TABLE) if table else query
    return query.range()


def _steps(*steps: tuple[float | None, str]) -> gdash.ThresholdsConfig:
    return (
        gdash.ThresholdsConfig()
        .mode(gmodel.ThresholdsMode.ABSOLUTE)
        .steps([gmodel.Threshold(value=value, color=color) for value, color in steps])
    )


def _line(color: str) -> list[gmodel.DynamicConfigValue]:
    """Draw a query's series as big points of one colour (the cells an alert fires for)."""
    return [
        gmodel.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color}),
        gmodel.DynamicConfigValue(id_val="custom.pointSize", value=12),
        gmodel.DynamicConfigValue(id_val="custom.lineWidth", value=0),
    ]


def _fixed(color: str) -> list[gmodel.DynamicConfigValue]:
    return [gmodel.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})]


DASHED = [gmodel.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [4, 4]})]


# --------------------------------------------------------------------------- variables


def _variables(percentile: bool) -> list[gdash.DatasourceVariable | gdash.QueryVariable | gdash.CustomVariable]:
    out: list[gdash.DatasourceVariable | gdash.QueryVariable | gdash.CustomVariable] = [
        gdash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    ]
    chosen: list[str] = []
    for var, label in FILTERS.items():
        run_level = var in RUN_FILTERS
        source = s.RUN_TIMESTAMP.name if run_level else VARIABLE_SOURCE
        matchers = ",".join(f'{FILTERS[v]}=~"${v}"' for v in chosen)
        out.append(
            gdash.QueryVariable(var)
            .label(var)
            .datasource(DATASOURCE)
            .query(f"label_values({source}{{{matchers}}}, {label})" if matchers else f"label_values({source}, {label})")
            .refresh(gmodel.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(gmodel.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(gmodel.VariableOption(selected=True, text="All", value="$__all"))
        )
        chosen.append(var)
    out.append(
        gdash.CustomVariable(LIMIT_VAR)
        .label("top N")
        .description("How many of the worst cells the top-N panels show.")
        .values(",".join(LIMIT_CHOICES))
        .current(gmodel.VariableOption(selected=True, text=LIMIT_DEFAULT, value=LIMIT_DEFAULT))
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


def _timeseries(title: str, description: str, unit: str, *queries: gprom.Dataquery, span: int = 12) -> gts.Panel:
    panel = (
        gts.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(span)
        .show_points(gcommon.VisibilityMode.ALWAYS)
        .point_size(5)
        .span_nulls(True)
        .legend(
            gcommonb.VizLegendOptions()
            .display_mode(gcommon.LegendDisplayMode.TABLE)
            .placement(gcommon.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["lastNotNull"])
            .sort_by("Last *")
            .sort_desc(True)
        )
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _with_threshold_line(panel: gts.Panel, value: float, below: str = "green", above: str = "red") -> gts.Panel:
    """Colour steps at a gate's or alert's threshold, drawn as a dashed line."""
    return panel.thresholds(_steps((None, below), (value, above))).thresholds_style(
        gcommonb.GraphThresholdsStyleConfig().mode(gcommon.GraphThresholdsStyleMode.DASHED)
    )


def _stat(title: str, description: str, unit: str, *queries: gprom.Dataquery, span: int = 6) -> gstat.Panel:
    panel = (
        gstat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(4)
        .span(span)
        .reduce_options(gcommonb.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _status_history(title: str, description: str, query: gprom.Dataquery) -> gstatus.Panel:
    return (
        gstatus.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(U_VERDICT)
        .height(10)
        .span(24)
        .with_target(query)
        .mappings(_verdict_mappings())
        .color_scheme(gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color("transparent"))
        .show_value(gcommon.VisibilityMode.NEVER)
        .legend(gcommonb.VizLegendOptions().show_legend(False))
    )


def _table(
    title: str, description: str, unit: str, *queries: gprom.Dataquery, height: int = 8, span: int = 24
) -> gtable.Panel:
    panel = (
        gtable.Panel().title(title).description(description).datasource(DATASOURCE).unit(unit).height(height).span(span)
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _organize(exclude: Sequence[str], rename: dict[str, str] | None = None) -> gmodel.DataTransformerConfig:
    return gmodel.DataTransformerConfig(
        id_val="organize",
        options={"excludeByName": {name: True for name in exclude}, "renameByName": rename or {}},
    )


def _sort(field: str, desc: bool = True) -> list[cogbuilder.Builder[gcommon.TableSortByFieldState]]:
    return [gcommonb.TableSortByFieldState().display_name(field).desc(desc)]


def _bars(title: str, description: str, unit: str, *queries: gprom.Dataquery, span: int = 12) -> gbar.Panel:
    """Horizontal bars, one per series (counts of cells by group)."""
    panel = (
        gbar.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(span)
        .orientation(gcommon.VizOrientation.HORIZONTAL)
        .display_mode(gcommon.BarGaugeDisplayMode.BASIC)
        .show_unfilled(True)
        .min(0)
        .reduce_options(gcommonb.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _matrix_panel() -> gtable.Panel:
    """Backend (columns) x block sizes (rows) coloured by verdict; one panel per topology, a row per image."""
    blocks = f'label_join({s.CELL_STATUS.name}{selector()}, "blocks", "/", "prefill_block_size", "decode_block_size")'
    expr = f'label_join({blocks}, "row", " ", "blocks", "kv_cache_dtype", "runner", "model")'
    return (
        _table(
            "Matrix status: $topology",
            "Last verdict of every cell, one panel per topology (and a row of panels per image): rows are "
            "prefill/decode block size, KV-cache dtype, model runner and model; columns are attention backends. "
            "Colours and words are the verdicts of summary.md and the CLI.",
            U_VERDICT,
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


HIDDEN_COLUMNS = ("Time", "__name__", "instance")
"""Columns of an instant table nobody reads (job and scope stay: several canaries may share a Prometheus)."""
CELL_COLUMNS_HIDDEN = (*HIDDEN_COLUMNS, "Value", "model", "kernel_block_size", "runner")


def _cells_table(title: str, description: str, expr: str, span: int = 12) -> gtable.Panel:
    """Cells (one row each) of an instant query whose value is 1, with the verdict word in its colour."""
    return (
        _table(title, description, U_CELLS, _query(expr, instant=True), span=span)
        .with_transformation(_organize(CELL_COLUMNS_HIDDEN))
        .override_by_name(
            "verdict",
            [
                gmodel.DynamicConfigValue(id_val="mappings", value=_verdict_word_mappings()),
                gmodel.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ],
        )
        .sort_by(_sort("verdict"))
    )


GROUPING = "topology, backend, prefill_block_size, decode_block_size"
GROUP_LEGEND = "{{topology}} {{backend}} p{{prefill_block_size}}/d{{decode_block_size}}"


SEVERITY_COLOR = {"critical": "red", "warning": "orange"}


def _per_cell(expr: str) -> bool:
    """Whether an expression reads cell metrics (else only run-level ones)."""
    names = re.findall(r"\b(canary_[a-z0-9_]+)\b", expr)
    return any("cell" in s.METRICS_BY_NAME[name].labels for name in names)


def _alerts_now() -> gstat.Panel:
    """One number per alert rule: how many series its own expression returns now."""
    queries = []
    for index, rule in enumerate(alerts.rules().values()):
        scoped = on_cells(rule.expr) if _per_cell(rule.expr) else on_runs(rule.expr)
        queries.append(_query(f"count({scoped}) or vector(0)", rule.name, ref=chr(ord("A") + index)))
    critical = ", ".join(r.name for r in alerts.rules().values() if r.severity == "critical")
    warning = ", ".join(r.name for r in alerts.rules().values() if r.severity == "warning")
    panel = (
        _stat(
            "Alerts firing now",
            "How many cells (or canaries, for run-level rules) each alert rule fires for right now: every number is "
            "the rule's own expression from configs/alerts/canary-rules.yaml, kept to the selected job, scope and "
            f"cells. Critical, a finding about vLLM: {critical}. Warning, the canary's own trouble or a "
            f"change to look at: {warning}.",
            U_FIRING,
            *queries,
            span=24,
        )
        .thresholds(_steps((None, "green"), (1, SEVERITY_COLOR["critical"])))
        .color_mode(gcommon.BigValueColorMode.BACKGROUND)
        .text_mode(gcommon.BigValueTextMode.VALUE_AND_NAME)
    )
    for index, rule in enumerate(alerts.rules().values()):
        if rule.severity != "critical":  # a warning pages nobody: orange, not red
            color = SEVERITY_COLOR.get(rule.severity, "orange")
            steps = {"mode": "absolute", "steps": [{"color": "green", "value": None}, {"color": color, "value": 1}]}
            panel = panel.override_by_query(
                chr(ord("A") + index), [gmodel.DynamicConfigValue(id_val="thresholds", value=steps)]
            )
    return panel


def overview() -> gdash.Dashboard:
    """The matrix at a glance: alerts, last run, failing and inconclusive cells, status, startup, P/D health."""
    failing = alert_expr("CanaryCellFailing")
    inconclusive_matcher = f'verdict=~"{s.INCONCLUSIVE_VERDICT_REGEX}"'
    inconclusive = f"{s.CELL_VERDICT.name}{selector(inconclusive_matcher)} == 1"
    stale = alerts.rule("CanaryStale")
    pd_only = selector('topology="pd-nixl"')
    no_kv = alert_expr("CanaryPDWithoutKVTransfer")
    return (
        gdash.Dashboard("vLLM canary: overview")
        .uid("vllm-canary-overview")
        .description(
            "The vLLM P/D canary matrix: alerts, verdicts, startup, KV transfer and KV fidelity. "
            "Generated by canary/export/prometheus/dashboards.py."
        )
        .tags(TAGS)
        .editable()
        .time("now-7d", "now")
        .refresh("5m")
        .tooltip(gmodel.DashboardCursorSync.CROSSHAIR)
        .variables(_variables(percentile=False))  # type: ignore[arg-type]
        .with_row(gdash.Row("Alerts"))
        .with_panel(_alerts_now())
        .with_row(gdash.Row("Last run"))
        .with_panel(
            _stat(
                "Since the last run",
                "Time since the newest run of each selected canary (job/scope) finished: the value CanaryStale "
                f"compares, red from its threshold ({stale.threshold / 3600:.0f} h, twice a daily schedule), orange "
                "from three quarters of it.",
                U_SECONDS,
                _query(on_runs(stale.value_expr), "{{job}}/{{scope}}"),
            ).thresholds(_steps((None, "green"), (stale.threshold * 0.75, "orange"), (stale.threshold, "red")))
        )
        .with_panel(
            _stat(
                "Run outcome",
                f"The newest run's outcome as the CLI prints it: OK, {INCONCLUSIVE_WORD} (no cell failed, but some "
                "could not be measured: verdict invalid or error; rerun) or "
                f"{FAILED_WORD} (a cell has a definitive finding: fail or unexpected-pass).",
                U_VERDICT,
                _query(f"max by (job, scope) ({s.RUN_OUTCOME.name}{run_selector()})", "{{job}}/{{scope}}"),
            ).mappings(_outcome_mappings())
        )
        .with_panel(
            _stat(
                "Run duration",
                "Wall time of the newest run of each selected canary, deploys and teardowns included.",
                U_SECONDS,
                _query(f"max by (job, scope) ({s.RUN_DURATION.name}{run_selector()})", "{{job}}/{{scope}}"),
                span=4,
            )
        )
        .with_panel(
            _stat(
                "Cells by verdict",
                "Cells of the newest run per verdict (summed over the selected canaries).",
                U_CELLS,
                _query(f"sum by (verdict) ({s.RUN_CELLS.name}{run_selector()})", "{{verdict}}"),
                span=8,
            )
        )
        .with_row(gdash.Row(f"Failing ({FAILED_WORD}) and inconclusive ({INCONCLUSIVE_WORD}) cells"))
        .with_panel(
            _cells_table(
                "Failing cells: CanaryCellFailing",
                "Cells with a definitive finding, verdict fail (a check's gate did not hold) or unexpected-pass (a "
                f"cell expected to fail passed): exactly the cells the critical alert CanaryCellFailing fires for "
                f"(its expression). Any of them makes the run {FAILED_WORD}. Why: results/latest/summary.md.",
                on_cells(failing),
            )
        )
        .with_panel(
            _cells_table(
                f"Inconclusive cells ({INCONCLUSIVE_WORD}): not measured",
                "Cells the canary could not measure, verdict invalid (the measurement failed its own validity "
                "gates, e.g. a CPU-starved load client) or error (a check or the target crashed). Nothing is known "
                f"about vLLM there; they page nobody. With no failing cell the run is {INCONCLUSIVE_WORD} and the "
                "run-level warning fires (Alerts firing now): rerun.",
                inconclusive,
            )
        )
        .with_panel(
            _bars(
                "Failing cells by backend and block size: CanaryCellFailing",
                "Where the findings cluster: cells CanaryCellFailing fires for (its expression), counted per "
                f"topology, attention backend and prefill/decode block size; the ${LIMIT_VAR} largest groups.",
                U_CELLS,
                _query(top(f"count by ({GROUPING}) ({on_cells(failing)})"), GROUP_LEGEND),
            ).color_scheme(gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color(VERDICT_COLOR["fail"]))
        )
        .with_panel(
            _bars(
                "Inconclusive cells by backend and block size",
                "Where the canary could not measure (verdict invalid or error), counted per topology, attention "
                f"backend and prefill/decode block size; the ${LIMIT_VAR} largest groups. Many in one group: "
                "the canary's environment, not vLLM, is the usual cause.",
                U_CELLS,
                _query(top(f"count by ({GROUPING}) ({inconclusive})"), GROUP_LEGEND),
            ).color_scheme(gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color(VERDICT_COLOR["invalid"]))
        )
        .with_panel(
            _bars(
                "Failing and inconclusive cells by risk: CanaryCellFailing",
                "The planner's risk flags of the cells CanaryCellFailing fires for (A, its expression) and of the "
                f"inconclusive cells (B): {', '.join(RISKS)}. High-risk classes, those that broke vLLM before: "
                f"{', '.join(r for r in RISKS if r in HIGH_RISKS)}. A cell with two flags counts in both; cells "
                "without a flag are not counted.",
                U_CELLS,
                _query(
                    f"count by (risk) ({s.CELL_RISK.name}{selector()} and on (job, scope, cell) ({on_cells(failing)}))",
                    "{{risk}} failing",
                ),
                _query(
                    f"count by (risk) ({s.CELL_RISK.name}{selector()} and on (job, scope, cell) ({inconclusive}))",
                    "{{risk}} inconclusive",
                    ref="B",
                ),
                span=24,
            )
            .override_by_query("A", _fixed(VERDICT_COLOR["fail"]))
            .override_by_query("B", _fixed(VERDICT_COLOR["invalid"]))
        )
        .with_row(gdash.Row("Matrix status: $image").repeat("image"))
        .with_panel(_matrix_panel())
        .with_row(gdash.Row("Status history"))
        .with_panel(
            _status_history(
                "Worst cells over time",
                f"The ${LIMIT_VAR} worst cells (verdict failing or inconclusive), one row each, one column per run: "
                "how long a cell has been in that state. Cells that pass are left out, so a matrix of hundreds of "
                "cells stays readable.",
                _query(
                    top(f"max by (job, scope, cell) ({s.CELL_STATUS.name}{selector()}) >= {STATUS_CODE_FAILING}"),
                    "{{cell}}",
                ),
            )
        )
        .with_panel(
            _status_history(
                "Worst checks over time",
                f"The ${LIMIT_VAR} worst checks of any cell (startup, parity, accuracy, throughput, kv_transfer), one "
                "row per cell and check: which check keeps a cell from passing.",
                _query(
                    top(
                        f"max by (job, scope, cell, check) ({s.CHECK_STATUS.name}{selector()}) >= {STATUS_CODE_FAILING}"
                    ),
                    "{{cell}} {{check}}",
                ),
            )
        )
        .with_row(gdash.Row("Startup"))
        .with_panel(
            _timeseries(
                "Slowest startups",
                f"The ${LIMIT_VAR} slowest cells: time from launch until every server of the cell (prefill and "
                "decode for P/D) answered ready.",
                U_SECONDS,
                _query(top(f"{s.STARTUP_SECONDS.name}{selector()}"), "{{cell}}"),
            )
        )
        .with_panel(
            _bars(
                "Startup failures by class",
                "Cells that did not start, counted per failure class of the signature catalog "
                "(configs/signatures.yaml; unclassified: a log no signature matched).",
                U_CELLS,
                _query(f"count by (failure_class) ({s.STARTUP_FAILURE.name}{selector()} == 1)", "{{failure_class}}"),
            )
        )
        .with_row(gdash.Row("Cell age (rolling coverage)"))
        .with_panel(
            _stat(
                "Stale cells",
                "Planned cells whose last verdict is older than twice a daily schedule "
                f"({stale.threshold / 3600:.0f} h, the run-level stale threshold of the alert rules): a matrix "
                "larger than one night runs its nightly cells every night and the rest in rotation "
                "(target.kubernetes.gpu_budget, rotation), so an old cell says nothing about tonight's vLLM.",
                U_CELLS,
                _query(
                    f"count(time() - max by (job, scope, cell) ({s.CELL_LAST_CHECKED.name}{selector()}) "
                    f"> {stale.threshold:g}) or vector(0)"
                ),
            ).thresholds(_steps((None, "green"), (1, "orange")))
        )
        .with_panel(
            _table(
                "Oldest cells",
                f"The ${LIMIT_VAR} cells checked longest ago: time since each planned cell's last verdict (its "
                "age); orange past half the stale threshold, red past it.",
                U_SECONDS,
                _query(
                    top(f"time() - max by (job, scope, cell) ({s.CELL_LAST_CHECKED.name}{selector()})"),
                    instant=True,
                ),
                span=18,
            )
            .with_transformation(_organize(("Time",), {"Value": "age"}))
            .thresholds(_steps((None, "green"), (stale.threshold / 2, "orange"), (stale.threshold, "red")))
            .cell_options(gcommon.TableColoredBackgroundCellOptions(mode=gcommon.TableCellBackgroundDisplayMode.BASIC))
            .sort_by(_sort("age"))
        )
        .with_row(gdash.Row("Prefill/decode"))
        .with_panel(
            _with_threshold_line(
                _timeseries(
                    "Least KV moved by NIXL: CanaryPDWithoutKVTransfer",
                    f"The ${LIMIT_VAR} P/D cells whose decode server received the fewest KV-cache bytes from prefill "
                    "while the checks ran. Red points (B): the cells the critical alert CanaryPDWithoutKVTransfer "
                    "fires for (its expression): no bytes at all, decode recomputed the prefill.",
                    U_BYTES,
                    _query(top(f"{s.NIXL_BYTES.name}{pd_only}", worst="bottomk"), "{{cell}}"),
                    _query(on_cells(no_kv), "{{cell}} alert", ref="B"),
                ).override_by_query("B", _line("red")),
                alerts.rule("CanaryPDWithoutKVTransfer").threshold,
                below="red",
                above="green",
            )
        )
        .with_panel(
            _timeseries(
                "Most decode prompt tokens recomputed",
                f"The ${LIMIT_VAR} P/D cells whose decode server computed most of its prompt tokens itself instead of "
                "receiving their KV over NIXL. 0%: P/D works; near 100%: decode did the prefill again.",
                U_RATIO,
                _query(top(f"{s.DECODE_RECOMPUTED.name}{pd_only}"), "{{cell}}"),
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            _timeseries(
                "Lowest greedy token parity vs the aggregated control",
                f"The ${LIMIT_VAR} P/D cells with the lowest share of evidence prompts whose greedy tokens are "
                "identical through P/D and through the aggregated control (100%: identical). "
                + explain("evidence prompts"),
                U_RATIO,
                _query(top(f"{s.PARITY.name}{selector()}", worst="bottomk"), "{{cell}}"),
            )
            .min(0)
            .max(1)
        )
        .with_row(gdash.Row("KV fidelity (parity)"))
        .with_panel(
            _with_threshold_line(
                _timeseries(
                    "Worst P/D prompt over the noise floor",
                    f"The ${LIMIT_VAR} P/D cells whose worst prompt is furthest beyond the noise: A the largest KL, "
                    "B the largest |delta logprob| of the generated token, each as a multiple of its gate's "
                    "threshold. " + explain("× threshold", "null floor", "KL"),
                    U_OVER_THRESHOLD,
                    _query(top(f"{s.PARITY_KL_OVER_FLOOR.name}{pd_only}"), "{{cell}} KL"),
                    _query(top(f"{s.PARITY_ABS_DLOGPROB_OVER_FLOOR.name}{pd_only}"), "{{cell}} |dlogprob|", ref="B"),
                ).scale_distribution(gcommonb.ScaleDistributionConfig().type(gcommon.ScaleDistribution.LOG).log(10)),
                OVER_FLOOR_LIMIT,
            )
        )
        .with_panel(
            _timeseries(
                "KL against the control and the null floor",
                f"The ${LIMIT_VAR} P/D cells with the largest KL: max (A) and mean (B) over their evidence prompts; "
                f"dashed (C): the ${LIMIT_VAR} largest null floors of the aggregated controls. "
                + explain("KL", "null floor", "evidence prompts"),
                U_NATS,
                _query(top(f"{s.PARITY_KL_MAX.name}{pd_only}"), "{{cell}} max"),
                _query(
                    f"{s.PARITY_KL_MEAN.name}{pd_only} and on (job, scope, cell) "
                    + top(f"{s.PARITY_KL_MAX.name}{pd_only}"),
                    "{{cell}} mean",
                    ref="B",
                ),
                _query(top(f"{s.PARITY_NULL_KL_MAX.name}{selector()}"), "{{cell}} null floor", ref="C"),
            ).override_by_query("C", DASHED)
        )
        .with_panel(_breach_table())
        .with_panel(_fidelity_table())
        .with_panel(_load_parity_table())
        .with_panel(
            _with_threshold_line(
                _timeseries(
                    "Drift against the baseline image",
                    f"The ${LIMIT_VAR} aggregated controls on candidate images whose largest KL against the same "
                    "cell on the baseline image is furthest beyond the drift gate's threshold (margin × both "
                    "images' null floor + tolerance). " + explain("× threshold", "null floor"),
                    U_OVER_THRESHOLD,
                    _query(top(f"{s.PARITY_DRIFT_KL_OVER_FLOOR.name}{selector()}"), "{{cell}}"),
                ),
                OVER_FLOOR_LIMIT,
            )
        )
        .with_panel(_drift_table())
    )


INSTANT_TABLE_HIDDEN = (
    *HIDDEN_COLUMNS,
    "model",
    "prefill_block_size",
    "decode_block_size",
    "kv_cache_dtype",
    "kernel_block_size",
    "runner",
)
"""Columns of an instant table of cells left out (the cell id says them)."""


def _instant_table(
    title: str,
    description: str,
    unit: str,
    columns: Sequence[tuple[str, str, str]],
    span: int,
    sort: str,
    *,
    desc: bool = True,
    hidden: Sequence[str] = INSTANT_TABLE_HIDDEN,
) -> gtable.Panel:
    """One row per cell, one column per (expression, column name, unit) (instant queries, merged)."""
    refs = [chr(ord("A") + index) for index in range(len(columns))]
    queries = [_query(expr, ref=ref, instant=True) for ref, (expr, _, _) in zip(refs, columns, strict=True)]
    rename = {f"Value #{ref}": name for ref, (_, name, _) in zip(refs, columns, strict=True)}
    panel = (
        _table(title, description, unit, *queries, span=span)
        .with_transformation(gmodel.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(_organize(hidden, rename))
        .sort_by(_sort(sort, desc))
    )
    for _, name, column_unit in columns:
        if column_unit != unit:
            panel = panel.override_by_name(name, [gmodel.DynamicConfigValue(id_val="unit", value=column_unit)])
    return panel


def _breach_table() -> gtable.Panel:
    breach = on_cells(alert_expr("CanaryKVFidelityBreach"))

    def of_breach(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()} and on (job, scope, cell) ({breach})"

    return _instant_table(
        "P/D cells reading corrupt KV: CanaryKVFidelityBreach",
        "The cells the critical alert CanaryKVFidelityBreach fires for (its expression): a P/D cell whose parity "
        "check failed with evidence prompts beyond the null floor. Columns: those prompts, the KV block the "
        "divergence starts at (blocks of the smaller logical block size; shorter prompts match) and the worst KL "
        "as a multiple of the gate's threshold. " + explain("evidence prompts", "null floor"),
        U_PROMPTS,
        (
            (breach, "prompts beyond the floor", U_PROMPTS),
            (of_breach(s.PARITY_FIRST_DIVERGENT_BLOCK), "first divergent block", U_BLOCK),
            (of_breach(s.PARITY_KL_OVER_FLOOR), "worst KL × threshold", U_OVER_THRESHOLD),
        ),
        12,
        "prompts beyond the floor",
    )


def _fidelity_table() -> gtable.Panel:
    def col(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()}"

    columns = (
        (col(s.PARITY_FAILING_PROMPTS), "failing prompts", U_PROMPTS),
        (col(s.PARITY_FIRST_DIVERGENT_BLOCK), "first divergent block", U_BLOCK),
        (col(s.PARITY_EVIDENCE_PROMPTS), "evidence prompts", U_PROMPTS),
        (col(s.PARITY_REJECTED_PROMPTS), "rejected as evidence", U_PROMPTS),
        (col(s.PARITY_PROMPTS), "prompts", U_PROMPTS),
        (col(s.PARITY_TOP1_AGREE_MIN), "top-1 agreement min", U_RATIO),
        (col(s.PARITY_ABS_DLOGPROB_MAX), "max |dlogprob|", U_NATS),
        (col(s.PARITY_NULL_ABS_DLOGPROB_MAX), "null floor |dlogprob|", U_NATS),
        (col(s.PARITY_NULL_TOKEN_FLIPS), "null token flips", U_PROMPTS),
        (col(s.PARITY_FIRST_DIFF), "first differing token", U_POSITION),
    )
    return _instant_table(
        "KV fidelity now",
        "Last parity result of every cell, most failing prompts first: P/D prompts beyond the null floor and the "
        "KV block their divergence starts at (in blocks of the smaller logical block size), prompts kept and "
        "rejected as evidence, top-1 agreement and |delta logprob| against the control and the control's own "
        "noise (null floor, null token flips: prompts whose greedy tokens changed between two runs of the "
        "control). Per-prompt series: results.json (evidence.per_prompt). " + explain("evidence prompts", "null floor"),
        U_PROMPTS,
        columns,
        12,
        "failing prompts",
    )


def _load_parity_table() -> gtable.Panel:
    def col(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()}"

    columns = (
        (col(s.LOAD_PARITY_FAILING), "samples beyond the floor", U_PROMPTS),
        (col(s.LOAD_PARITY_STATUS), "sub-verdict code", U_VERDICT),
        (col(s.LOAD_PARITY_SAMPLES), "samples under load", U_PROMPTS),
        (col(s.LOAD_PARITY_MATCH), "greedy tokens match", U_RATIO),
        (col(s.LOAD_PARITY_KL_OVER_FLOOR), "worst KL × threshold", U_OVER_THRESHOLD),
        (col(s.LOAD_PARITY_NULL_SAMPLES), "null samples under load", U_PROMPTS),
        (col(s.LOAD_PARITY_NULL_TOKEN_FLIPS), "null token flips under load", U_PROMPTS),
        (col(s.LOAD_PARITY_SECONDS), "seconds added", U_SECONDS),
    )
    return _instant_table(
        "KV fidelity under load",
        "Parity under load, the throughput check's sub-result: greedy parity prompts sent while the load ran, "
        "compared with the control's reference by the parity gates against the null arm (the control's own "
        "samples under the same load). Code 0 pass, 7 fail (the throughput check's load-parity gate), 4 too "
        "few samples inside the load. Samples: results.json (evidence.load_parity). "
        + explain("null floor", "evidence prompts"),
        U_PROMPTS,
        columns,
        12,
        "samples beyond the floor",
    )


def _drift_table() -> gtable.Panel:
    drift = on_cells(alert_expr("CanaryImageDrift"))

    def of_drift(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()} and on (job, scope, cell) ({drift})"

    columns = (
        (drift, "failed drift gates", U_GATES),
        (of_drift(s.PARITY_DRIFT_TOKEN_FLIPS), "prompts with other tokens", U_PROMPTS),
        (of_drift(s.PARITY_DRIFT_PROMPTS), "prompts compared", U_PROMPTS),
        (of_drift(s.PARITY_DRIFT_KL_MAX), "KL max", U_NATS),
        (of_drift(s.PARITY_DRIFT_ABS_DLOGPROB_MAX), "max |dlogprob|", U_NATS),
        (of_drift(s.PARITY_DRIFT_FIRST_DIFF), "first differing token", U_POSITION),
    )
    return _instant_table(
        "Drifting candidate images: CanaryImageDrift",
        "The cells the warning alert CanaryImageDrift fires for (its expression): an aggregated control on a "
        "candidate image that generates differently from the same cell on the baseline image (same prompts, same "
        "run) beyond both images' null floors; expected only when the candidate changes the sampler or kernels "
        "on purpose. " + explain("null floor"),
        U_GATES,
        columns,
        12,
        "failed drift gates",
    )


def _latency_panel(kind: str) -> gts.Panel:
    spec = s.LATENCY[kind]
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


def _capacity_panels() -> tuple[gts.Panel, gtable.Panel, gts.Panel, gtable.Panel]:
    """SLO capacity with its interval (the lowest cells and every cell), and the disaggregation gain."""
    lowest = top(f"{s.CAPACITY.name}{selector()}", worst="bottomk")
    lowest_gain = top(f"{s.DISAGG_GAIN.name}{selector()}", worst="bottomk")

    def of(spec: s.MetricSpec, cells: str) -> str:
        return f"{spec.name}{selector()} and on (job, scope, cell) {cells}"

    def col(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()}"

    capacity_chart = (
        _timeseries(
            "Lowest SLO capacity with its interval",
            f"The ${LIMIT_VAR} cells with the lowest SLO capacity (solid), the lower (B) and upper (C, dashed) "
            "ends of its interval, where the capacity search ran (checks.throughput.capacity, off by default). "
            + explain("SLO capacity"),
            U_REQUESTS_PER_S,
            _query(lowest, "{{cell}}"),
            _query(of(s.CAPACITY_LOW, lowest), "{{cell}} lower", ref="B"),
            _query(of(s.CAPACITY_HIGH, lowest), "{{cell}} upper", ref="C"),
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
            (col(s.CAPACITY), "capacity", U_REQUESTS_PER_S),
            (col(s.CAPACITY_LOW), "lower", U_REQUESTS_PER_S),
            (col(s.CAPACITY_HIGH), "upper", U_REQUESTS_PER_S),
            (col(s.CAPACITY_REQUESTS), "requests used", "none"),
            (col(s.CAPACITY_SECONDS), "search time", U_SECONDS),
        ),
        12,
        "capacity",
        desc=False,
    )
    gain_chart = _with_threshold_line(
        _timeseries(
            "Lowest disaggregation gain with its interval",
            f"The ${LIMIT_VAR} P/D cells with the lowest disaggregation gain (solid) and the ends of its interval "
            "(B lower, C upper, dashed); the line at 1: P/D carries what the same engines carry aggregated. "
            + explain("disaggregation gain", "SLO capacity"),
            U_GAIN,
            _query(lowest_gain, "{{cell}}"),
            _query(of(s.DISAGG_GAIN_LOW, lowest_gain), "{{cell}} lower", ref="B"),
            _query(of(s.DISAGG_GAIN_HIGH, lowest_gain), "{{cell}} upper", ref="C"),
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
            (col(s.DISAGG_GAIN), "gain", U_GAIN),
            (col(s.DISAGG_GAIN_LOW), "gain lower", U_GAIN),
            (col(s.DISAGG_GAIN_HIGH), "gain upper", U_GAIN),
            (col(s.DISAGG_ENGINE_SCALE), "control scaled ×", "none"),
            (of(s.CAPACITY, f"{s.DISAGG_GAIN.name}{selector()}"), "P/D capacity", U_REQUESTS_PER_S),
        ),
        12,
        "gain",
        desc=False,
        hidden=(*HIDDEN_COLUMNS, "model", "kernel_block_size", "topology"),
    )
    return capacity_chart, capacity_table, gain_chart, gain_table


def _pd_time_panel() -> gts.Panel:
    """Where the slowest P/D cells' time goes, term by term (canary_pd_time_seconds), and how many of their
    requests were joined and fell back to recompute."""
    percentiles = selector('percentile=~"$percentile"', 'term!="decode"')
    largest = top(f"{s.PD_TIME.name}{percentiles}")
    same = f"{selector()} and on (job, scope, cell) {largest}"
    return _timeseries(
        "Where P/D time goes: TTFT by term",
        f"The ${LIMIT_VAR} largest terms of P/D cells' TTFT (the percentile variable): {s.PD_TIME.help} Dashed "
        f"(B), requests joined; C, of those decode recomputed instead of reading the KV. "
        "Per-request rows: results.json, evidence.pd_time of the throughput check.",
        U_SECONDS,
        _query(largest, "{{cell}} {{term}} {{percentile}}"),
        _query(f"{s.PD_TIME_REQUESTS.name}{same}", "{{cell}} joined", "B"),
        _query(f"{s.PD_TIME_RECOMPUTED.name}{same}", "{{cell}} recomputed", "C"),
    ).override_by_query("B", DASHED)


def _prefix_cache_panel() -> gts.Panel:
    """The prefix-cache hit ratio of each engine under the throughput check's load, lowest first."""
    return _timeseries(
        "Prefix-cache hits under load by engine",
        f"The ${LIMIT_VAR} lowest prefix-cache hit ratios (cell and engine role): {s.PREFIX_CACHE_HIT.help} "
        "A shared-prefix workload hits on prefill; fresh synthetic prompts hit nothing. Queried and hit tokens: "
        "results.json, evidence.prefix_cache of the throughput check.",
        U_RATIO,
        _query(top(f"{s.PREFIX_CACHE_HIT.name}{selector()}", worst="bottomk"), "{{cell}} {{role}}"),
    )


def performance() -> gdash.Dashboard:
    """Throughput, latency and GSM8K accuracy over time; baseline vs candidate."""
    coords = (
        f'label_join({s.OUTPUT_TOKENS_PER_S.name}{selector()}, "coordinates", " ", '
        '"topology", "backend", "prefill_block_size", "decode_block_size", "kv_cache_dtype", "runner", "model")'
    )
    accuracy_hidden = (*HIDDEN_COLUMNS, "model", "prefill_block_size", "decode_block_size", "kernel_block_size")
    regression = alerts.rule("CanaryThroughputRegression")
    below_gate = alert_expr("CanaryAccuracyBelowGate")
    worst_accuracy = top(f"{s.ACCURACY.name}{selector()}", worst="bottomk")

    def of_worst(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()} and on (job, scope, cell) {worst_accuracy}"

    capacity_chart, capacity_table, gain_chart, gain_table = _capacity_panels()

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
                "Lowest output tokens per second",
                f"The ${LIMIT_VAR} slowest cells: {s.OUTPUT_TOKENS_PER_S.help} Higher is better.",
                U_TOKENS_PER_S,
                _query(top(f"{s.OUTPUT_TOKENS_PER_S.name}{selector()}", worst="bottomk"), "{{cell}}"),
            )
        )
        .with_panel(
            _timeseries(
                "Lowest requests per second and their goodput",
                f"The ${LIMIT_VAR} cells with the fewest requests per second: {s.REQUESTS_PER_S.help} Dashed "
                f"(B), the same cells' goodput: {s.GOODPUT_PER_S.help}",
                U_REQUESTS_PER_S,
                _query(top(f"{s.REQUESTS_PER_S.name}{selector()}", worst="bottomk"), "{{cell}}"),
                _query(
                    f"{s.GOODPUT_PER_S.name}{selector()} and on (job, scope, cell) "
                    + top(f"{s.REQUESTS_PER_S.name}{selector()}", worst="bottomk"),
                    "{{cell}} goodput",
                    ref="B",
                ),
            ).override_by_query("B", DASHED)
        )
        .with_panel(
            _timeseries(
                "Change points in the run history: CanaryHistoryChangePoint",
                "How much worse a throughput metric got at a change point of the run history (E-Divisive over the "
                "nightly runs), as a share of the earlier mean: exactly the series the warning alert "
                "CanaryHistoryChangePoint fires for (its expression), while the change point is recent. "
                "`canary history changes --cell CELL` names the run and the image change.",
                U_RATIO,
                _query(top(on_cells(alert_expr("CanaryHistoryChangePoint"))), "{{cell}} {{metric}}"),
            )
        )
        .with_panel(
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
            )
        )
        .with_panel(
            _timeseries(
                "Paired candidate / baseline throughput with its interval",
                f"The ${LIMIT_VAR} lowest paired verdicts (checks.throughput.paired): {s.PAIRED_RATIO.help} Dashed, "
                f"the ends of its t interval (B: {s.PAIRED_RATIO_LOW.help} C: {s.PAIRED_RATIO_HIGH.help})",
                U_RATIO,
                _query(top(f"{s.PAIRED_RATIO.name}{selector()}", worst="bottomk"), "{{cell}}"),
                _query(
                    f"{s.PAIRED_RATIO_LOW.name}{selector()} and on (job, scope, cell) "
                    + top(f"{s.PAIRED_RATIO.name}{selector()}", worst="bottomk"),
                    "{{cell}} low",
                    ref="B",
                ),
                _query(
                    f"{s.PAIRED_RATIO_HIGH.name}{selector()} and on (job, scope, cell) "
                    + top(f"{s.PAIRED_RATIO.name}{selector()}", worst="bottomk"),
                    "{{cell}} high",
                    ref="C",
                ),
            )
            .override_by_query("B", DASHED)
            .override_by_query("C", DASHED)
        )
        .with_panel(
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
            )
        )
        .with_row(gdash.Row("SLO capacity and disaggregation gain"))
        .with_panel(capacity_chart)
        .with_panel(capacity_table)
        .with_panel(_capacity_regression_panel())
        .with_panel(gain_chart)
        .with_panel(gain_table)
        .with_row(gdash.Row("Latency under load"))
        .with_panel(_latency_panel("ttft"))
        .with_panel(_latency_panel("tpot"))
        .with_panel(_latency_panel("itl"))
        .with_panel(_latency_panel("e2e"))
        .with_panel(_pd_time_panel())
        .with_panel(_prefix_cache_panel())
        .with_row(gdash.Row("GSM8K accuracy"))
        .with_panel(
            _timeseries(
                "Lowest GSM8K accuracy with Wilson bounds: CanaryAccuracyBelowGate",
                f"The ${LIMIT_VAR} cells with the lowest GSM8K accuracy (solid), their 95% Wilson interval (dashed, B "
                "and C: where the true accuracy lies given the questions asked) and the gate (red, D: expected "
                "accuracy minus tolerance). Big red points (E): the Wilson upper bounds below the gate, exactly the "
                "cells the critical alert CanaryAccuracyBelowGate fires for (its expression): worse than the model "
                "can be, beyond chance.",
                U_RATIO,
                _query(worst_accuracy, "{{cell}}"),
                _query(of_worst(s.ACCURACY_LOW), "{{cell}} lower", ref="B"),
                _query(of_worst(s.ACCURACY_HIGH), "{{cell}} upper", ref="C"),
                _query(f"max({s.ACCURACY_THRESHOLD.name}{selector()})", "gate", ref="D"),
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
            .override_by_query("E", _line("red"))
        )
        .with_panel(
            _table(
                "GSM8K accuracy now",
                "Last accuracy of every cell, lowest first, with its Wilson interval, the gate and, for P/D cells, "
                "the exact McNemar p-value against the aggregated control on the same questions (small: P/D answers "
                "differently from its control beyond chance).",
                U_RATIO,
                _query(f"{s.ACCURACY.name}{selector()}", ref="A", instant=True),
                _query(f"{s.ACCURACY_LOW.name}{selector()}", ref="B", instant=True),
                _query(f"{s.ACCURACY_HIGH.name}{selector()}", ref="C", instant=True),
                _query(f"{s.ACCURACY_THRESHOLD.name}{selector()}", ref="D", instant=True),
                _query(f"{s.ACCURACY_PAIRED_P.name}{selector()}", ref="E", instant=True),
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
            .sort_by(_sort("accuracy", desc=False))
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
