"""The dashboards at a GPU matrix's scale against the real Prometheus: a synthetic run of 384 cells
(tests/support/gpu_matrix.py, ~19k series) is pushed through the real Pushgateway as the canary pushes
it, scraped by the real Prometheus with the real alert rules, and every panel query of the committed
dashboards is evaluated over Prometheus' HTTP API:
- every query returns data (the synthetic matrix has every outcome a panel exists for);
- a top-N panel returns at most N series, at an instant and over a range;
- the failing-cells panel lists exactly the cells CanaryCellFailing fires for (the ALERTS series
  Prometheus itself evaluated), every other query that is an alert's expression (the red points and
  tables beside the charts) lists exactly that alert's firing set, and the alerts-firing panel's
  numbers are the firing sets' sizes;
- the inconclusive panel lists exactly the invalid and error cells, and the variables with job and
  scope chosen list only this run's values.

With CANARY_DASHBOARD_EVIDENCE=DIR the panels' data is written to DIR/panels.json (what each query
returned: series count and the values with their legends) for a picture of the run.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from promhelpers import (
    DASHBOARDS_DIR,
    JOB,
    LIMIT,
    PromStack,
    dashboard_queries,
    dashboard_variables,
    http_get,
    interpolate,
    yaml_rules,
)

from canary.export.prometheus import schema as s
from canary.export.prometheus.alerts import normalized
from canary.export.prometheus.pushgateway import Gateway, group_url, push
from canary.judge.results import RunResult
from canary.judge.verdicts import DEFINITIVE_FAILURES, INCONCLUSIVE_VERDICTS
from tests.support.gpu_matrix import BACKENDS, gpu_matrix_run

pytestmark = pytest.mark.prometheus

SCOPE = "it-gpu-matrix"
MIN_CELLS = 300
QUERIES = dashboard_queries()
TOP_N = re.compile(r"\b(?:topk|bottomk)\(")


def _panels() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            out[panel["title"]] = panel
    return out


PANELS = _panels()


@pytest.fixture(scope="module")
def gpu_run(prom_stack: PromStack) -> Iterator[RunResult]:
    """The synthetic GPU run pushed under its own scope; its group is deleted afterwards (the other
    tests' scrapes stay small)."""
    run = gpu_matrix_run()
    body = s.exposition(run)
    gateway = Gateway(url=prom_stack.pushgateway_url, timeout_s=120.0, retries=1, backoff_s=0.5)
    started = time.monotonic()
    push(gateway, JOB, SCOPE, body)
    prom_stack.wait_for(
        f'count({s.CELL_STATUS.name}{{scope="{SCOPE}"}})',
        lambda r: len(r) == 1 and int(float(r[0]["value"][1])) == len(run.cells),
        deadline_s=120,
    )
    print(
        f"\ngpu matrix: {len(run.cells)} cells, {len(s.samples(run))} series, {len(body) / 1e6:.1f} MB pushed, "
        f"queryable after {time.monotonic() - started:.1f} s"
    )
    try:
        yield run
    finally:
        request = urllib.request.Request(group_url(prom_stack.pushgateway_url, JOB, SCOPE), method="DELETE")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()


def _query(stack: PromStack, expr: str) -> list[dict[str, Any]]:
    return stack.query(interpolate(expr, SCOPE, job=JOB))


def _range_series(stack: PromStack, expr: str, seconds: int = 20) -> list[dict[str, Any]]:
    end = time.time()
    params = {"query": interpolate(expr, SCOPE, job=JOB), "start": end - seconds, "end": end, "step": "2"}
    url = f"{stack.prometheus_url}/api/v1/query_range?" + urllib.parse.urlencode(params)
    payload = json.loads(http_get(url, timeout_s=60))
    assert payload["status"] == "success", payload
    result: list[dict[str, Any]] = payload["data"]["result"]
    return result


def _wait_firing(stack: PromStack) -> dict[str, set[str]]:
    """Wait until every rule the matrix trips fires (not CanaryStale and CanaryRunInconclusive: the run is
    fresh and FAILED), then the firing sets."""
    expected = set(yaml_rules()) - {"CanaryStale", "CanaryRunInconclusive"}
    stack.wait_for(
        f'count by (alertname) (ALERTS{{alertstate="firing",scope="{SCOPE}"}})',
        lambda r: {x["metric"]["alertname"] for x in r} == expected,
        deadline_s=60,
    )
    return _firing(stack)


def _firing(stack: PromStack) -> dict[str, set[str]]:
    """Alert name -> cells (or "" for run-level alerts) Prometheus fires for in this scope."""
    out: dict[str, set[str]] = {}
    for r in stack.query(f'ALERTS{{alertstate="firing",scope="{SCOPE}"}}'):
        out.setdefault(r["metric"]["alertname"], set()).add(r["metric"].get("cell", ""))
    return out


def test_the_matrix_is_gpu_sized(gpu_run: RunResult) -> None:
    assert len(gpu_run.cells) >= MIN_CELLS
    verdicts = Counter(c.verdict for c in gpu_run.cells)
    assert {"pass", "fail", "unexpected-pass", "invalid", "error", "expected-fail"} <= set(verdicts), verdicts


def test_failing_cells_panel_is_the_alerts_firing_set(prom_stack: PromStack, gpu_run: RunResult) -> None:
    want = {c.cell.id for c in gpu_run.cells if c.verdict in DEFINITIVE_FAILURES}
    prom_stack.wait_for(
        f'count(ALERTS{{alertname="CanaryCellFailing",alertstate="firing",scope="{SCOPE}"}})',
        lambda r: len(r) == 1 and int(float(r[0]["value"][1])) == len(want),
        deadline_s=60,
    )
    firing = _firing(prom_stack)["CanaryCellFailing"]
    (query,) = PANELS["Failing cells: CanaryCellFailing"]["targets"]
    shown = {r["metric"]["cell"] for r in _query(prom_stack, query["expr"])}
    assert shown == firing == want
    assert {r["metric"]["verdict"] for r in _query(prom_stack, query["expr"])} == set(DEFINITIVE_FAILURES)

    inconclusive_title = next(t for t in PANELS if t.startswith("Inconclusive cells ("))
    (query,) = PANELS[inconclusive_title]["targets"]
    shown_inconclusive = {r["metric"]["cell"] for r in _query(prom_stack, query["expr"])}
    assert shown_inconclusive == {c.cell.id for c in gpu_run.cells if c.verdict in INCONCLUSIVE_VERDICTS}
    assert not shown_inconclusive & firing

    # The grouped panel counts the same cells.
    (query,) = PANELS["Failing cells by backend and block size: CanaryCellFailing"]["targets"]
    groups = _query(prom_stack, query["expr"])
    assert 0 < len(groups) <= LIMIT
    by_group = Counter(
        (c.cell.topology, c.cell.backend, str(c.cell.prefill_block_size), str(c.cell.decode_block_size))
        for c in gpu_run.cells
        if c.verdict in DEFINITIVE_FAILURES
    )
    largest = sorted(by_group.values(), reverse=True)[: len(groups)]
    assert sorted((int(float(g["value"][1])) for g in groups), reverse=True) == largest


def test_alerts_firing_panel_counts_each_alerts_firing_set(prom_stack: PromStack, gpu_run: RunResult) -> None:
    rules = yaml_rules()
    panel = PANELS["Alerts firing now"]
    assert len(panel["targets"]) == len(rules)
    firing = _wait_firing(prom_stack)
    for target in panel["targets"]:
        name = target["legendFormat"]
        assert normalized(rules[name]) in normalized(target["expr"]), name
        (result,) = _query(prom_stack, target["expr"])
        assert int(float(result["value"][1])) == len(firing.get(name, set())), name


def test_every_panel_showing_an_alerts_series_shows_its_firing_set(prom_stack: PromStack, gpu_run: RunResult) -> None:
    """A query that is an alert's expression kept to the variables returns exactly the cells the alert fires
    for (the points and tables beside the charts: no NIXL bytes, below the accuracy gate, corrupt KV, drift)."""
    rules = {name: normalized(expr) for name, expr in yaml_rules().items()}
    firing = _wait_firing(prom_stack)
    checked = set()
    for query in QUERIES:
        expr = normalized(query.expr)
        for name, rule in rules.items():
            if expr.startswith(f"({rule}) and on (job, scope, cell) "):
                shown = {r["metric"]["cell"] for r in _query(prom_stack, query.expr)}
                assert shown == firing[name], f"{query.panel} {query.ref}: {name}"
                checked.add(name)
    assert {
        "CanaryCellFailing",
        "CanaryPDWithoutKVTransfer",
        "CanaryAccuracyBelowGate",
        "CanaryKVFidelityBreach",
        "CanaryImageDrift",
    } <= checked


@pytest.mark.parametrize("query", QUERIES, ids=[f"{q.dashboard}:{q.panel}:{q.ref}" for q in QUERIES])
def test_every_panel_query_returns_data_and_top_n_at_most_n(
    prom_stack: PromStack, gpu_run: RunResult, query: Any
) -> None:
    result = _query(prom_stack, query.expr)
    assert result, f"{query.dashboard} / {query.panel} {query.ref}: no data for {interpolate(query.expr, SCOPE)}"
    if TOP_N.search(query.expr):
        assert len(result) <= LIMIT, f"{query.panel} {query.ref}: {len(result)} series > top {LIMIT}"
        over_range = _range_series(prom_stack, query.expr)
        assert 0 < len(over_range) <= LIMIT, f"{query.panel} {query.ref}: {len(over_range)} series over 20 s"
    _record(query, result)


def test_variables_list_only_this_canarys_values(prom_stack: PromStack, gpu_run: RunResult) -> None:
    backends = next(q for _, name, q in dashboard_variables() if name == "backend")
    metric, matchers = re.fullmatch(r"label_values\((canary_[a-z0-9_]+)(\{[^}]*\}), backend\)", backends).groups()  # type: ignore[union-attr]
    match = interpolate(metric + matchers, SCOPE, job=JOB)
    url = f"{prom_stack.prometheus_url}/api/v1/label/backend/values?" + urllib.parse.urlencode({"match[]": match})
    assert set(json.loads(http_get(url))["data"]) == set(BACKENDS)


# --------------------------------------------------------------------------- evidence

_RECORDED: list[dict[str, Any]] = []


def _legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), template) or json.dumps(labels)


def _record(query: Any, result: list[dict[str, Any]]) -> None:
    out = os.environ.get("CANARY_DASHBOARD_EVIDENCE")
    if not out:
        return
    panel = PANELS.get(query.panel, {})
    target = next((t for t in panel.get("targets", []) if t["refId"] == query.ref), {})
    values = [
        (_legend(target.get("legendFormat", "") or "{{cell}}", r["metric"]), float(r["value"][1])) for r in result
    ]
    _RECORDED.append(
        {
            "dashboard": query.dashboard,
            "panel": query.panel,
            "ref": query.ref,
            "unit": panel.get("fieldConfig", {}).get("defaults", {}).get("unit"),
            "thresholds": [
                step.get("value")
                for step in panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
            ],
            "top_n": bool(TOP_N.search(query.expr)),
            "series": len(result),
            "values": sorted(values, key=lambda v: -v[1])[:12],
        }
    )
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "panels.json").write_text(json.dumps({"scope": SCOPE, "limit": LIMIT, "queries": _RECORDED}, indent=1))
