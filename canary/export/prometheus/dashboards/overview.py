"""The overview dashboard (vllm-canary-overview), one function per row of panels."""

from __future__ import annotations

from typing import NamedTuple

from grafana_foundation_sdk.builders import common as gcommonb
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.models import common as gcommon
from grafana_foundation_sdk.models import dashboard as gmodel

from canary.checks.kv_transfer import exported as kv_transfer_exported
from canary.checks.parity import exported as parity_exported
from canary.checks.startup import exported as startup_exported
from canary.export.prometheus import alerts
from canary.export.prometheus import schema as s
from canary.export.prometheus.dashboards.base import (
    DASHED,
    FAILED_WORD,
    INCONCLUSIVE_WORD,
    LIMIT_VAR,
    OVER_FLOOR_LIMIT,
    STATUS_CODE_FAILING,
    TAGS,
    U_BYTES,
    U_CELLS,
    U_NATS,
    U_OVER_THRESHOLD,
    U_RATIO,
    U_SECONDS,
    U_VERDICT,
    Group,
    _fixed,
    _line,
    _outcome_mappings,
    _query,
    _steps,
    alert_expr,
    assemble,
    explain,
    on_cells,
    on_runs,
    run_selector,
    selector,
    top,
)
from canary.export.prometheus.dashboards.fidelity import (
    _breach_table,
    _drift_table,
    _fidelity_table,
    _load_parity_table,
)
from canary.export.prometheus.dashboards.panels import (
    GROUP_LEGEND,
    GROUPING,
    _alerts_now,
    _bars,
    _cells_table,
    _matrix_panel,
    _organize,
    _sort,
    _stat,
    _status_history,
    _table,
    _timeseries,
    _variables,
    _with_threshold_line,
)
from canary.judge.verdicts import VERDICT_COLOR
from canary.plan.cell import HIGH_RISKS, RISKS


class _Overview(NamedTuple):
    """What several of the overview's rows query."""

    failing: str
    inconclusive_matcher: str
    inconclusive: str
    stale: alerts.AlertRule
    pd_only: str
    no_kv: str


def _overview_queries() -> _Overview:
    """The queries the overview's rows share."""
    failing = alert_expr("CanaryCellFailing")
    inconclusive_matcher = f'verdict=~"{s.INCONCLUSIVE_VERDICT_REGEX}"'
    inconclusive = f"{s.CELL_VERDICT.name}{selector(inconclusive_matcher)} == 1"
    stale = alerts.rule("CanaryStale")
    pd_only = selector('topology="pd-nixl"')
    no_kv = alert_expr("CanaryPDWithoutKVTransfer")
    return _Overview(failing, inconclusive_matcher, inconclusive, stale, pd_only, no_kv)


def _alerts_row(q: _Overview) -> Group:
    """The row 'Alerts' and its panels."""
    return (
        gdash.Row("Alerts"),
        [
            _alerts_now(),
        ],
    )


def _last_run_row(q: _Overview) -> Group:
    """The row 'Last run' and its panels."""
    stale = q.stale
    return (
        gdash.Row("Last run"),
        [
            _stat(
                "Since the last run",
                "Time since the newest run of each selected canary (job/scope) finished: the value CanaryStale "
                f"compares, red from its threshold ({stale.threshold / 3600:.0f} h, twice a daily schedule), orange "
                "from three quarters of it.",
                U_SECONDS,
                _query(on_runs(stale.value_expr), "{{job}}/{{scope}}"),
            ).thresholds(_steps((None, "green"), (stale.threshold * 0.75, "orange"), (stale.threshold, "red"))),
            _stat(
                "Run outcome",
                f"The newest run's outcome as the CLI prints it: OK, {INCONCLUSIVE_WORD} (no cell failed, but some "
                "could not be measured: verdict invalid or error; rerun) or "
                f"{FAILED_WORD} (a cell has a definitive finding: fail or unexpected-pass).",
                U_VERDICT,
                _query(f"max by (job, scope) ({s.RUN_OUTCOME.name}{run_selector()})", "{{job}}/{{scope}}"),
            ).mappings(_outcome_mappings()),
            _stat(
                "Run duration",
                "Wall time of the newest run of each selected canary, deploys and teardowns included.",
                U_SECONDS,
                _query(f"max by (job, scope) ({s.RUN_DURATION.name}{run_selector()})", "{{job}}/{{scope}}"),
                span=4,
            ),
            _stat(
                "Cells by verdict",
                "Cells of the newest run per verdict (summed over the selected canaries).",
                U_CELLS,
                _query(f"sum by (verdict) ({s.RUN_CELLS.name}{run_selector()})", "{{verdict}}"),
                span=8,
            ),
        ],
    )


