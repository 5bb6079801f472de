"""The committed Grafana dashboards say what the alerts say and can be read without the README.

Every check reads configs/dashboards/*.json (what Grafana loads; test_prom_promtool.py checks that it is
what canary/export/prometheus/dashboards/ generates):
- a panel that names an alert shows that alert's expression from configs/alerts/canary-rules.yaml:
  whole, or its value with the alert's threshold as a colour step (no copy that could drift, no
  panel that counts other verdicts than the alert fires for);
- every panel has a unit (`none` only where value mappings turn the numbers into words) and a
  description; the words a newcomer does not know are explained where they appear;
- every query is kept to the chosen job and scope, and the variables list only the values the
  variables before them leave, so several canaries on one Prometheus do not mix;
- top-N panels use the $limit variable, and the *_over_floor panels draw the gate's threshold.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from canary.checks.accuracy import exported as accuracy_exported
from canary.checks.parity import exported as parity_exported
from canary.checks.throughput import exported as throughput_exported
from canary.export.prometheus import alerts, dashboards
from canary.export.prometheus import schema as s
from canary.paths import REPO_ROOT

DASHBOARD_FILES = sorted((REPO_ROOT / "configs" / "dashboards").glob("*.json"))
MIN_DESCRIPTION = 60
"""Characters a description needs to say what a panel shows and how to read it."""


def _panels(path: Path) -> list[dict[str, Any]]:
    board = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for panel in board["panels"]:
        out += [panel, *panel.get("panels", [])]
    return [p for p in out if p["type"] != "row"]


PANELS = [(path.stem, panel) for path in DASHBOARD_FILES for panel in _panels(path)]
IDS = [f"{board}:{panel['title']}" for board, panel in PANELS]


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [alerts.normalized(t["expr"]) for t in panel.get("targets", [])]


def _threshold_values(panel: dict[str, Any]) -> set[float]:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    return {float(step["value"]) for step in steps if step.get("value") is not None}


def cited_alerts(panel: dict[str, Any]) -> set[str]:
    """The alert names a panel's title and description mention."""
    return set(alerts.ALERT_NAME.findall(f"{panel['title']} {panel.get('description', '')}"))


def uses_alert(panel: dict[str, Any], rule: alerts.AlertRule) -> bool:
    """Whether one of the panel's queries holds the alert's expression, or its value with the
    alert's threshold as a colour step."""
    exprs = _exprs(panel)
    if any(alerts.normalized(rule.expr) in expr for expr in exprs):
        return True
    comparison = rule.comparison
    if comparison is None:
        return False
    value, _, threshold = comparison
    return any(alerts.normalized(value) in expr for expr in exprs) and threshold in _threshold_values(panel)


def test_there_are_dashboards_and_panels() -> None:
    assert {p.stem for p in DASHBOARD_FILES} == {"vllm-canary-overview", "vllm-canary-performance"}
    assert len(PANELS) > 25


@pytest.mark.parametrize(("board", "panel"), PANELS, ids=IDS)
def test_a_panel_that_names_an_alert_uses_that_alerts_expression(board: str, panel: dict[str, Any]) -> None:
    rules = alerts.rules()
    for name in cited_alerts(panel):
        assert name in rules, f"{board} / {panel['title']}: names {name}, which is no alert of the rules file"
        assert uses_alert(panel, rules[name]), (
            f"{board} / {panel['title']}: names {name} but no query holds its expression "
            f"`{alerts.normalized(rules[name].expr)}`; queries: {_exprs(panel)}"
        )


def test_every_alert_is_on_a_dashboard() -> None:
    shown = {name for _, panel in PANELS for name in cited_alerts(panel) if uses_alert(panel, alerts.rule(name))}
    assert shown == set(alerts.rules())


@pytest.mark.parametrize(("board", "panel"), PANELS, ids=IDS)
def test_every_panel_has_a_unit_and_a_description(board: str, panel: dict[str, Any]) -> None:
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit = defaults.get("unit")
    assert unit, f"{board} / {panel['title']}: no unit"
    if unit == "none":
        assert defaults.get("mappings"), f"{board} / {panel['title']}: unit none, and no value mappings say what it is"
    description = panel.get("description", "")
    assert len(description) >= MIN_DESCRIPTION, f"{board} / {panel['title']}: description too short: {description!r}"


