"""The canary chart carries copies of configs/alerts and configs/dashboards (a chart cannot read
outside itself): they must equal the originals. `make chart-files` refreshes them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("module", ["layout_probe.py", "sitecustomize.py", "after_import.py"])
def test_chart_engine_site_equals_the_engine_site_module(module: str) -> None:
    """The vllm-pd chart mounts the same sitecustomize and KV layout probe the local target loads."""
    original = REPO / "canary" / "targets" / "engine_site" / module
    copy = CHARTS / "vllm-pd" / "files" / module
    assert copy.read_bytes() == original.read_bytes(), f"helm/vllm-pd/files/{module}: run `make chart-files`"


def test_the_chart_engine_site_loads_as_the_interpreters_sitecustomize(tmp_path: Path) -> None:
    """What the chart's ConfigMap mounts works as a directory on PYTHONPATH (its modules import each
    other as top-level modules there): the NIXL progress floor takes hold on a module named like
    nixl's `_api`, and the layout probe's import hook is installed, with nothing on stderr."""
    site = tmp_path / "probe"
    shutil.copytree(CHARTS / "vllm-pd" / "files", site)
    fake = tmp_path / "lib" / "nixlfake"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "_api.py").write_text(
        "class _Config:\n    pthrDelay = 0\n\n\nclass nixlBind:\n    nixlAgentConfig = _Config\n"
    )
    script = (
        "import sys, nixlfake._api as api\n"
        "config = api.nixlBind.nixlAgentConfig()\n"
        "config.pthrDelay = 0\n"
        "hooks = sorted(type(f).__name__ for f in sys.meta_path if type(f).__module__ == 'after_import')\n"
        "print(config.pthrDelay, hooks)\n"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": f"{site}:{tmp_path / 'lib'}",
        "CANARY_LAYOUT_DIR": str(tmp_path / "layout"),
        "CANARY_NIXL_PROGRESS_DELAY_US": "1000",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    # two hooks: the NIXL floor's and the layout probe's (the chart ships no timing probe)
    assert done.stdout.strip() == "1000 ['AfterImport', 'AfterImport']", done.stdout