def _failing_and_inconclusive_row(q: _Overview) -> Group:
    """The row "f'Failing ({FAILED_WORD}) and inconclusive ({INCONCLUSIVE_WORD}) cells'" and its panels."""
    failing, inconclusive = q.failing, q.inconclusive
    return (
        gdash.Row(f"Failing ({FAILED_WORD}) and inconclusive ({INCONCLUSIVE_WORD}) cells"),
        [
            _cells_table(
                "Failing cells: CanaryCellFailing",
                "Cells with a definitive finding, verdict fail (a check's gate did not hold) or unexpected-pass (a "
                f"cell expected to fail passed): exactly the cells the critical alert CanaryCellFailing fires for "
                f"(its expression). Any of them makes the run {FAILED_WORD}. Why: results/latest/summary.md.",
                on_cells(failing),
            ),
            _cells_table(
                f"Inconclusive cells ({INCONCLUSIVE_WORD}): not measured",
                "Cells the canary could not measure, verdict invalid (the measurement failed its own validity "
                "gates, e.g. a CPU-starved load client) or error (a check or the target crashed). Nothing is known "
                f"about vLLM there; they page nobody. With no failing cell the run is {INCONCLUSIVE_WORD} and the "
                "run-level warning fires (Alerts firing now): rerun.",
                inconclusive,
            ),
            _bars(
                "Failing cells by backend and block size: CanaryCellFailing",
                "Where the findings cluster: cells CanaryCellFailing fires for (its expression), counted per "
                f"topology, attention backend and prefill/decode block size; the ${LIMIT_VAR} largest groups.",
                U_CELLS,
                _query(top(f"count by ({GROUPING}) ({on_cells(failing)})"), GROUP_LEGEND),
            ).color_scheme(gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color(VERDICT_COLOR["fail"])),
            _bars(
                "Inconclusive cells by backend and block size",
                "Where the canary could not measure (verdict invalid or error), counted per topology, attention "
                f"backend and prefill/decode block size; the ${LIMIT_VAR} largest groups. Many in one group: "
                "the canary's environment, not vLLM, is the usual cause.",
                U_CELLS,
                _query(top(f"count by ({GROUPING}) ({inconclusive})"), GROUP_LEGEND),
            ).color_scheme(
                gdash.FieldColor().mode(gmodel.FieldColorModeId.FIXED).fixed_color(VERDICT_COLOR["invalid"])
            ),
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
            .override_by_query("B", _fixed(VERDICT_COLOR["invalid"])),
        ],
    )


def _matrix_status_image_row(q: _Overview) -> Group:
    """The row 'Matrix status: $image' and its panels."""
    return (
        gdash.Row("Matrix status: $image").repeat("image"),
        [
            _matrix_panel(),
        ],
    )


def _status_history_row(q: _Overview) -> Group:
    """The row 'Status history' and its panels."""
    return (
        gdash.Row("Status history"),
        [
            _status_history(
                "Worst cells over time",
                f"The ${LIMIT_VAR} worst cells (verdict failing or inconclusive), one row each, one column per run: "
                "how long a cell has been in that state. Cells that pass are left out, so a matrix of hundreds of "
                "cells stays readable.",
                _query(
                    top(f"max by (job, scope, cell) ({s.CELL_STATUS.name}{selector()}) >= {STATUS_CODE_FAILING}"),
                    "{{cell}}",
                ),
            ),
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
            ),
        ],
    )


def _startup_row(q: _Overview) -> Group:
    """The row 'Startup' and its panels."""
    return (
        gdash.Row("Startup"),
        [
            _timeseries(
                "Slowest startups",
                f"The ${LIMIT_VAR} slowest cells: time from launch until every server of the cell (prefill and "
                "decode for P/D) answered ready.",
                U_SECONDS,
                _query(top(f"{startup_exported.STARTUP_SECONDS.name}{selector()}"), "{{cell}}"),
            ),
            _bars(
                "Startup failures by class",
                "Cells that did not start, counted per failure class of the signature catalog "
                "(configs/signatures.yaml; unclassified: a log no signature matched).",
                U_CELLS,
                _query(f"count by (failure_class) ({s.STARTUP_FAILURE.name}{selector()} == 1)", "{{failure_class}}"),
            ),
        ],
    )


def _cell_age_rolling_coverage_row(q: _Overview) -> Group:
    """The row 'Cell age (rolling coverage)' and its panels."""
    stale = q.stale
    return (
        gdash.Row("Cell age (rolling coverage)"),
        [
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
            ).thresholds(_steps((None, "green"), (1, "orange"))),
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
            .sort_by(_sort("age")),
        ],
    )


