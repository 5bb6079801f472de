"""Every KV cache group of a hybrid engine in the startup evidence and the report (kv_groups, kv_grain)."""

from __future__ import annotations

from typing import Any

from canary.checks.startup.kv_groups import (
    attention_groups,
    attention_views,
    group_summaries,
    group_text,
    kernel_step_problems,
)
from canary.checks.startup.layout import judge_layouts, summarize
from canary.config.load import load_config
from canary.export.report.grid import kv_grain
from canary.judge.results import CellResult, CheckResult
from canary.paths import REPO_ROOT
from canary.plan.matrix import plan


def _gemma_record() -> dict[str, Any]:
    """What the probe records for the tiny Gemma-3 (3 sliding groups + 1 full, block 128) as a P/D engine."""
    sliding = {"spec": "SlidingWindowSpec", "kind": "sliding", "sliding_window": 64}
    full = {"spec": "FullAttentionSpec", "kind": "full", "sliding_window": None}
    groups = [
        {**kind, "group_id": i, "logical_block_size": 128, "kernel_block_sizes": [128], "page_size_bytes": 16384}
        for i, kind in enumerate([sliding, sliding, sliding, full])
    ]
    regions = [{"group_id": i, "num_blocks": 100, "mem_type": "DRAM", "name": f"l{i}"} for i in range(4)]
    return {"kv_cache_groups": groups, "nixl": {"block_size": 128, "regions": regions}, "num_blocks": 100}


def test_each_group_keeps_its_kind_window_block_and_regions() -> None:
    summaries = group_summaries(_gemma_record())
    assert [group_text(g) for g in summaries] == ["sliding64 128/128 x1"] * 3 + ["full 128/128 x1"]
    record = _gemma_record()
    del record["nixl"]["regions"]  # an older probe: regions unknown, not zero
    assert {g["nixl_regions"] for g in group_summaries(record)} == {None}
    assert group_text({"kind": "mla", "logical_block_size": 16, "kernel_block_size": 16}) == "mla 16/16"


def test_a_region_every_group_shares_counts_for_each_group() -> None:
    """Measured (tiny Gemma-3 P/D, block 256): one NIXL region with group id -1 holds all four groups."""
    record = _gemma_record()
    record["nixl"]["regions"] = [{"group_id": -1, "num_blocks": 16384, "mem_type": "DRAM", "name": "layers.0"}]
    texts = [group_text(g) for g in group_summaries(record)]
    assert texts == ["sliding64 128/128 x0+1 shared"] * 3 + ["full 128/128 x0+1 shared"]


def test_the_report_lists_every_group_of_a_hybrid_engine() -> None:
    config = load_config(REPO_ROOT / "configs/cpu-families.yaml", [])
    cell = next(c for c in plan(config).planned() if c.model == "gemma3" and c.topology == "pd-nixl")
    engines = {"prefill": summarize(_gemma_record()), "decode": summarize(_gemma_record())}
    startup = CheckResult(name="startup", verdict="pass", evidence={"layout": {"engines": engines}})
    grain = kv_grain(CellResult(cell=cell, verdict="pass", checks=[startup]))
    assert grain.startswith("P 128/128 nixl 128 [sliding64 128/128 x1, sliding64 128/128 x1, ")
    assert grain.endswith("full 128/128 x1]")
    assert grain.count("[") == 2  # both engines


def _gdn_record() -> dict[str, Any]:
    """The tiny Qwen3-Next P/D engine as measured: 3 GDN state groups (MambaSpec, GDN_ATTN) before the one
    full-attention group, the state views first, one NIXL region shared by all."""
    state = {"spec": "MambaSpec", "kind": "mamba", "backends": ["GDN_ATTN"]}
    full = {"spec": "FullAttentionSpec", "kind": "full", "backends": ["CPU_ATTN"]}
    groups = [
        {**kind, "group_id": i, "logical_block_size": 256, "kernel_block_sizes": [256], "declared": []}
        for i, kind in enumerate([state, state, state, full])
    ]
    views = [
        {"shape": [16384, 1, 1, 9728], "grain": "unknown", "bytes": 159383552, "kind": "mamba"},
        {"shape": [16384, 2, 256, 64], "grain": "same", "bytes": 1073741824, "kind": "full"},
    ]
    return {"kv_cache_groups": groups, "kernel_views": views, "num_blocks": 16384}


def test_the_gates_judge_the_attention_group_and_views_of_a_hybrid() -> None:
    record = _gdn_record()
    assert [g["group_id"] for g in attention_groups(record)] == [3]
    assert [v["shape"] for v in attention_views(record)] == [[16384, 2, 256, 64]]
    summary = summarize(record)
    assert summary["backends"] == ["CPU_ATTN"] and summary["kernel_view_shape"] == [16384, 2, 256, 64]
    untagged = _gdn_record()
    for view in untagged["kernel_views"]:
        del view["kind"]  # an older probe: every view is judged, as before
    assert len(attention_views(untagged)) == 2


def test_a_kernel_list_out_of_step_with_the_groups_fails_the_groups_gate() -> None:
    """The seeds' indexing hazard: vLLM skips a group when it builds kernel_block_sizes, so the list indexed
    by group id is shifted. In step (as measured on every family) the gate holds."""
    record = _gdn_record()
    record["runner_kernel_block_sizes"] = [256, 256, 256, 256]
    assert kernel_step_problems(record) == []
    record["runner_kernel_block_sizes"] = [256, 256, 256]
    (short,) = kernel_step_problems(record) or [""]
    assert "3 kernel block sizes" in short and "4 KV cache groups" in short
    record["runner_kernel_block_sizes"] = [256, 256, 128, 256]  # a state group split like attention
    assert any("group 2 (mamba)" in p for p in kernel_step_problems(record) or [])
    del record["runner_kernel_block_sizes"]
    assert kernel_step_problems(record) is None  # an older probe: not judged


def test_the_groups_gate_runs_in_the_startup_layout_judgement() -> None:
    config = load_config(REPO_ROOT / "configs/cpu-families.yaml", [])
    cell = next(c for c in plan(config).planned() if c.model == "qwen3-next" and c.topology == "aggregated")
    record = _gdn_record()
    record["runner_kernel_block_sizes"] = [256, 256, 256]
    gates = {g.name: g for g in judge_layouts(cell, {"aggregated": record}, config).gates}
    assert gates["layout-groups-aggregated"].passed is False
    record["runner_kernel_block_sizes"] = [256] * 4
    gates = {g.name: g for g in judge_layouts(cell, {"aggregated": record}, config).gates}
    assert gates["layout-groups-aggregated"].passed is True