@pytest.mark.parametrize(("board", "panel"), PANELS, ids=IDS)
def test_the_words_a_newcomer_does_not_know_are_explained(board: str, panel: dict[str, Any]) -> None:
    text = f"{panel['title']} {panel.get('description', '')}".lower()
    for term in ("null floor", "evidence prompts", "× threshold", "slo capacity", "disaggregation gain"):
        if term in text:
            glossary = {key.lower(): value for key, value in dashboards.GLOSSARY.items()}
            assert glossary[term].lower() in text, f"{board} / {panel['title']}: {term} is not explained"
    if panel.get("fieldConfig", {}).get("defaults", {}).get("unit") == dashboards.U_NATS:
        assert dashboards.GLOSSARY["KL"].lower() in text, f"{board} / {panel['title']}: KL in nats is not explained"


def test_panel_units_match_what_the_metrics_measure() -> None:
    units = {panel["title"]: panel["fieldConfig"]["defaults"]["unit"] for _, panel in PANELS}
    by_metric: dict[str, str] = {
        throughput_exported.OUTPUT_TOKENS_PER_S.name: dashboards.U_TOKENS_PER_S,
        throughput_exported.REQUESTS_PER_S.name: dashboards.U_REQUESTS_PER_S,
        parity_exported.PARITY_KL_MAX.name: dashboards.U_NATS,
        parity_exported.PARITY_KL_OVER_FLOOR.name: dashboards.U_OVER_THRESHOLD,
        throughput_exported.LATENCY["ttft"].name: dashboards.U_SECONDS,
        accuracy_exported.ACCURACY.name: dashboards.U_RATIO,
        throughput_exported.CAPACITY.name: dashboards.U_REQUESTS_PER_S,
        throughput_exported.DISAGG_GAIN.name: dashboards.U_GAIN,
    }
    for metric, unit in by_metric.items():
        panels = [
            p["title"]
            for _, p in PANELS
            if p["type"] == "timeseries"
            and p.get("targets")
            and re.match(rf"(?:(?:topk|bottomk)\(\$limit, )?{metric}{{", p["targets"][0]["expr"])
        ]
        assert panels, metric
        assert all(units[title] == unit for title in panels), (metric, {t: units[t] for t in panels})


@pytest.mark.parametrize(("board", "panel"), PANELS, ids=IDS)
def test_every_query_is_kept_to_the_chosen_job_and_scope(board: str, panel: dict[str, Any]) -> None:
    for expr in _exprs(panel):
        assert 'job=~"$job"' in expr and 'scope=~"$scope"' in expr, f"{board} / {panel['title']}: {expr}"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=[p.stem for p in DASHBOARD_FILES])
def test_variables_list_only_the_values_of_the_chosen_job_and_scope(path: Path) -> None:
    variables = [v for v in json.loads(path.read_text())["templating"]["list"] if v["type"] == "query"]
    names = [v["name"] for v in variables]
    assert names[:2] == ["job", "scope"], names
    for index, variable in enumerate(variables):
        for earlier in names[:index]:
            assert f'=~"${earlier}"' in variable["query"], (variable["name"], variable["query"])


@pytest.mark.parametrize(("board", "panel"), PANELS, ids=IDS)
def test_top_n_panels_use_the_limit_variable(board: str, panel: dict[str, Any]) -> None:
    for expr in _exprs(panel):
        for found in re.finditer(r"\b(topk|bottomk)\(([^,]+),", expr):
            assert found[2].strip() == f"${dashboards.LIMIT_VAR}", f"{board} / {panel['title']}: {expr}"


def test_panels_of_many_cells_are_top_n() -> None:
    """Time series and status histories of cell metrics show at most $limit cells (a GPU matrix has hundreds)."""
    for board, panel in PANELS:
        if panel["type"] not in ("timeseries", "status-history"):
            continue
        for target in panel["targets"]:
            expr = target["expr"]
            legend = target.get("legendFormat", "")
            if "{{cell}}" in legend and "topk(" not in expr and "bottomk(" not in expr:
                # only the cells an alert fires for may be drawn without a limit
                assert any(alerts.normalized(r.expr) in alerts.normalized(expr) for r in alerts.rules().values()), (
                    f"{board} / {panel['title']} {target['refId']}: every cell of the matrix: {expr}"
                )


