"""Push a realistic run through the real Pushgateway, let the real Prometheus scrape it, then query
every dashboard panel expression and every alert expression and check the series they return.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from promhelpers import (
    JOB,
    LIMIT,
    PromStack,
    config_for,
    dashboard_queries,
    dashboard_variables,
    http_get,
    interpolate,
    matches,
    primary_selector,
    without_identity,
    yaml_rules,
)

from canary.checks.throughput import exported as throughput_exported
from canary.export.history.tracked import TRACKED
from canary.export.prometheus import schema as s
from canary.export.prometheus.alerts import normalized
from canary.export.prometheus.publish import export_run
from canary.judge.results import CellResult, RunResult
from canary.judge.verdicts import DEFINITIVE_FAILURES
from tests.support.sample import sample_run, with_drift

pytestmark = pytest.mark.prometheus


@dataclass
class Pushed:
    """A run pushed under its own scope, and how long it took to become queryable."""

    run: RunResult
    scope: str
    samples: list[s.Sample]
    visible_after_s: float


def push(stack: PromStack, tmp_path: Path, scope: str, run: RunResult) -> Pushed:
    """Export the run to the stack's Pushgateway and wait until Prometheus has it."""
    run_dir = tmp_path / run.run_id
    run_dir.mkdir(parents=True)
    lines = export_run(run, config_for(scope, stack.pushgateway_url, tmp_path), run_dir, env={}, backoff_s=0.05)
    assert lines == [f"pushgateway: pushed run {run.run_id} to {stack.pushgateway_url} (job={JOB}, scope={scope})"]
    pushed_at = time.monotonic()
    want = s.run_timestamp(run)
    stack.wait_for(
        f'canary_run_timestamp_seconds{{scope="{scope}"}}',
        lambda r: len(r) == 1 and math.isclose(float(r[0]["value"][1]), want, rel_tol=1e-12),
        deadline_s=30,
    )
    return Pushed(run, scope, s.samples(run), time.monotonic() - pushed_at)


@pytest.fixture(scope="module")
def pushed(prom_stack: PromStack, tmp_path_factory: pytest.TempPathFactory) -> Pushed:
    result = push(prom_stack, tmp_path_factory.mktemp("push"), "it-sample", sample_run())
    print(f"\npush -> queryable in Prometheus: {result.visible_after_s:.2f} s; stack: {prom_stack.timings}")
    return result


def _value(result: dict[str, Any]) -> float:
    return float(result["value"][1])


def test_every_pushed_series_is_in_prometheus_with_its_value(prom_stack: PromStack, pushed: Pushed) -> None:
    found = prom_stack.query(f'{{__name__=~"canary_.+",scope="{pushed.scope}"}}')
    got = {(r["metric"]["__name__"], tuple(sorted(without_identity(r["metric"]).items()))): _value(r) for r in found}
    want = {(x.name, tuple(sorted(x.labels.items()))): x.value for x in pushed.samples}
    assert set(got) == set(want)
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-12), key
    # The grouping key became the job and scope labels (honor_labels), nothing overrode cell labels.
    assert {r["metric"]["job"] for r in found} == {JOB}


def test_dashboard_variables_list_the_runs_values(prom_stack: PromStack, pushed: Pushed) -> None:
    """Each variable lists what the variables before it leave: with job and scope chosen, exactly the run's
    values (other scopes' runs on the same Prometheus do not leak in)."""
    variables = dashboard_variables()
    assert {name for _, name, _ in variables} == {"job", "scope", "image", "topology", "model", "backend"}
    for board, name, query in variables:
        found = re.fullmatch(r"label_values\((canary_[a-z0-9_]+)(\{[^}]*\})?, ([a-z_]+)\)", query)
        assert found, (board, name, query)
        metric, matchers, label = found[1], found[2] or "", found[3]
        assert metric in s.METRICS_BY_NAME, (board, name)
        match = interpolate(metric + matchers, pushed.scope, job=JOB)
        url = f"{prom_stack.prometheus_url}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
        values = set(json.loads(http_get(url))["data"])
        if label == "job":
            assert JOB in values, (board, name, values)
        elif label == "scope":
            assert pushed.scope in values, (board, name, values)
        else:
            expected = {x.labels[label] for x in pushed.samples if x.name == metric and label in x.labels}
            assert expected and values == expected, (board, name, values)


QUERIES = dashboard_queries()
EMPTY_IN_THE_SAMPLE = {
    ("Failing and inconclusive cells by risk: CanaryCellFailing", "B"): "no inconclusive cell has a risk flag",
}
RULE_EXPRS = {name: normalized(expr) for name, expr in yaml_rules().items()}


def embedded_alerts(expr: str) -> set[str]:
    """The alerts whose whole expression a panel query holds."""
    return {name for name, rule in RULE_EXPRS.items() if rule in normalized(expr)}


