"""The throughput check's workload per cell (canary/checks/throughput/workload.py): block_residues takes the
cell's own block sizes (logical from the cell, kernel as the engine reported it at startup, else as the
config declares it), and evidence.workload records the kind and its parameters."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from canary.checks.base import CheckContext
from canary.checks.startup.check import role_metric
from canary.checks.throughput.check import build_spec
from canary.checks.throughput.workload import cell_workload, workload_evidence
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.load.workload import WorkloadSpec, build_plan
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.targets.base import Deployment


def _ctx(tmp_path: Path, cell: Cell, *overrides: str, startup: CheckResult | None = None) -> CheckContext:
    config: CanaryConfig = load_config(REPO_ROOT / "configs/cpu-default.yaml", list(overrides))
    deployment = Deployment(cell=cell, base_url="http://127.0.0.1:9", served_model="tiny", started=True)
    checked = {"startup": startup} if startup is not None else {}
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path, checked=checked)


def _pd_cell() -> Cell:
    return Cell.model_construct(
        id="pd.p48-d80", topology="pd-nixl", model="tiny", prefill_block_size=48, decode_block_size=80,
        kernel_block_prefill=16, kernel_block_decode=16,
    )  # fmt: skip


def _startup(role: str, kernel: int, how: str) -> CheckResult:
    """A startup result as the startup check writes it: the kernel block an engine reported and how."""
    return CheckResult(
        name="startup",
        verdict="pass",
        summary="ready",
        metrics={role_metric("kernel_block_size", role): float(kernel)},
        evidence={"live_config": {role: {"observed": {"sources": {"kernel_block_size": how}}}}},
    )


RESIDUES = "checks.throughput.workload.kind=block_residues"


def test_block_residues_use_the_cells_block_sizes_and_the_engines_kernel(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, _pd_cell(), RESIDUES, startup=_startup("decode", 40, "layout probe"))
    shape, extra = cell_workload(ctx)
    # logical 48 (prefill) and 80 (decode) from the cell; decode's kernel 40 as its engine reported it,
    # prefill's kernel 16 from the config (its engine reported none)
    assert shape.block_sizes == [16, 40, 48, 80]
    assert extra["block_sizes_from"] == "cell"
    assert {(s["size"], s["block"], s["role"], s["from"]) for s in extra["block_size_sources"]} == {
        (48, "logical", "prefill", "cell"),
        (80, "logical", "decode", "cell"),
        (16, "kernel", "prefill", "config"),
        (40, "kernel", "decode", "engine-reported (layout probe)"),
    }
    spec = build_spec(ctx.config.checks.throughput, ctx.deployment, workload=shape).model_copy(
        update={"token_pool": list(range(200, 300))}
    )
    sent = {r.prompt_tokens for r in build_plan(spec)}
    assert {47, 48, 49, 79, 80, 81, 39, 40, 41} <= sent  # the cell's, not the default 16 alone
    assert 32 in sent  # 2 x the config's kernel block 16 (block_multiples [1, 2])


def test_an_aggregated_cell_without_an_engine_report_uses_the_config_kernel(tmp_path: Path) -> None:
    cell = Cell.model_construct(
        id="agg.b64", topology="aggregated", model="tiny", prefill_block_size=64, decode_block_size=64,
        kernel_block_prefill=32, kernel_block_decode=32,
    )  # fmt: skip
    shape, extra = cell_workload(_ctx(tmp_path, cell, RESIDUES))
    assert shape.block_sizes == [32, 64]
    assert [(s["role"], s["from"]) for s in extra["block_size_sources"]] == [
        ("aggregated", "cell"),
        ("aggregated", "config"),
    ]


def test_configured_block_sizes_win_and_say_so(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, _pd_cell(), RESIDUES, "checks.throughput.workload.block_sizes=[24]")
    shape, extra = cell_workload(ctx)
    assert shape.block_sizes == [24] and extra == {
        "block_sizes_from": "config (checks.throughput.workload.block_sizes)"
    }


def test_a_load_spec_needs_its_block_sizes() -> None:
    with pytest.raises(ValidationError, match="block_residues needs block_sizes"):
        WorkloadSpec(base_url="http://127.0.0.1:1", model="m", workload={"kind": "block_residues"})  # type: ignore[arg-type]


def test_the_evidence_names_the_kind_and_its_parameters(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 4, "output_length": 2}) + "\n", encoding="utf-8")
    cases = {
        "shared_prefix": ({"prefix_groups": 3, "prefix_tokens": 40}, {"prefix_groups": 3, "prefix_tokens": 40}),
        "multi_turn": ({"turns": 4}, {"turns": 4, "think_time_s": 0.0}),
        "trace": (
            {"trace_path": str(trace), "trace_time_scale": 0.5},
            {"trace_path": str(trace), "trace_sha256": hashlib.sha256(trace.read_bytes()).hexdigest()},
        ),
        "block_residues": ({"block_multiples": [2]}, {"block_sizes": [16, 40, 48, 80], "prompt_lengths": None}),
    }
    for kind, (fields, want) in cases.items():
        overrides = [f"checks.throughput.workload.kind={kind}", "checks.throughput.seed=7"]
        overrides += [f"checks.throughput.workload.{k}={json.dumps(v)}" for k, v in fields.items()]
        ctx = _ctx(tmp_path, _pd_cell(), *overrides, startup=_startup("decode", 40, "layout probe"))
        shape, extra = cell_workload(ctx)
        found = workload_evidence(ctx.config.checks.throughput, shape, [7, 8], extra)
        assert found["kind"] == kind and found["seeds"] == [7, 8]
        for key, value in want.items():
            if value is not None:
                assert found[key] == value, (kind, key, found)
        if kind == "block_residues":
            assert found["prompt_lengths"] == [31, 32, 33, 79, 80, 81, 95, 96, 97, 159, 160, 161]
            assert found["block_sizes_from"] == "cell" and len(found["block_size_sources"]) == 4
