"""promtool: the alert rules check and pass their unit tests, every dashboard query parses, the
exposition passes the metric linter. And the committed dashboards are what the code generates."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from promhelpers import RULES, binary, dashboard_queries, interpolate

from canary.export.prometheus import dashboards
from canary.export.prometheus.schema import exposition
from canary.paths import REPO_ROOT
from tests.support.sample import sample_run

ALERT_TESTS = sorted((REPO_ROOT / "configs" / "alerts" / "tests").glob("*.yaml"))


def promtool(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("PROMTOOL_BIN", "/usr/bin/promtool"), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


@pytest.mark.prometheus
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(rules) >= 7
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@pytest.mark.prometheus
def test_promtool_test_rules() -> None:
    assert ALERT_TESTS
    result = promtool("test", "rules", *(p.name for p in ALERT_TESTS), cwd=ALERT_TESTS[0].parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(ALERT_TESTS)


@pytest.mark.prometheus
def test_every_alert_rule_has_a_promtool_test() -> None:
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {
        case["alertname"]
        for path in ALERT_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert names == tested


@pytest.mark.prometheus
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    rules = {
        "groups": [
            {
                "name": "dashboard-queries",
                "rules": [
                    {"record": f"canary_dashboard:query{i}", "expr": interpolate(q.expr, "any")}
                    for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


@pytest.mark.prometheus
def test_the_exposition_passes_promtool_check_metrics() -> None:
    result = promtool("check", "metrics", stdin=exposition(sample_run()))
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


def test_committed_dashboards_are_fresh() -> None:
    committed = {p.name: p.read_text() for p in (REPO_ROOT / "configs" / "dashboards").glob("*.json")}
    generated = {r.filename: r.text for r in dashboards.render_all()}
    regenerate = "python -m canary.export.prometheus.dashboards --out configs/dashboards"
    assert set(committed) == set(generated), f"regenerate: {regenerate}"
    for name, text in generated.items():
        assert committed[name] == text, f"{name} is stale: {regenerate}"
