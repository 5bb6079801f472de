"""Layout gates from recorded layouts (the probe's JSON), including the seed's own numbers."""

from __future__ import annotations

import copy
from typing import Any

from canary.checks.startup.layout import interior_split_is_token_split, judge_layouts, judge_transfers, summarize
from canary.config.load import load_config
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.engine_site.layout_probe import grain_of, grain_reference


def _cell(config_path: str, predicate: Any) -> tuple[Any, Cell]:
    config = load_config(config_path)
    cells = [c for c in plan(config).cells if predicate(c)]
    assert cells, "no such cell in the plan"
    return config, cells[0]


def _record(
    *, logical: int, kernel: int, num_blocks: int, view_grain: str, nixl_size: int | None, nixl_blocks: int | None
) -> dict[str, Any]:
    ratio = logical // kernel
    blocks_in_view = num_blocks * ratio if view_grain == "kernel" else num_blocks
    tokens_in_view = kernel if view_grain == "kernel" else logical
    record: dict[str, Any] = {
        "schema_version": 1,
        "runner_class": "vllm.v1.worker.gpu_model_runner.GPUModelRunner",
        "hooks": {"x": "ok"},
        "kv_cache_groups": [
            {"group_id": 0, "backends": ["FLASHINFER"], "logical_block_size": logical, "kernel_block_sizes": [kernel]}
        ],
        "num_blocks": num_blocks,
        "kernel_views": [
            {
                "shape": [blocks_in_view, 2, tokens_in_view, 8, 128],
                "grain": grain_of([blocks_in_view, 2, tokens_in_view, 8, 128], num_blocks, logical, kernel),
                "layers": 28,
            }
        ],
    }
    if nixl_size is not None:
        record["nixl"] = {"block_size": nixl_size, "num_blocks": nixl_blocks, "physical_blocks_per_logical": ratio}
    return record


def test_the_grain_is_judged_against_the_attention_group_not_a_state_group() -> None:
    """The tiny Qwen3-Next with prefix caching off (measured 2026-12-05): its 3 GDN state groups have a block of the
    whole model length (2048) and come first; its attention group pages by 384. The attention view [10922, 2, 384, 64]
    is at the attention group's grain ('same'), not 'unknown' against the state group's 2048."""
    state = {"kind": "mamba", "logical_block_size": 2048, "kernel_block_sizes": [2048]}
    full = {"kind": "full", "logical_block_size": 384, "kernel_block_sizes": [384]}
    assert grain_reference([state, state, state, full]) == (384, 384)
    logical, kernel = grain_reference([state, state, state, full])
    assert grain_of([10922, 2, 384, 64], 10922, logical, kernel) == "same"
    assert grain_reference([state]) == (2048, 2048)  # a model of state groups only: theirs
    assert grain_reference([{"kind": "full", "logical_block_size": 128, "kernel_block_sizes": [32]}]) == (128, 32)
    assert grain_reference([]) == (0, 0)


def test_grain_of_tells_logical_from_kernel_views() -> None:
    # the seed: 1813 logical blocks of 128 tokens, FlashInfer pages by 64 -> 3626 x 64
    assert grain_of([3626, 2, 64, 8, 128], 1813, 128, 64) == "kernel"
    assert grain_of([1813, 2, 128, 8, 128], 1813, 128, 64) == "logical"
    assert grain_of([1813, 2, 128, 8, 128], 1813, 128, 128) == "same"
    assert grain_of([7, 7, 7], 1813, 128, 64) == "unknown"


