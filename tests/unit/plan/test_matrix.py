"""The planner: cell ids, capability catalog judgements, risk flags, pairwise reduction, `canary plan`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from canary.config.catalog import load_catalog
from canary.config.load import load_config
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.cell import RISK_KERNEL_SPLIT, RISK_PD_BLOCK_MISMATCH, Cell
from canary.plan.kube_names import k8s_name_for
from canary.plan.matrix import find, plan
from canary.plan.pairwise import uncovered_pairs


def _h200_cells() -> list[Cell]:
    return list(plan(load_config(CONFIGS_DIR / "h200-mrv2-pd.yaml")).cells)


def test_kernel_block_sizes_from_catalog() -> None:
    catalog = load_catalog()
    assert catalog.backend("FLASHINFER").kernel_block_sizes.kernel_block_for(128) == 64
    assert catalog.backend("FLASHINFER").kernel_block_sizes.kernel_block_for(32) == 32
    assert catalog.backend("FLASH_ATTN").kernel_block_sizes.kernel_block_for(256) == 256
    assert catalog.backend("CPU_ATTN").kernel_block_sizes.kernel_block_for(16) is None
    assert catalog.backend("CUTLASS_MLA").kernel_block_sizes.kernel_block_for(64) is None


def test_flashinfer_128_on_h200_is_kernel_split_risk() -> None:
    cells = _h200_cells()
    cell = find(cells, "pd.flashinfer.p128-d128.auto.v2.baseline")
    assert cell is not None
    assert cell.status == "planned"
    assert cell.kernel_block_prefill == 64 and cell.kernel_block_decode == 64
    assert RISK_KERNEL_SPLIT in cell.risks and cell.high_risk
    # vLLM 0.33.0 carries the fix: the seed crash is expected of 0.21.0 only (configs/seed-42846.yaml).
    assert cell.expect is not None and cell.expect.expect == "pass"
    same_at_64 = find(cells, "pd.flashinfer.p64-d64.auto.v2.baseline")
    assert same_at_64 is not None and RISK_KERNEL_SPLIT not in same_at_64.risks


def test_pd_block_mismatch_flagged() -> None:
    cell = find(_h200_cells(), "pd.flash_attn.p32-d128.auto.v1.patched")
    assert cell is not None and RISK_PD_BLOCK_MISMATCH in cell.risks


def test_impossible_and_unsupported_cells_have_reasons() -> None:
    cells = _h200_cells()
    # FLASHINFER has no kernel block dividing 16? It has 16: planned. FLEX_ATTENTION has no fp8: skipped.
    flex_fp8 = find(cells, "agg.flex_attention.b32.fp8.v1.baseline")
    assert flex_fp8 is not None and flex_fp8.status == "skipped"
    assert flex_fp8.reason is not None and "fp8" in flex_fp8.reason
    cpu = load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        ["matrix.attention_backends=[CPU_ATTN, FLASH_ATTN]", "matrix.runners=[v1, v2]"],
    )
    cpu_cells = list(plan(cpu).cells)
    fa = find(cpu_cells, "agg.flash_attn.b32.auto.v1.baseline")
    assert fa is not None and fa.status == "unsupported" and fa.reason and "does not run on cpu" in fa.reason
    v2 = find(cpu_cells, "agg.cpu_attn.b32.auto.v2.baseline")
    assert v2 is not None and v2.status == "unsupported" and v2.reason and "Triton" in v2.reason


def test_expected_startup_failure_is_planned_not_skipped() -> None:
    cells = list(plan(load_config(CONFIGS_DIR / "cpu-default.yaml")).cells)
    b16 = find(cells, "agg.cpu_attn.b16.auto.v1.baseline")
    assert b16 is not None and b16.status == "planned"
    assert b16.expect is not None and b16.expect.expect == "startup-fail"
    without = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    b16_plain = find(plan(without).cells, "agg.cpu_attn.b16.auto.v1.baseline")
    assert b16_plain is not None and b16_plain.status == "skipped"


def test_cpu_default_cells_and_order() -> None:
    ids = [c.id for c in plan(load_config(CONFIGS_DIR / "cpu-default.yaml")).cells]
    assert ids == [
        "agg.cpu_attn.b16.auto.v1.baseline",
        "agg.cpu_attn.b32.auto.v1.baseline",
        "agg.cpu_attn.b128.auto.v1.baseline",
        "pd.cpu_attn.p16-d16.auto.v1.baseline",
        "pd.cpu_attn.p32-d32.auto.v1.baseline",
        "pd.cpu_attn.p32-d64.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.auto.v1.baseline",
        # the kernel-split build: logical 128 over 32-token kernel blocks
        "agg.cpu_attn.b128.auto.v1.kernel32",
        "pd.cpu_attn.p128-d128.auto.v1.kernel32",
        # a mixed pair: prefill on the kernel-split build, decode on the baseline
        "pd.cpu_attn.p128-d128.auto.v1.kernel32-baseline",
    ]


def test_ids_stable_and_unique() -> None:
    first = [c.id for c in _h200_cells()]
    assert first == [c.id for c in _h200_cells()]
    assert len(set(first)) == len(first)
    names = [c.k8s_name for c in _h200_cells()]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 40 and n == n.lower() for n in names)


def test_k8s_name_is_cut_with_hash() -> None:
    long_id = "qwen3_0_6b.pd.flashinfer_mla.p128-d256.fp8_e4m3.v2.patched_nightly"
    name = k8s_name_for(long_id)
    assert len(name) <= 40 and name != k8s_name_for(long_id + "x")


def test_a_cells_kubernetes_name_comes_from_the_kubernetes_side() -> None:
    cells = _h200_cells()
    assert all(c.k8s_name == k8s_name_for(c.id) for c in cells)
    stored = json.loads(cells[0].model_dump_json())
    assert Cell.model_validate(stored) == cells[0]  # a results.json keeps the name it ran under
    stored["k8s_name"] = "kept-as-stored"
    assert Cell.model_validate(stored).k8s_name == "kept-as-stored"
    del stored["k8s_name"]
    assert Cell.model_validate(stored).k8s_name == k8s_name_for(stored["id"])


def test_pairwise_covers_every_pair_and_keeps_high_risk() -> None:
    config = load_config(CONFIGS_DIR / "h200-mrv2-pd.yaml")
    full = plan(config)
    reduced = plan(load_config(CONFIGS_DIR / "h200-mrv2-pd.yaml", ["matrix.reduction=pairwise"]))
    assert len(reduced.planned()) < len(full.planned())
    assert uncovered_pairs(full.cells, reduced.cells) == set()
    high = {c.id for c in full.planned() if c.high_risk}
    assert high <= {c.id for c in reduced.planned()}


def test_pairwise_without_high_risk_saves_most() -> None:
    overrides = [
        "matrix.decode_block_sizes=null",
        "matrix.prefill_block_sizes=[16, 32, 64]",
        "matrix.reduction=pairwise",
    ]
    config = load_config(CONFIGS_DIR / "h200-mrv2-pd.yaml", overrides)
    reduced = plan(config)
    assert reduced.full_planned_count > 2 * len(reduced.planned())
    full = plan(load_config(CONFIGS_DIR / "h200-mrv2-pd.yaml", overrides[:-1]))
    assert uncovered_pairs(full.cells, reduced.cells) == set()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "canary", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )


def test_cli_plan_table_marks_risk_and_skips() -> None:
    result = subprocess.run(  # wide enough for one row per cell (narrower: tests/unit/export/report/test_plan_table.py)
        [sys.executable, "-m", "canary", "plan", "configs/h200-mrv2-pd.yaml"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "pd.flashinfer.p128-d128.auto.v2.baseline" in line)
    assert "kernel-split" in row and "64/64" in row
    assert "skipped" in result.stdout


def test_cli_plan_json_and_pairwise_count() -> None:
    result = _cli("plan", "configs/h200-mrv2-pd.yaml", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["planned_count"] == sum(1 for c in payload["cells"] if c["status"] == "planned")
    pairwise = _cli("plan", "configs/h200-mrv2-pd.yaml", "--pairwise")
    assert pairwise.returncode == 0
    assert "pairwise:" in pairwise.stdout and "saved" in pairwise.stdout


@pytest.mark.parametrize("only", ["pd.cpu_attn.p32", "agg.cpu_attn.b32.auto.v1.baseline"])
def test_cli_only_filters(only: str) -> None:
    result = _cli("plan", "configs/cpu-default.yaml", "--json", "--only", only)
    assert result.returncode == 0
    assert all(c["id"].startswith(only) for c in json.loads(result.stdout)["cells"])


def test_cli_only_unknown_cell_is_an_error() -> None:
    result = _cli("plan", "configs/cpu-default.yaml", "--only", "nope")
    assert result.returncode == 2 and "matches no cell" in result.stderr