@pytest.mark.parametrize("query", QUERIES, ids=[f"{q.dashboard}:{q.panel}:{q.ref}" for q in QUERIES])
def test_every_dashboard_panel_query_returns_its_series(prom_stack: PromStack, pushed: Pushed, query: Any) -> None:
    expr = interpolate(query.expr, pushed.scope, job=JOB)
    result = prom_stack.query(expr)
    cited = embedded_alerts(query.expr)
    expected_alerts = _expected_alerts(pushed.run)
    if not result and cited and not any(expected_alerts[name] for name in cited):
        return  # the cells of an alert the sample run does not fire (test_a_drifting_candidate_image_alerts)
    if not result and (query.panel, query.ref) in EMPTY_IN_THE_SAMPLE:
        return  # test_prom_gpu_matrix.py: the GPU matrix has them
    assert result, f"{query.dashboard} / {query.panel}: no data for {expr}"
    metric, matchers = primary_selector(expr)
    scoped = [(x, {**x.labels, "scope": pushed.scope, "job": JOB}) for x in pushed.samples]
    selected = [x for x, labels in scoped if x.name == metric and matches(labels, matchers)]
    assert selected, f"the run has no series for {metric} {matchers}"
    if not all("cell" in r["metric"] for r in result):
        return
    got_cells = {r["metric"]["cell"] for r in result}
    want_cells = {x.labels["cell"] for x in selected if "cell" in x.labels}
    limited = "topk(" in expr or "bottomk(" in expr
    if limited:
        assert len(result) <= LIMIT, f"{query.panel}: {len(result)} series > top {LIMIT}"
    if len(cited) == 1 and not limited and "count" not in expr:
        (name,) = cited
        if expr.startswith("("):  # the alert's own series, kept to the variables
            assert got_cells == expected_alerts[name], f"{query.panel}: {expr}"
            return
    if "unless on" in expr:  # the candidate/baseline ratio: candidate cells with a baseline twin
        baseline = pushed.run.baseline_image
        tps = throughput_exported.OUTPUT_TOKENS_PER_S.name
        want_cells = {x.labels["cell"] for x in pushed.samples if x.name == tps and x.labels["image"] != baseline}
    if limited or " and on " in expr or ">=" in expr:
        assert got_cells <= want_cells, f"{query.panel}: {expr}"
    else:
        assert got_cells == want_cells, f"{query.panel}: {expr}"


def test_panel_values_that_people_read(prom_stack: PromStack, pushed: Pushed) -> None:
    by_panel = {q.panel: q.expr for q in QUERIES}
    since = prom_stack.query(interpolate(by_panel["Since the last run"], pushed.scope, job=JOB))
    assert len(since) == 1 and 0 <= _value(since[0]) < 600
    counts = prom_stack.query(interpolate(by_panel["Cells by verdict"], pushed.scope, job=JOB))
    assert {r["metric"]["verdict"]: _value(r) for r in counts if _value(r)} == {
        k: float(v) for k, v in pushed.run.counts().items()
    }
    ratios = {
        r["metric"]["cell"]: _value(r)
        for r in prom_stack.query(
            interpolate(by_panel["Candidate / baseline output tokens per second"], pushed.scope, job=JOB)
        )
    }
    assert ratios["agg.cpu_attn.b32.auto.v1.candidate"] == pytest.approx(0.55)
    assert ratios["agg.cpu_attn.b128.auto.v1.candidate"] == pytest.approx(1.0)


