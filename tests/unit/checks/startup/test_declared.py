"""The kernel block judged against what the engine itself declares, on layout records the probe wrote.

records/*.json were written by the probe in real P/D pairs at block 128: fault09-* running seeded
fault 09 (`make selftest`: CPU_ATTN declares [32], the runner, the attention metadata and NIXL all
stay at the logical 128), kernel32-* the kernel-split build done right (configs/engine-patches/
cpu-attn-kernel-32: declares [32], vLLM splits into 32-token kernel blocks; tests/integration/
test_layout_probe.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from canary.checks.startup import declared
from canary.checks.startup.layout import has_declaration, judge_layouts, summarize
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.selftest.model import DEFAULT_CONFIG, fault_config, load_faults

RECORDS = Path(__file__).parent / "records"
STALE_CATALOG = (
    "catalog out of date for this image: configs/backends.yaml says CPU_ATTN MultipleOf(32), "
    "the engine declares [32] (prefill, decode)"
)


def _records(build: str = "fault09") -> dict[str, dict[str, Any]]:
    return {role: json.loads((RECORDS / f"{build}-{role}.json").read_text()) for role in ("prefill", "decode")}


def _fault09(*overrides: tuple[str, Any]) -> tuple[CanaryConfig, Cell]:
    fault = next(f for f in load_faults().faults if f.id.startswith("09-"))
    assert fault.kernel_block_sizes == {}, "fault 09 must not tell the canary what the build declares"
    config = fault_config(load_config(DEFAULT_CONFIG), fault)
    for path, value in overrides:
        image = next(iter(config.images))
        config.images[image] = config.images[image].model_copy(update={path: value})
    (cell,) = plan(config).cells
    return config, cell


def test_fault09_fails_the_kernel_gate_against_the_engines_declaration() -> None:
    config, cell = _fault09()
    assert cell.kernel_block_prefill == 128  # the plan, from the catalog, expects no split
    judgement = judge_layouts(cell, _records(), config)
    failed = {g.name: g.detail for g in judgement.gates if not g.passed}
    assert set(failed) == {"layout-kernel-block-prefill", "layout-kernel-block-decode"}
    assert failed["layout-kernel-block-decode"] == (
        "kernel block 128 in use under logical 128, not what the engine declares (CPU_ATTN declares [32]): "
        "for logical 128 that gives 32-token kernel blocks"
    )
    # everything else is consistent at 128: cache views, NIXL registration
    assert {"layout-tensor-grain-decode", "layout-nixl-grain-decode"} <= {g.name for g in judgement.gates if g.passed}
    # the catalog's belief is a cross-check: reported, not a gate
    assert judgement.finding_lines() == [STALE_CATALOG]
    assert judgement.evidence["findings"] == [STALE_CATALOG]
    assert judgement.summary_suffix == f"; {STALE_CATALOG}"  # no "layout verified": a gate failed
    assert judgement.evidence["declaration"] == dict.fromkeys(("prefill", "decode"), "CPU_ATTN declares [32]")
    assert summarize(_records()["decode"])["declared_kernel_block_sizes"] == {"CPU_ATTN": "[32]"}


def test_without_a_declaration_the_gates_fall_back_to_the_catalog_and_say_so() -> None:
    """The same engine as an older probe (schema 1) recorded it: the fault is invisible, as it was."""
    config, cell = _fault09()
    old = _records()
    for record in old.values():
        record["schema_version"] = 1
        for group in record["kv_cache_groups"]:
            del group["declared"]
        assert not has_declaration(record)
    judgement = judge_layouts(cell, old, config)
    assert judgement.failures == [] and len(judgement.gates) == 6
    assert judgement.findings == {}
    assert judgement.evidence["declaration"]["decode"] == (
        "not recorded by the engine (layout probe record before schema_version 2, or no attention group): "
        "judged against configs/backends.yaml"
    )
    assert "the engine recorded no declaration" in judgement.gates[0].detail


def test_a_config_that_agrees_with_the_engine_still_fails_the_runner() -> None:
    """The measured case: `images.<key>.kernel_block_sizes: {CPU_ATTN: [32]}` on the same build."""
    config, cell = _fault09(("kernel_block_sizes", {"CPU_ATTN": [32]}))
    assert cell.kernel_block_prefill == 32
    judgement = judge_layouts(cell, _records(), config)
    assert {g.name for g in judgement.gates if not g.passed} == {
        "layout-kernel-block-prefill",
        "layout-kernel-block-decode",
    }
    assert judgement.findings == {}  # the config says what the engine says
    assert judgement.evidence["cross_check"]["decode"][0]["source"].endswith(".kernel_block_sizes")


def test_the_correct_split_passes_and_only_the_stale_catalog_is_reported() -> None:
    config, cell = _fault09()
    split = _records("kernel32")
    judgement = judge_layouts(cell, split, config)
    assert judgement.failures == [], judgement.failures
    assert judgement.summary_suffix == f", layout verified (6 gates); {STALE_CATALOG}"
    assert judgement.gates[0].detail == (
        "kernel block [32] under logical 128, as the engine declares (CPU_ATTN declares [32])"
    )
    # the kernel32 image of cpu-default says [32] in its config: nothing to report
    config32, cell32 = _fault09(("kernel_block_sizes", {"CPU_ATTN": [32]}))
    assert judge_layouts(cell32, split, config32).findings == {}


def test_a_config_that_disagrees_with_a_stock_engine_is_reported_not_failed() -> None:
    """A config claiming [32] for an image whose CPU_ATTN declares MultipleOf(32) and runs 128."""
    config, cell = _fault09(("kernel_block_sizes", {"CPU_ATTN": [32]}))
    stock = _records()
    for record in stock.values():
        record["kv_cache_groups"][0]["declared"][0]["kernel_block_sizes"] = [{"multiple_of": 32}]
    judgement = judge_layouts(cell, stock, config)
    assert judgement.failures == []
    image = cell.image
    assert judgement.finding_lines() == [
        f"config out of date for this image: images.{image}.kernel_block_sizes says CPU_ATTN [32], "
        "the engine declares [MultipleOf(32)] (prefill, decode)"
    ]


def test_a_declaration_the_probe_could_not_read_is_not_guessed() -> None:
    config, cell = _fault09()
    records = _records()
    records["decode"]["kv_cache_groups"][0]["declared"][0]["kernel_block_sizes"] = [{"unknown": "Fancy(3)"}]
    judgement = judge_layouts(cell, records, config)
    assert judgement.evidence["declaration"]["decode"].startswith("recorded but not readable")
    assert "layout-kernel-block-prefill" in {g.name for g in judgement.gates if not g.passed}
    assert "layout-kernel-block-decode" in {g.name for g in judgement.gates if g.passed}  # catalog fallback


def test_dtypes_the_catalog_does_not_know_are_a_finding() -> None:
    config, cell = _fault09()
    records = _records()
    records["prefill"]["kv_cache_groups"][0]["declared"][0]["kv_cache_dtypes"] = ["auto", "fp8", "int4"]
    judgement = judge_layouts(cell, records, config)
    assert (
        "catalog out of date for this image: configs/backends.yaml says CPU_ATTN KV cache dtypes "
        "['auto', 'fp8', 'fp8_e4m3', 'fp8_e5m2'], the engine declares ['auto', 'fp8', 'int4'] (prefill)"
    ) in judgement.finding_lines()


def _decl(*sizes: dict[str, int], backend: str = "X") -> declared.Declaration:
    parsed = declared.parse({"backend": backend, "kernel_block_sizes": list(sizes)})
    assert parsed is not None
    return parsed


def test_kernel_for_follows_vllms_select_common_block_size() -> None:
    flashinfer = _decl({"int": 16}, {"int": 32}, {"int": 64})
    assert declared.kernel_for([flashinfer], 128) == 64  # vLLM issue 42846's setting
    assert declared.kernel_for([flashinfer], 32) == 32
    assert declared.kernel_for([_decl({"multiple_of": 16})], 128) == 128
    assert declared.kernel_for([_decl({"int": 32}), _decl({"multiple_of": 16})], 128) == 32
    assert declared.kernel_for([_decl({"int": 64})], 16) is None  # "No common block size for 16"
    assert not _decl({"int": 32}).accepts(128) and _decl({"multiple_of": 32}).accepts(128)
    assert declared.parse({"kernel_block_sizes": [{"multiple_of": 0}]}) is None
    assert declared.parse({"kernel_block_sizes": []}) is None
