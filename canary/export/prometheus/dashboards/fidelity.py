"""KV-fidelity tables (breaches, fidelity, parity under load, drift) of the overview dashboard."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.models import dashboard as gmodel

from canary.checks.parity import exported as parity_exported
from canary.checks.throughput import exported as throughput_exported
from canary.export.prometheus import schema as s
from canary.export.prometheus.dashboards.base import (
    U_BLOCK,
    U_GATES,
    U_NATS,
    U_OVER_THRESHOLD,
    U_POSITION,
    U_PROMPTS,
    U_RATIO,
    U_SECONDS,
    U_VERDICT,
    _query,
    alert_expr,
    explain,
    on_cells,
    selector,
)
from canary.export.prometheus.dashboards.panels import (
    HIDDEN_COLUMNS,
    _organize,
    _sort,
    _table,
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
            (of_breach(parity_exported.PARITY_FIRST_DIVERGENT_BLOCK), "first divergent block", U_BLOCK),
            (of_breach(parity_exported.PARITY_KL_OVER_FLOOR), "worst KL × threshold", U_OVER_THRESHOLD),
        ),
        12,
        "prompts beyond the floor",
    )


def _fidelity_table() -> gtable.Panel:
    def col(spec: s.MetricSpec) -> str:
        return f"{spec.name}{selector()}"

    columns = (
        (col(parity_exported.PARITY_FAILING_PROMPTS), "failing prompts", U_PROMPTS),
        (col(parity_exported.PARITY_FIRST_DIVERGENT_BLOCK), "first divergent block", U_BLOCK),
        (col(parity_exported.PARITY_EVIDENCE_PROMPTS), "evidence prompts", U_PROMPTS),
        (col(parity_exported.PARITY_REJECTED_PROMPTS), "rejected as evidence", U_PROMPTS),
        (col(parity_exported.PARITY_PROMPTS), "prompts", U_PROMPTS),
        (col(parity_exported.PARITY_TOP1_AGREE_MIN), "top-1 agreement min", U_RATIO),
        (col(parity_exported.PARITY_ABS_DLOGPROB_MAX), "max |dlogprob|", U_NATS),
        (col(parity_exported.PARITY_NULL_ABS_DLOGPROB_MAX), "null floor |dlogprob|", U_NATS),
        (col(parity_exported.PARITY_NULL_TOKEN_FLIPS), "null token flips", U_PROMPTS),
        (col(parity_exported.PARITY_FIRST_DIFF), "first differing token", U_POSITION),
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
        (col(throughput_exported.LOAD_PARITY_FAILING), "samples beyond the floor", U_PROMPTS),
        (col(throughput_exported.LOAD_PARITY_STATUS), "sub-verdict code", U_VERDICT),
        (col(throughput_exported.LOAD_PARITY_SAMPLES), "samples under load", U_PROMPTS),
        (col(throughput_exported.LOAD_PARITY_MATCH), "greedy tokens match", U_RATIO),
        (col(throughput_exported.LOAD_PARITY_KL_OVER_FLOOR), "worst KL × threshold", U_OVER_THRESHOLD),
        (col(throughput_exported.LOAD_PARITY_NULL_SAMPLES), "null samples under load", U_PROMPTS),
        (col(throughput_exported.LOAD_PARITY_NULL_TOKEN_FLIPS), "null token flips under load", U_PROMPTS),
        (col(throughput_exported.LOAD_PARITY_SECONDS), "seconds added", U_SECONDS),
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
        (of_drift(parity_exported.PARITY_DRIFT_TOKEN_FLIPS), "prompts with other tokens", U_PROMPTS),
        (of_drift(parity_exported.PARITY_DRIFT_PROMPTS), "prompts compared", U_PROMPTS),
        (of_drift(parity_exported.PARITY_DRIFT_KL_MAX), "KL max", U_NATS),
        (of_drift(parity_exported.PARITY_DRIFT_ABS_DLOGPROB_MAX), "max |dlogprob|", U_NATS),
        (of_drift(parity_exported.PARITY_DRIFT_FIRST_DIFF), "first differing token", U_POSITION),
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
