"""The dashboards' panel builders: variables, time series, stats, tables, bars, the matrix and alerts."""

from __future__ import annotations

import re
from collections.abc import Sequence

from grafana_foundation_sdk.builders import bargauge as gbar
from grafana_foundation_sdk.builders import common as gcommonb
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import statushistory as gstatus
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as gcommon
from grafana_foundation_sdk.models import dashboard as gmodel

from canary.export.prometheus import alerts
from canary.export.prometheus import schema as s
from canary.export.prometheus.dashboards.base import (
    DATASOURCE,
    FILTERS,
    LIMIT_CHOICES,
    LIMIT_DEFAULT,
    LIMIT_VAR,
    RUN_FILTERS,
    U_CELLS,
    U_FIRING,
    U_VERDICT,
    VARIABLE_SOURCE,
    _query,
    _steps,
    _verdict_mappings,
    _verdict_word_mappings,
    on_cells,
    on_runs,
    selector,
)

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