def _expected_alerts(run: RunResult) -> dict[str, set[str]]:
    """Cells each alert must name, derived from the run itself."""

    def metric(cell_id: str, check: str, key: str) -> float | None:
        cell = next(c for c in run.cells if c.cell.id == cell_id)
        found = cell.check(check)
        return None if found is None or key not in found.metrics else found.metrics[key]

    def coordinates(result: CellResult) -> tuple[str, ...]:
        return tuple(v for k, v in result.cell.axis_values().items() if k != "image")

    def on_baseline(key: str) -> dict[tuple[str, ...], float | None]:
        """A throughput metric of every baseline-image cell, by its coordinates."""
        baseline = [c for c in run.cells if c.cell.image == run.baseline_image]
        return {coordinates(c): metric(c.cell.id, "throughput", key) for c in baseline}

    ids = [c.cell.id for c in run.cells]
    baseline_tps = on_baseline("output_tokens_per_s")
    regression = set()
    for c in run.cells:
        tps = metric(c.cell.id, "throughput", "output_tokens_per_s")
        base = baseline_tps.get(coordinates(c))
        if c.cell.image != run.baseline_image and tps is not None and base and tps / base < 0.8:
            regression.add(c.cell.id)
    # A candidate's capacity interval ending below where the baseline's starts (both ends present).
    baseline_capacity_low = on_baseline("capacity_low_requests_per_s")
    capacity_regression = set()
    for c in run.cells:
        high = metric(c.cell.id, "throughput", "capacity_high_requests_per_s")
        low = baseline_capacity_low.get(coordinates(c))
        if c.cell.image != run.baseline_image and high is not None and low and high / low < 1:
            capacity_regression.add(c.cell.id)
    return {
        "CanaryCapacityRegression": capacity_regression,
        "CanaryCellFailing": {c.cell.id for c in run.cells if c.verdict in DEFINITIVE_FAILURES},
        # A run-level alert (no cell label): "" when the run is inconclusive.
        "CanaryRunInconclusive": {""} if run.outcome == "inconclusive" else set(),
        "CanaryAccuracyBelowGate": {
            i
            for i in ids
            if (high := metric(i, "accuracy", "accuracy_wilson_high")) is not None
            and high < (metric(i, "accuracy", "accuracy_threshold") or 0)
        },
        "CanaryThroughputRegression": regression,
        "CanaryPDWithoutKVTransfer": {
            i for i in ids if (b := metric(i, "kv_transfer", "nixl_bytes_transferred")) is not None and b < 1
        },
        "CanaryStale": set(),
        # P/D cells whose parity failed with prompts beyond the null arm's floor.
        "CanaryKVFidelityBreach": {
            c.cell.id
            for c in run.cells
            if c.cell.topology == "pd-nixl"
            and (p := c.check("parity")) is not None
            and p.verdict == "fail"
            and p.metrics.get("parity_failing_prompts", 0) > 0
        },
        # Candidate controls whose drift gates against the baseline image failed (none in the sample:
        # test_a_drifting_candidate_image_alerts pushes one).
        "CanaryImageDrift": {
            i for i in ids if (g := metric(i, "parity", "parity_drift_failed_gates")) is not None and g > 0
        },
        # The run history's recent worse change points, handed to the exporters in the throughput metrics.
        "CanaryHistoryChangePoint": {
            i for i in ids for key in TRACKED.values() if (v := metric(i, "throughput", key)) is not None and v > 0
        },
    }


def _rules() -> dict[str, str]:
    return yaml_rules()


def test_every_alert_expression_returns_exactly_the_cells_it_should(prom_stack: PromStack, pushed: Pushed) -> None:
    expected = _expected_alerts(pushed.run)
    rules = _rules()
    assert set(rules) == set(expected)
    for name, cells in expected.items():
        if name not in ("CanaryStale", "CanaryRunInconclusive", "CanaryImageDrift"):  # those: their own tests
            assert cells, f"the sample run does not exercise {name}"
        result = [r for r in prom_stack.query(rules[name]) if r["metric"].get("scope") == pushed.scope]
        assert {r["metric"].get("cell", "") for r in result} == cells, name


def test_a_drifting_candidate_image_alerts(prom_stack: PromStack, pushed: Pushed, tmp_path: Path) -> None:
    drifting = "agg.cpu_attn.b128.auto.v1.candidate"
    run = with_drift(sample_run(run_id="20261130T030000Z-cpu-default-2"), drifting)
    drift = push(prom_stack, tmp_path, "it-drift", run)
    assert _expected_alerts(drift.run)["CanaryImageDrift"] == {drifting}
    result = [r for r in prom_stack.query(_rules()["CanaryImageDrift"]) if r["metric"]["scope"] == drift.scope]
    assert [(r["metric"]["cell"], _value(r)) for r in result] == [(drifting, 2.0)]
    assert not [r for r in prom_stack.query(_rules()["CanaryImageDrift"]) if r["metric"]["scope"] == pushed.scope]


def test_stale_alert_names_a_canary_without_a_recent_run(prom_stack: PromStack, pushed: Pushed, tmp_path: Path) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    stale = push(prom_stack, tmp_path, "it-stale", sample_run(finished_at=old, run_id="20261126T000000Z-cpu-default-1"))
    result = prom_stack.query(_rules()["CanaryStale"])
    assert {r["metric"]["scope"] for r in result} >= {stale.scope}
    assert pushed.scope not in {r["metric"]["scope"] for r in result}
    assert next(_value(r) for r in result if r["metric"]["scope"] == stale.scope) > 3 * 86400 - 60


def test_prometheus_loads_the_rules_and_fires_the_alerts(prom_stack: PromStack, pushed: Pushed) -> None:
    rules = json.loads(http_get(f"{prom_stack.prometheus_url}/api/v1/rules"))["data"]["groups"]
    assert [r["health"] for g in rules for r in g["rules"]] == ["ok"] * len(_rules())
    expected = {name for name, cells in _expected_alerts(pushed.run).items() if cells}
    prom_stack.wait_for(
        f'ALERTS{{alertstate="firing",scope="{pushed.scope}"}}',
        lambda r: {x["metric"]["alertname"] for x in r} == expected,
        deadline_s=30,
    )
