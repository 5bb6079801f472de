"""The canary chart carries copies of configs/alerts and configs/dashboards (a chart cannot read
outside itself): they must equal the originals. `make chart-files` refreshes them."""

from __future__ import annotations

import pytest
import yaml
from k8s_helpers import CHARTS, REPO

RULES = REPO / "configs" / "alerts" / "canary-rules.yaml"
CHART_RULES = CHARTS / "canary" / "files" / "canary-rules.yaml"
DASHBOARDS = REPO / "configs" / "dashboards"
CHART_DASHBOARDS = CHARTS / "canary" / "files" / "dashboards"


def test_chart_alert_rules_equal_configs_alerts() -> None:
    if not RULES.exists():
        pytest.xfail(f"{RULES.relative_to(REPO)} has not landed yet: the chart ships a placeholder")
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), "run `make chart-files`"
    assert yaml.safe_load(CHART_RULES.read_text())["groups"], "the rules file has no groups"


def test_chart_dashboards_equal_configs_dashboards() -> None:
    originals = sorted(DASHBOARDS.glob("*.json")) if DASHBOARDS.is_dir() else []
    copies = sorted(CHART_DASHBOARDS.glob("*.json"))
    if not originals:
        assert copies == [], "dashboards in the chart that configs/dashboards does not have"
        pytest.xfail("configs/dashboards/*.json has not landed yet: the chart renders no dashboards ConfigMap")
    assert [p.name for p in copies] == [p.name for p in originals], "run `make chart-files`"
    for original, copy in zip(originals, copies, strict=True):
        assert copy.read_bytes() == original.read_bytes(), f"{copy.name} is stale: run `make chart-files`"