def test_the_seed_registration_1813x128_fails_where_flashinfer_needs_3626x64() -> None:
    """The reverted NIXL-side fix: cache and registration at logical grain under a 64-token kernel."""
    config, cell = _cell(
        "configs/h200-mrv2-pd.yaml",
        lambda c: (
            c.backend == "FLASHINFER"
            and c.topology == "pd-nixl"
            and c.prefill_block_size == 128
            and c.decode_block_size == 128
            and c.status == "planned"
        ),
    )
    assert cell.kernel_block_prefill == 64
    bad = _record(logical=128, kernel=64, num_blocks=1813, view_grain="logical", nixl_size=128, nixl_blocks=1813)
    good = _record(logical=128, kernel=64, num_blocks=1813, view_grain="kernel", nixl_size=64, nixl_blocks=3626)
    judgement = judge_layouts(cell, {"prefill": good, "decode": bad}, config)
    failed = {g.name: g.detail for g in judgement.gates if not g.passed}
    assert set(failed) == {"layout-tensor-grain-decode", "layout-nixl-grain-decode"}
    assert "registered 1813 x 128 where the cache holds 3626 x 64" in failed["layout-nixl-grain-decode"]
    assert "registered 128-token blocks where the kernel pages by 64" in failed["layout-nixl-grain-decode"]
    assert "shape [1813, 2, 128, 8, 128]" in failed["layout-tensor-grain-decode"]
    passed = {g.name for g in judgement.gates if g.passed}
    assert {"layout-kernel-block-prefill", "layout-tensor-grain-prefill", "layout-nixl-grain-prefill"} <= passed
    # the fixed engine on both sides passes every gate
    healthy = judge_layouts(cell, {"prefill": good, "decode": copy.deepcopy(good)}, config)
    assert healthy.failures == [] and len(healthy.gates) == 6
    # at transfer time the two sides disagree on what a block id means (128 vs 64 tokens, no mapping)
    bad["nixl"]["remotes"] = [{"block_size": 64, "block_size_ratio": 1}]
    transfer = judge_transfers(good, bad, "sm90")
    assert [g.name for g in transfer.gates if not g.passed] == ["layout-pd-grain"]


def test_kernel_block_not_accepted_by_the_backend_fails() -> None:
    config, cell = _cell(
        "configs/h200-mrv2-pd.yaml",
        lambda c: c.backend == "FLASHINFER" and c.topology == "aggregated" and c.prefill_block_size == 128,
    )
    record = _record(logical=128, kernel=128, num_blocks=100, view_grain="logical", nixl_size=None, nixl_blocks=None)
    judgement = judge_layouts(cell, {"aggregated": record}, config)
    assert [g.name for g in judgement.gates if not g.passed] == ["layout-kernel-block-aggregated"]
    assert "not accepted (kernel block sizes [16, 32, 64])" in judgement.failures[0]


def test_pd_block_mismatch_needs_a_ratio_mapping_over_a_token_major_interior() -> None:
    """The p32-d64 cell the canary found corrupting: NIXL's ratio mapping is in force, but CPU_ATTN keeps
    [heads, tokens, dim] inside a block, so splitting a 64-token block's bytes in two splits heads."""
    prefill = _record(logical=32, kernel=32, num_blocks=65536, view_grain="logical", nixl_size=32, nixl_blocks=65536)
    decode = _record(logical=64, kernel=64, num_blocks=32768, view_grain="logical", nixl_size=64, nixl_blocks=32768)
    decode["kernel_views"] = [{"shape": [32768, 2, 64, 64], "stride": [8192, 4096, 64, 1], "grain": "same"}]
    startup_time = judge_transfers(prefill, decode, "cpu")  # no handshake recorded yet: unknown, no gate
    assert [g.name for g in startup_time.gates] == []
    assert "decode recorded no handshake" in startup_time.evidence["unknown"][0]
    decode["nixl"]["remotes"] = [{"block_size": 32, "block_size_ratio": 1}]
    unmapped = judge_transfers(prefill, decode, "cpu")
    assert [g.name for g in unmapped.gates if not g.passed] == ["layout-pd-grain"]
    decode["nixl"]["remotes"] = [{"block_size": 32, "block_size_ratio": 2}]
    head_major = judge_transfers(prefill, decode, "cpu")
    failed = [g for g in head_major.gates if not g.passed]
    assert [g.name for g in failed] == ["layout-pd-grain"] and "not a token split" in failed[0].detail
    decode["kernel_views"] = [{"shape": [32768, 64, 2, 64], "stride": [8192, 128, 64, 1], "grain": "same"}]
    assert judge_transfers(prefill, decode, "cpu").failures == []  # token-major: the mapping is sound