def _prefill_decode_row(q: _Overview) -> Group:
    """The row 'Prefill/decode' and its panels."""
    no_kv, pd_only = q.no_kv, q.pd_only
    return (
        gdash.Row("Prefill/decode"),
        [
            _with_threshold_line(
                _timeseries(
                    "Least KV moved by NIXL: CanaryPDWithoutKVTransfer",
                    f"The ${LIMIT_VAR} P/D cells whose decode server received the fewest KV-cache bytes from prefill "
                    "while the checks ran. Red points (B): the cells the critical alert CanaryPDWithoutKVTransfer "
                    "fires for (its expression): no bytes at all, decode recomputed the prefill.",
                    U_BYTES,
                    _query(top(f"{kv_transfer_exported.NIXL_BYTES.name}{pd_only}", worst="bottomk"), "{{cell}}"),
                    _query(on_cells(no_kv), "{{cell}} alert", ref="B"),
                ).override_by_query("B", _line("red")),
                alerts.rule("CanaryPDWithoutKVTransfer").threshold,
                below="red",
                above="green",
            ),
            _timeseries(
                "Most decode prompt tokens recomputed",
                f"The ${LIMIT_VAR} P/D cells whose decode server computed most of its prompt tokens itself instead of "
                "receiving their KV over NIXL. 0%: P/D works; near 100%: decode did the prefill again.",
                U_RATIO,
                _query(top(f"{kv_transfer_exported.DECODE_RECOMPUTED.name}{pd_only}"), "{{cell}}"),
            )
            .min(0)
            .max(1),
            _timeseries(
                "Lowest greedy token parity vs the aggregated control",
                f"The ${LIMIT_VAR} P/D cells with the lowest share of evidence prompts whose greedy tokens are "
                "identical through P/D and through the aggregated control (100%: identical). "
                + explain("evidence prompts"),
                U_RATIO,
                _query(top(f"{parity_exported.PARITY.name}{selector()}", worst="bottomk"), "{{cell}}"),
            )
            .min(0)
            .max(1),
        ],
    )


def _kv_fidelity_parity_row(q: _Overview) -> Group:
    """The row 'KV fidelity (parity)' and its panels."""
    pd_only = q.pd_only
    return (
        gdash.Row("KV fidelity (parity)"),
        [
            _with_threshold_line(
                _timeseries(
                    "Worst P/D prompt over the noise floor",
                    f"The ${LIMIT_VAR} P/D cells whose worst prompt is furthest beyond the noise: A the largest KL, "
                    "B the largest |delta logprob| of the generated token, each as a multiple of its gate's "
                    "threshold. " + explain("× threshold", "null floor", "KL"),
                    U_OVER_THRESHOLD,
                    _query(top(f"{parity_exported.PARITY_KL_OVER_FLOOR.name}{pd_only}"), "{{cell}} KL"),
                    _query(
                        top(f"{parity_exported.PARITY_ABS_DLOGPROB_OVER_FLOOR.name}{pd_only}"),
                        "{{cell}} |dlogprob|",
                        ref="B",
                    ),
                ).scale_distribution(gcommonb.ScaleDistributionConfig().type(gcommon.ScaleDistribution.LOG).log(10)),
                OVER_FLOOR_LIMIT,
            ),
            _timeseries(
                "KL against the control and the null floor",
                f"The ${LIMIT_VAR} P/D cells with the largest KL: max (A) and mean (B) over their evidence prompts; "
                f"dashed (C): the ${LIMIT_VAR} largest null floors of the aggregated controls. "
                + explain("KL", "null floor", "evidence prompts"),
                U_NATS,
                _query(top(f"{parity_exported.PARITY_KL_MAX.name}{pd_only}"), "{{cell}} max"),
                _query(
                    f"{parity_exported.PARITY_KL_MEAN.name}{pd_only} and on (job, scope, cell) "
                    + top(f"{parity_exported.PARITY_KL_MAX.name}{pd_only}"),
                    "{{cell}} mean",
                    ref="B",
                ),
                _query(top(f"{parity_exported.PARITY_NULL_KL_MAX.name}{selector()}"), "{{cell}} null floor", ref="C"),
            ).override_by_query("C", DASHED),
            _breach_table(),
            _fidelity_table(),
            _load_parity_table(),
            _with_threshold_line(
                _timeseries(
                    "Drift against the baseline image",
                    f"The ${LIMIT_VAR} aggregated controls on candidate images whose largest KL against the same "
                    "cell on the baseline image is furthest beyond the drift gate's threshold (margin × both "
                    "images' null floor + tolerance). " + explain("× threshold", "null floor"),
                    U_OVER_THRESHOLD,
                    _query(top(f"{parity_exported.PARITY_DRIFT_KL_OVER_FLOOR.name}{selector()}"), "{{cell}}"),
                ),
                OVER_FLOOR_LIMIT,
            ),
            _drift_table(),
        ],
    )


def overview() -> gdash.Dashboard:
    """The matrix at a glance: alerts, last run, failing and inconclusive cells, status, startup, P/D health."""
    q = _overview_queries()
    board = (
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
    )
    return assemble(
        board,
        [
            _alerts_row(q),
            _last_run_row(q),
            _failing_and_inconclusive_row(q),
            _matrix_status_image_row(q),
            _status_history_row(q),
            _startup_row(q),
            _cell_age_rolling_coverage_row(q),
            _prefill_decode_row(q),
            _kv_fidelity_parity_row(q),
        ],
    )
