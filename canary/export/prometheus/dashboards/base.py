"""The dashboards' shared vocabulary: data source, filters, units, glossary, query helpers."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as gmodel
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from canary.checks.parity import metrics as parity_metrics
from canary.export.prometheus import alerts
from canary.export.prometheus import schema as s
from canary.judge import verdicts
from canary.judge.verdicts import VERDICT_COLOR

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


Group = tuple[gdash.Row, list[cogbuilder.Builder[gmodel.Panel]]]
"""A row of a dashboard and its panels, in order."""


def assemble(board: gdash.Dashboard, groups: Sequence[Group]) -> gdash.Dashboard:
    """The dashboard with each group's row and panels added in order."""
    for row, panels in groups:
        board = board.with_row(row)
        for panel in panels:
            board = board.with_panel(panel)
    return board
