"""The GPU configs' KV family and P/D-shape cells (issue 40): vLLM's own NIXL sweep models, include-only beside the
dense matrix, with upstream's xfail configs as expectations; `canary plan` shows them; include-only planning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from canary.config import CanaryConfig
from canary.config.load import load_config, validate_config
from canary.errors import ConfigError
from canary.judge.expectations import apply_expectation
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.cell import RISK_PD_TP_RATIO, Cell
from canary.plan.matrix import find, plan
from canary.plan.validate import validate_plan
from canary.targets.kubernetes.values import render_values

GPU_CONFIGS = {"h200-mrv2-pd.yaml": (562, 38), "one-box-8gpu.yaml": (28, 22)}
"""Planned cells of the dense cross product (560 before the families; +2 prefix-caching pairs) and of the family models
(+2 prefix-caching pairs on h200)."""
GEMMA_1P2D = "gemma3_4b.pd.flash_attn.p128-d128.tp1p2d.auto.v2.baseline"
UPSTREAM_XFAILS = {  # model -> the upstream xfail configs its P/D cells carry (PR #37069 configs/xfail_*.yaml)
    "gemma3-4b": "xfail_tp_gemma_sw_fa_",
    "gpt-oss-20b": "xfail_tp_gpt_sw_fa",
    "gpt-oss-20b-hma": "xfail_tp_gpt_sw_fa_hma",
    "nemotron3-nano": "xfail_tp_nemotron_ssm_hma",
    "qwen35-moe": "xfail_tp_qwen35_ssm",
}


def _load(name: str) -> tuple[CanaryConfig, list[Cell]]:
    config = load_config(CONFIGS_DIR / name)
    return config, list(plan(config).cells)


@pytest.mark.parametrize("name", sorted(GPU_CONFIGS))
def test_the_gpu_configs_plan_every_family_and_tp_shape_beside_an_unchanged_dense_matrix(name: str) -> None:
    config, cells = _load(name)
    dense_count, family_count = GPU_CONFIGS[name]
    include_only = {m.name for m in config.models if m.include_only}
    dense = [c for c in cells if c.model not in include_only]
    family = [c for c in cells if c.model in include_only]
    # The cross product's ids carry no model (they key the rotation state and history): as before the families.
    assert len([c for c in dense if c.status == "planned"]) == dense_count
    assert all(c.id.startswith(("agg.", "pd.")) for c in dense)
    assert len(family) == family_count and all(c.status == "planned" for c in family)
    assert all(c.id.startswith(c.model.replace("-", "_") + ".") for c in family)
    assert {c.family for c in family} == {"dense", "mla", "sliding-window", "mamba-hybrid", "gdn-hybrid"}
    shapes = {(c.prefill_tp, c.decode_tp) for c in family if c.topology == "pd-nixl"}
    assert {(1, 1), (1, 2), (2, 1), (2, 2)} <= shapes
    for cell in family:
        if cell.topology == "aggregated":  # the parity / accuracy control of the model's pairs: TP1
            assert (cell.prefill_tp, cell.decode_tp) == (1, 1)
        elif cell.prefill_tp != cell.decode_tp:
            assert RISK_PD_TP_RATIO in cell.risks and f"tp{cell.prefill_tp}p{cell.decode_tp}d" in cell.id
    assert {m.name for m in config.models if m.include_only} == {c.model for c in family}
    # Every pair has its aggregated control (same model, backend, block, dtype, image).
    controls = {(c.model, c.backend, c.prefill_block_size, c.kv_cache_dtype) for c in family if c.topology != "pd-nixl"}
    for cell in family:
        assert (cell.model, cell.backend, cell.prefill_block_size, cell.kv_cache_dtype) in controls, cell.id


@pytest.mark.parametrize("name", sorted(GPU_CONFIGS))
def test_each_upstream_xfail_is_an_expectation_a_fix_upstream_turns_unexpected_pass(name: str) -> None:
    _, cells = _load(name)
    pairs = [c for c in cells if c.model in UPSTREAM_XFAILS and c.topology == "pd-nixl"]
    assert pairs
    for cell in pairs:
        if cell.model == "gemma3-4b" and cell.prefill_tp == cell.decode_tp:
            assert cell.expect is None, cell.id  # upstream's tp_gemma_sw_fa.yaml passes: no expectation
            continue
        assert cell.expect is not None and cell.expect.expect == "check-fail", cell.id
        assert cell.expect.failing_checks is not None and "accuracy" in cell.expect.failing_checks
        assert UPSTREAM_XFAILS[cell.model] in cell.expect.reason and "vLLM PR #37069" in cell.expect.reason
        assert "eb52bfa5a96a" in cell.expect.reason or "94143ae62bb5" in cell.expect.reason
    # Upstream runs these green: nothing is expected of them (a failure is a finding).
    for cell in cells:
        if cell.model in {"deepseek-v2-lite", "phi4-mini", "gemma3-4b-hma", "qwen3-0-6b-tp"}:
            assert cell.expect is None, cell.id


def _checks(**verdicts: str) -> list[CheckResult]:
    evidence: dict[str, Any] = {"serving": True}
    return [CheckResult.model_validate({"name": n, "verdict": v, "evidence": evidence}) for n, v in verdicts.items()]


def test_a_family_cell_marked_xfail_upstream_carries_expect_with_its_reason() -> None:
    _, cells = _load("h200-mrv2-pd.yaml")
    cell = find(cells, GEMMA_1P2D)
    assert cell is not None and cell.family == "sliding-window" and (cell.prefill_tp, cell.decode_tp) == (1, 2)
    assert cell.expect is not None and cell.expect.expect == "check-fail" and cell.expect.failing_checks == ["accuracy"]
    assert "issue with gemma in heterogenous TP" in cell.expect.reason
    assert "configs/xfail_tp_gemma_sw_fa_1p2d.yaml, commit eb52bfa5a96a" in cell.expect.reason
    # As upstream judges it (GSM8K): still failing is the known bug; passing is a fix upstream.
    assert apply_expectation(cell, _checks(startup="pass", accuracy="fail"))[0] == "expected-fail"
    verdict, reason = apply_expectation(cell, _checks(startup="pass", accuracy="pass", parity="pass"))
    assert verdict == "unexpected-pass" and "xfail_tp_gemma_sw_fa_1p2d.yaml" in reason
    # Another check failing is never masked by it.
    assert apply_expectation(cell, _checks(startup="pass", accuracy="fail", kv_transfer="fail"))[0] == "fail"


def test_a_hybrid_xfail_names_the_block_rewrite_too_and_a_fix_still_reads_unexpected_pass() -> None:
    _, cells = _load("h200-mrv2-pd.yaml")
    cell = find(cells, "qwen35_moe.pd.flash_attn.p128-d128.tp2p2d.auto.v2.baseline")
    assert cell is not None and cell.family == "gdn-hybrid" and "block-rewrite" in cell.risks
    assert cell.expect is not None and cell.expect.failing_checks == ["startup", "accuracy"]
    assert "phantom token" in cell.expect.reason and "_align_hybrid_block_size" in cell.expect.reason
    assert apply_expectation(cell, _checks(startup="fail", accuracy="fail"))[0] == "expected-fail"
    assert apply_expectation(cell, _checks(startup="fail", accuracy="pass"))[0] == "unexpected-pass"


def _canary() -> str:
    """The installed console script (`.venv/bin/canary`), next to this interpreter."""
    script = Path(sys.executable).parent / "canary"
    assert script.exists(), script
    return str(script)


def test_canary_plan_shows_the_family_and_tp_cells_with_their_expectations() -> None:
    env = {**os.environ, "COLUMNS": "120"}  # one paragraph per cell: every value and the whole reason
    args = [_canary(), "plan", "configs/h200-mrv2-pd.yaml"]
    table = subprocess.run(args, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=120, check=False)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    row = lines.index(GEMMA_1P2D)
    end = next(i for i in range(row + 1, len(lines)) if not lines[i].startswith("  "))
    text = " ".join(" ".join(lines[row:end]).split())
    for shown in ("sliding-window", "tp1p2d", "3", "pd-tp-ratio", "planned (expect check-fail)"):
        assert shown in text, shown
    assert "expected: xfail upstream: 'issue with gemma in heterogenous TP'" in text
    assert "xfail_tp_gemma_sw_fa_1p2d.yaml" in text
    dense = lines.index("pd.flashinfer.p128-d128.auto.v2.baseline")
    assert "family" not in lines[dense + 1] + lines[dense + 2] and "TP" not in lines[dense + 1] + lines[dense + 2]
    listed = subprocess.run([*args, "--json"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False)
    payload = json.loads(listed.stdout)
    cells = {c["id"]: c for c in payload["cells"]}
    assert cells[GEMMA_1P2D]["family"] == "sliding-window"
    assert (cells[GEMMA_1P2D]["prefill_tp"], cells[GEMMA_1P2D]["decode_tp"]) == (1, 2)
    assert cells[GEMMA_1P2D]["expect"]["expect"] == "check-fail"
    assert payload["schedule"]["gpus_per_cell"][GEMMA_1P2D] == 3
    tp = {(c["prefill_tp"], c["decode_tp"]) for c in payload["cells"] if c["topology"] == "pd-nixl"}
    assert {(1, 1), (1, 2), (2, 1), (2, 2)} <= tp


def test_the_kubernetes_values_give_each_role_its_gpus_and_a_hybrid_its_env() -> None:
    config, cells = _load("h200-mrv2-pd.yaml")
    wanted = [c for c in cells if c.id.startswith(("nemotron3_nano.pd", "qwen3_0_6b_tp.pd"))]
    values = {v["id"]: v for v in render_values(config, wanted)["cells"]}
    one_two = values["qwen3_0_6b_tp.pd.flash_attn.p128-d128.tp1p2d.auto.v2.baseline"]
    assert (one_two["gpus"], one_two["decodeGpus"]) == (1, 2) and "env" not in one_two
    hybrid = values["nemotron3_nano.pd.flash_attn.p128-d128.tp2p2d.auto.v2.baseline"]
    assert hybrid["gpus"] == 2 and hybrid["tensorParallelSize"] == 2 and "decodeGpus" not in hybrid  # 2 and 2
    assert {"name": "VLLM_SSM_CONV_STATE_LAYOUT", "value": "DS"} in hybrid["env"]
    assert "--trust-remote-code" in hybrid["extraArgs"]


# ------------------------------------------------------------------------------------------ include-only models


def _config(*, include: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "fam",
        "platform": "sm90",
        "models": [
            {"name": "dense", "source": "x/dense"},
            {"name": "swa", "source": "x/swa", "family": "sliding-window", "include_only": True},
        ],
        "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
        "matrix": {
            "attention_backends": ["FLASH_ATTN"],
            "prefill_block_sizes": [16, 128],
            "runners": ["v2"],
            "include": include,
        },
    }


def test_an_include_only_model_runs_only_where_an_include_names_it() -> None:
    named = {"model": "swa", "backend": "FLASH_ATTN", "prefill_block_size": 128, "decode_block_size": 128}
    anyone = {"backend": "FLASH_ATTN", "prefill_block_size": 64, "decode_block_size": 128, "runner": "v2"}
    cells = plan(validate_config(_config(include=[named, anyone]), "fam")).cells
    ids = sorted(c.id for c in cells)
    assert ids == [
        "agg.flash_attn.b128.auto.v2.baseline",
        "agg.flash_attn.b16.auto.v2.baseline",
        "pd.flash_attn.p128-d128.auto.v2.baseline",
        "pd.flash_attn.p16-d16.auto.v2.baseline",
        "pd.flash_attn.p64-d128.auto.v2.baseline",  # an include without a model: the cross product's models
        "swa.pd.flash_attn.p128-d128.auto.v1.baseline",  # the include-only model's id names it
    ]


def test_an_include_only_model_no_include_names_is_a_config_error(tmp_path: Path) -> None:
    config = validate_config(_config(include=[]), "fam")
    with pytest.raises(ConfigError, match=r"swa is left out of the cross product and no matrix.include cell names it"):
        validate_plan(config, "fam.yaml")
    try:
        validate_plan(config, "fam.yaml")
    except ConfigError as error:
        assert error.key_path == "models.1.include_only"
