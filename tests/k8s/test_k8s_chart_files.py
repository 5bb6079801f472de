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
    assert RULES.exists(), f"{RULES.relative_to(REPO)} is missing"
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), "run `make chart-files`"
    assert yaml.safe_load(CHART_RULES.read_text())["groups"], "the rules file has no groups"


def test_chart_dashboards_equal_configs_dashboards() -> None:
    originals = sorted(DASHBOARDS.glob("*.json")) if DASHBOARDS.is_dir() else []
    copies = sorted(CHART_DASHBOARDS.glob("*.json"))
    assert originals, "configs/dashboards/*.json is missing: run `make dashboards`"
    assert [p.name for p in copies] == [p.name for p in originals], "run `make chart-files`"
    for original, copy in zip(originals, copies, strict=True):
        assert copy.read_bytes() == original.read_bytes(), f"{copy.name} is stale: run `make chart-files`"


@pytest.mark.parametrize("module", ["layout_probe.py", "sitecustomize.py"])
def test_chart_engine_site_equals_the_engine_site_module(module: str) -> None:
    """The vllm-pd chart mounts the same sitecustomize and KV layout probe the local target loads."""
    original = REPO / "canary" / "targets" / "engine_site" / module
    copy = CHARTS / "vllm-pd" / "files" / module
    assert copy.read_bytes() == original.read_bytes(), f"helm/vllm-pd/files/{module}: run `make chart-files`"
