"""Adding a check needs its own folder and nothing else: a throwaway check, written to a temporary folder
on canary.checks' path, is configured, ordered, exported and estimated like the built-in ones.

The throwaway folder holds what the "Adding a check" recipe of docs/architecture.md asks for
(`settings.py`, `exported.py`, `check.py`); a fresh interpreter (the config assembles its `checks`
section once, at import) appends the folder's parent to canary.checks.__path__ before importing
canary, then reports what the config, the registry, the Prometheus schema and the wave estimate
made of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from canary.paths import REPO_ROOT
from tests.support.plugin_folder import probe_plugin_folder

FOLDER: dict[str, str] = {
    "__init__.py": '"""A throwaway check (tests/unit/checks/test_new_check.py)."""\n',
    "settings.py": """
        from pydantic import Field

        from canary.config.base import CheckSection, Strict


        class ThrowawaySettings(Strict):
            \"\"\"A throwaway check's settings.\"\"\"

            enabled: bool = Field(True, description="Run it.")
            minutes: float = Field(2.0, gt=0, description="How long it takes on a cell.")


        SECTION = CheckSection(ThrowawaySettings, "A throwaway check.")
        """,
    "exported.py": """
        from canary.core.metric_spec import Exported, cell_metric

        SECONDS = cell_metric("throwaway_seconds", "How long the throwaway check took.", "seconds")
        EXPORTED = (Exported(SECONDS, "throwaway_s"),)
        """,
    "check.py": """
        from canary.checks.base import CheckContext, EstimateInput, register
        from canary.checks.throwaway.exported import EXPORTED
        from canary.checks.throwaway.settings import ThrowawaySettings
        from canary.judge.results import CheckResult


        def estimate(inp: EstimateInput) -> float:
            return 60 * inp.config.checks.section(ThrowawaySettings).minutes


        @register("throwaway", order=10, settings=ThrowawaySettings, metrics=EXPORTED, estimate=estimate)
        def throwaway(ctx: CheckContext) -> CheckResult:
            return CheckResult(name="throwaway", verdict="pass", summary="ok", metrics={"throwaway_s": 1.5})
        """,
}

PROBE = """
import json, sys
import canary.checks
canary.checks.__path__.append(sys.argv[1])

from canary.checks.base import check_order, specs
from canary.checks.estimate import check_seconds, checks_by_cell
from canary.config.load import validate_config
from canary.export.prometheus import schema
from canary.plan.matrix import plan
from canary.plan.waves import select_night

data = json.loads(sys.argv[2])
config = validate_config(data, "throwaway")
cells = plan(config).planned()
night = select_night(cells, config, {}, checks_by_cell)
data["checks"]["throwaway"]["enabled"] = False
off = validate_config(data, "throwaway off")
print(json.dumps({
    "order": list(check_order()),
    "section": type(config.checks.throwaway).__name__,
    "minutes": config.checks.throwaway.minutes,
    "metric_keys": list(specs()["throwaway"].metric_keys),
    "exported": [[m.spec.name, m.check, m.key] for m in schema.CHECK_METRICS if m.check == "throwaway"],
    "documented": "canary_throwaway_seconds" in schema.metrics_markdown(),
    "estimate": check_seconds(cells[0], config),
    "estimate_off": check_seconds(cells[0], off),
    "wave_s": [w.typical_s for w in night.waves],
    "wave_cells": [len(w.cells) for w in night.waves],
}))
"""

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "throwaway",
    "platform": "sm90",
    "models": [{"name": "m", "source": "org/m"}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {"attention_backends": ["FLASH_ATTN"], "prefill_block_sizes": [64], "topologies": ["aggregated"]},
    "checks": {
        "throwaway": {"minutes": 7},
        "parity": {"enabled": False},
        "accuracy": {"enabled": False},
        "throughput": {"enabled": False},
        "kv_transfer": {"enabled": False},
    },
    "target": {"kind": "kubernetes", "kubernetes": {"gpu_budget": 8, "typical_start_s": 100}},
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe_plugin_folder(tmp_path_factory.mktemp("extra-checks"), "throwaway", FOLDER, PROBE, CONFIG)


def test_its_folder_configures_and_orders_it(probed: dict[str, Any]) -> None:
    assert probed["section"] == "ThrowawaySettings" and probed["minutes"] == 7
    assert probed["order"] == ["startup", "parity", "accuracy", "throughput", "kv_transfer", "lifecycle", "throwaway"]


def test_its_metric_is_in_the_prometheus_schema_and_the_reference(probed: dict[str, Any]) -> None:
    assert probed["exported"] == [["canary_throwaway_seconds", "throwaway", "throwaway_s"]]
    assert probed["metric_keys"] == ["throwaway_s"] and probed["documented"]


def test_the_wave_estimate_uses_its_declared_time(probed: dict[str, Any]) -> None:
    assert probed["estimate"] == {"throwaway": 7 * 60.0}  # every other check is off in CONFIG
    assert probed["estimate_off"] == {}  # enabled: false costs nothing
    # one wave: deploy 15 s + start 100 s + the checks + teardown 90 s (EstimateModel's defaults)
    assert probed["wave_cells"] == [1]
    assert probed["wave_s"] == [pytest.approx(15 + 100 + 7 * 60 + 90)]


def test_the_built_in_checks_are_folders_like_it() -> None:
    for name in ("startup", "parity", "accuracy", "throughput", "kv_transfer", "lifecycle"):
        folder = Path(REPO_ROOT / "canary" / "checks" / name)
        assert {"settings.py", "exported.py", "estimate.py", "check.py"} <= {p.name for p in folder.iterdir()}
