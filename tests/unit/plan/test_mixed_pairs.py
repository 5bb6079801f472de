"""Mixed P/D pairs: prefill and decode on different images or runners (a rolling upgrade)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.errors import ConfigError
from canary.paths import REPO_ROOT
from canary.plan.cell import RISK_MIXED_PAIR
from canary.plan.matrix import plan
from canary.targets.engine_plan import EngineBuild, port_names
from canary.targets.local.target import LocalTarget


def _pd(**fields: Any) -> dict[str, Any]:
    """A P/D include at logical 128 on CPU_ATTN, with these fields on top."""
    return {"backend": "CPU_ATTN", "prefill_block_size": 128, "decode_block_size": 128, "topology": "pd-nixl", **fields}


def _config(*includes: dict[str, Any]) -> CanaryConfig:
    data = yaml.safe_load((REPO_ROOT / "configs" / "cpu-default.yaml").read_text())
    data["matrix"]["include"] = list(includes)
    data["matrix"]["prefill_block_sizes"] = [128]
    data["matrix"]["topologies"] = ["aggregated"]
    data["matrix"]["expectations"] = []
    return validate_config(data, "test")


def test_mixed_image_pair_is_planned_with_its_own_id_kernels_and_risk() -> None:
    config = _config(
        _pd(image="baseline", decode_image="kernel32"),
    )
    (cell,) = [c for c in plan(config).planned() if c.topology == "pd-nixl"]
    assert cell.id == "pd.cpu_attn.p128-d128.auto.v1.baseline-kernel32"
    assert (cell.image_for("prefill"), cell.image_for("decode")) == ("baseline", "kernel32")
    assert (cell.kernel_block_prefill, cell.kernel_block_decode) == (128, 32)  # each side's own build
    assert RISK_MIXED_PAIR in cell.risks and "kernel-split" in cell.risks and cell.high_risk
    assert cell.image_ref_for("decode") == config.images["kernel32"].ref


def test_a_pair_that_names_its_own_image_for_decode_is_not_mixed() -> None:
    config = _config(
        _pd(image="kernel32", decode_image="kernel32"),
    )
    (cell,) = [c for c in plan(config).planned() if c.topology == "pd-nixl"]
    assert not cell.mixed and cell.decode_image is None
    assert cell.id == "pd.cpu_attn.p128-d128.auto.v1.kernel32"


def test_mixed_runner_on_cpu_is_unsupported_with_the_reason() -> None:
    config = _config(
        _pd(runner="v1", decode_runner="v2", image="baseline"),
    )
    (cell,) = [c for c in plan(config).cells if c.topology == "pd-nixl"]
    assert cell.id == "pd.cpu_attn.p128-d128.auto.v1-v2.baseline"
    assert cell.status == "unsupported" and "model runner v2 does not run on cpu" in (cell.reason or "")
    assert cell.runner_for("prefill") == "v1" and cell.runner_for("decode") == "v2"


def test_mixed_fields_need_pd_and_a_known_image() -> None:
    with pytest.raises(ConfigError, match="need topology: pd-nixl"):
        _config(_pd(topology="aggregated", decode_image="kernel32"))
    with pytest.raises(ConfigError, match=r"matrix.include.0.decode_image.*unknown image 'nope'"):
        _config(_pd(decode_image="nope"))


def test_local_target_runs_each_side_from_its_own_build(tmp_path: Any) -> None:
    config = _config(
        _pd(image="baseline", decode_image="kernel32"),
    )
    (cell,) = [c for c in plan(config).planned() if c.topology == "pd-nixl"]
    target = LocalTarget(config, cache_dir=tmp_path, cores=2)
    builds = {
        "baseline": EngineBuild(tmp_path / "py-base"),
        "kernel32": EngineBuild(tmp_path / "py-k32", ("/overlay/k32",)),
    }
    ports = {name: str(20000 + i) for i, name in enumerate(port_names(cell))}
    cell_plan = target.planner.plan(cell, ports, builds, layout_root="/logs", dry_run=True)
    plans = {p.role: p for p in cell_plan.servers}
    assert plans["prefill"].argv[0] == str(tmp_path / "py-base")
    assert plans["decode"].argv[0] == str(tmp_path / "py-k32")
    assert "/overlay/k32" not in plans["prefill"].env.get("PYTHONPATH", "")
    assert plans["decode"].env["PYTHONPATH"].startswith("/overlay/k32:")
    assert plans["decode"].env["CANARY_LAYOUT_DIR"] == "/logs/decode.layout"
    # the described plan names both overlays
    described = target.describe(cell)
    envs = {s["role"]: s["env"] for s in described["servers"]}  # type: ignore[index, union-attr]
    assert "$OVERLAY_OF(configs/engine-patches/cpu-attn-kernel-32/series)" in envs["decode"]["PYTHONPATH"]
    assert "OVERLAY_OF" not in envs["prefill"].get("PYTHONPATH", "")