def test_over_floor_panels_draw_the_gates_threshold() -> None:
    over_floor = [
        panel for _, panel in PANELS if any("_over_floor{" in t["expr"] for t in panel.get("targets", [])[:1])
    ]
    assert len(over_floor) >= 2
    for panel in over_floor:
        if panel["type"] != "timeseries":
            continue
        custom = panel["fieldConfig"]["defaults"]["custom"]
        assert custom["thresholdsStyle"]["mode"] != "off", panel["title"]
        assert dashboards.OVER_FLOOR_LIMIT in _threshold_values(panel), panel["title"]


def test_failing_and_inconclusive_cells_are_separate_panels() -> None:
    by_title = {panel["title"]: panel for _, panel in PANELS}
    failing = by_title["Failing cells: CanaryCellFailing"]
    inconclusive = next(p for t, p in by_title.items() if t.startswith("Inconclusive cells ("))
    assert _exprs(failing) == [alerts.normalized(dashboards.on_cells(alerts.rule("CanaryCellFailing").expr))]
    (expr,) = _exprs(inconclusive)
    assert f'verdict=~"{s.INCONCLUSIVE_VERDICT_REGEX}"' in expr
    assert dashboards.INCONCLUSIVE_WORD in inconclusive["title"]
    assert dashboards.FAILED_WORD in failing["description"]


def test_the_uses_alert_check_can_fail() -> None:
    """A panel with a copy of the old failing-cells query (which counted invalid and error) is caught."""
    rule = alerts.rule("CanaryCellFailing")
    old = {
        "title": "Failing cells",
        "description": "Cells whose verdict fails the run (fail, error, unexpected-pass, invalid): "
        "alert CanaryCellFailing.",
        "targets": [{"expr": f'canary_cell_verdict{{verdict=~"{s.FAILING_VERDICT_REGEX}"}} == 1'}],
    }
    assert cited_alerts(old) == {"CanaryCellFailing"}
    assert not uses_alert(old, rule)
    stale = alerts.rule("CanaryStale")
    wrong_threshold = {
        "targets": [{"expr": f"({stale.value_expr}) and on (job, scope) x"}],
        "fieldConfig": {"defaults": {"thresholds": {"steps": [{"value": None}, {"value": stale.threshold / 2}]}}},
    }
    assert not uses_alert(wrong_threshold, stale)
    wrong_threshold["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"] = stale.threshold  # type: ignore[index]
    assert uses_alert(wrong_threshold, stale)


def test_capacity_and_gain_panels_show_the_interval_and_the_assumption() -> None:
    """SLO capacity and the disaggregation gain: the lowest cells with both ends of their interval (the
    same cells), every cell in a table with the interval's ends as columns, the gain's line at 1 and its
    linear-scaling assumption said on every gain panel."""
    by_title = {panel["title"]: panel for board, panel in PANELS if board == "vllm-canary-performance"}
    for title, value, low, high in (
        (
            "Lowest SLO capacity with its interval",
            throughput_exported.CAPACITY,
            throughput_exported.CAPACITY_LOW,
            throughput_exported.CAPACITY_HIGH,
        ),
        (
            "Lowest disaggregation gain with its interval",
            throughput_exported.DISAGG_GAIN,
            throughput_exported.DISAGG_GAIN_LOW,
            throughput_exported.DISAGG_GAIN_HIGH,
        ),
    ):
        exprs = _exprs(by_title[title])
        lowest = f"bottomk($limit, {value.name}{{"
        assert exprs[0].startswith(lowest)
        assert exprs[1].startswith(f"{low.name}{{") and lowest in exprs[1]
        assert exprs[2].startswith(f"{high.name}{{") and lowest in exprs[2]
    assert 1.0 in _threshold_values(by_title["Lowest disaggregation gain with its interval"])
    tables = {
        "SLO capacity now": throughput_exported.CAPACITY_LOW,
        "Disaggregation gain by backend and block size": throughput_exported.DISAGG_GAIN_LOW,
    }
    for title, low in tables.items():
        assert any(expr.startswith(f"{low.name}{{") for expr in _exprs(by_title[title])), title
    gain_panels = [p for t, p in by_title.items() if "disaggregation gain" in t.lower()]
    assert len(gain_panels) == 2
    for panel in gain_panels:
        assert "linear-scaling assumption" in panel["description"] and "x2" in panel["description"]
    block_columns = by_title["Disaggregation gain by backend and block size"]["transformations"][1]["options"]
    assert not {"backend", "prefill_block_size", "decode_block_size"} & set(block_columns["excludeByName"])