def test_interior_order_from_shape_and_strides() -> None:
    assert interior_split_is_token_split({"shape": [65536, 2, 32, 64], "stride": [4096, 2048, 64, 1]}, 32) is False
    assert interior_split_is_token_split({"shape": [65536, 32, 2, 64], "stride": [4096, 128, 64, 1]}, 32) is True
    assert interior_split_is_token_split({"shape": [65536, 1, 32, 64], "stride": [2048, 2048, 64, 1]}, 32) is True
    assert interior_split_is_token_split({"shape": [7, 7], "stride": [7, 1]}, 32) is None


def test_missing_records_are_unknown_and_probe_off_runs_no_gate() -> None:
    config, cell = _cell("configs/cpu-default.yaml", lambda c: c.block_label == "p32-d32")
    judgement = judge_layouts(cell, {"prefill": None, "decode": None}, config)
    assert judgement.gates == []
    assert judgement.evidence["unknown"] == ["prefill: no layout record", "decode: no layout record"]
    assert summarize(None) == {"recorded": False}
    config.checks.startup.layout_probe = False
    assert judge_layouts(cell, {"prefill": None}, config).evidence == {
        "probe": "off (checks.startup.layout_probe: false)"
    }


def test_cpu_kernel_split_image_plans_kernel_32_under_128() -> None:
    config, cell = _cell("configs/cpu-default.yaml", lambda c: c.image == "kernel32" and c.topology == "pd-nixl")
    assert (cell.prefill_block_size, cell.kernel_block_prefill, cell.kernel_block_decode) == (128, 32, 32)
    assert "kernel-split" in cell.risks
    record = _record(logical=128, kernel=32, num_blocks=4096, view_grain="kernel", nixl_size=32, nixl_blocks=16384)
    record["kv_cache_groups"][0]["backends"] = ["CPU_ATTN"]
    judgement = judge_layouts(cell, {"prefill": record, "decode": copy.deepcopy(record)}, config)
    assert judgement.failures == []
    # the same record judged for the baseline image (CPU_ATTN: multiples of 32) passes too: 32 divides 128
    # and is a multiple of 32; a kernel block of 48 would not
    record["kv_cache_groups"][0]["kernel_block_sizes"] = [48]
    bad = judge_layouts(cell, {"prefill": record, "decode": copy.deepcopy(record)}, config)
    assert "layout-kernel-block-prefill" in {g.name for g in bad.gates if not g.passed}


def test_registered_bytes_must_cover_the_cache_tensor() -> None:
    """Measured on the CPU kernel-split build: 65536 x 8192 B registered = the 512 MiB cache tensor."""
    config, cell = _cell("configs/cpu-default.yaml", lambda c: c.image == "kernel32" and c.topology == "pd-nixl")
    record = _record(logical=128, kernel=32, num_blocks=16384, view_grain="kernel", nixl_size=32, nixl_blocks=65536)
    record["kv_cache_groups"][0]["backends"] = ["CPU_ATTN"]
    record["kernel_views"][0]["bytes"] = 536870912
    record["nixl"]["block_len_per_layer"] = [8192, 8192]
    assert judge_layouts(cell, {"prefill": record, "decode": copy.deepcopy(record)}, config).failures == []
    record["nixl"]["block_len_per_layer"] = [2048, 2048]  # a quarter of each kernel block registered
    failures = judge_layouts(cell, {"prefill": record, "decode": copy.deepcopy(record)}, config).failures
    assert any("registered regions of [134217728] bytes" in f and "holds 536870912 bytes" in f for f in failures)


def test_reports_show_each_engines_grain() -> None:
    from canary.export.report.grid import kv_grain
    from canary.judge.results import CellResult, CheckResult

    config, cell = _cell("configs/cpu-default.yaml", lambda c: c.image == "kernel32" and c.topology == "pd-nixl")
    record = _record(logical=128, kernel=32, num_blocks=16384, view_grain="kernel", nixl_size=32, nixl_blocks=65536)
    judgement = judge_layouts(cell, {"prefill": record, "decode": copy.deepcopy(record)}, config)
    startup = CheckResult(name="startup", verdict="pass", evidence={"layout": judgement.evidence})
    result = CellResult(cell=cell, verdict="pass", checks=[startup])
    assert kv_grain(result) == "P 128/32 nixl 32 · D 128/32 nixl 32"
    assert kv_grain(CellResult(cell=cell, verdict="pass")) == "-"
