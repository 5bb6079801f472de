"""canary.export.prometheus.alerts reads the rules file as it is: every alert, its expression verbatim,
and the value and threshold of the alerts that compare one number with a constant."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from canary.export.prometheus import alerts


def test_every_alert_of_the_rules_file_with_its_expression() -> None:
    raw = yaml.safe_load(alerts.RULES_FILE.read_text())
    rules = {r["alert"]: r for g in raw["groups"] for r in g["rules"]}
    assert set(alerts.rules()) == set(rules)
    for name, rule in alerts.rules().items():
        assert rule.expr == rules[name]["expr"].strip()
        assert rule.severity == rules[name]["labels"]["severity"]


def test_value_and_threshold_of_comparisons() -> None:
    stale = alerts.rule("CanaryStale")
    assert stale.value_expr == "time() - max by (job, scope) (canary_run_timestamp_seconds)"
    assert stale.threshold == 172800
    regression = alerts.rule("CanaryThroughputRegression")
    assert regression.threshold == 0.8
    assert alerts.normalized(regression.value_expr + " < 0.8") == alerts.normalized(regression.expr)
    # `x == 1` and a set operation of two comparisons have no single value and threshold.
    for name in ("CanaryCellFailing", "CanaryKVFidelityBreach", "CanaryAccuracyBelowGate"):
        assert alerts.rule(name).comparison is None, name
        with pytest.raises(ValueError, match="is not"):
            alerts.rule(name).threshold  # noqa: B018


def test_a_changed_rules_file_changes_what_is_read(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"record": "x:y", "expr": "sum(x)"},
                            {"alert": "CanaryStale", "expr": "time() - max(canary_run_timestamp_seconds) > 3600"},
                        ],
                    }
                ]
            }
        )
    )
    loaded = alerts.load(path)
    assert list(loaded) == ["CanaryStale"]
    assert loaded["CanaryStale"].threshold == 3600
    with pytest.raises(KeyError, match="known: "):
        alerts.rule("CanaryNoSuchAlert")
