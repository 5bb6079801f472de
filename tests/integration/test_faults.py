"""Seeded faults end to end: the real engine with a patched copy of vllm, the real pipeline.

Faults 01 (NIXL registration layout mismatch: P/D startup fails), 02 (decode reads the KV
blocks in reversed order: silent corruption), 07 (decode reads the first block for every later
one: caught by parity itself) and 08 (a candidate image's sampler nudges every logit: drift against
the baseline image) go through `canary.selftest.run.run_selftest`, i.e.
configs/selftest.yaml with the fault's series as the image's `patches`, the local target, the
overlay, and the startup / parity / accuracy / kv_transfer checks. `make selftest` runs every
fault and the clean runs; this keeps those four in `make test`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary.judge.results import RunResult
from canary.selftest.model import DEFAULT_CONFIG
from canary.selftest.run import run_selftest

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.own_engines, pytest.mark.timeout(3600)]

# The load test proves nothing about these two faults and costs minutes: off here (make selftest runs it).
FAST = ["checks.throughput.enabled=false"]


def _run_result(run_dir: str) -> RunResult:
    return RunResult.model_validate(json.loads((Path(run_dir) / "results.json").read_text()))


def test_fault_01_nixl_registration_mismatch_fails_startup_and_is_classified(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    result = run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["01"], overrides=FAST)
    outcome = result.faults[0]
    assert outcome.detected, outcome.detail
    assert outcome.fired == ["startup"] and outcome.time_to_verdict_s is not None

    run = _run_result(outcome.run_dir)
    (cell,) = run.cells
    assert cell.cell.image == "fault-01-nixl-registration-layout" and cell.cell.topology == "pd-nixl"
    startup = cell.check("startup")
    assert startup is not None and startup.verdict == "fail"
    assert startup.evidence["failure_class"] == "nixl-registration-mismatch"
    assert [c.name for c in cell.checks] == ["startup"], "nothing runs after a failed start"
    # The engine really ran the patched copy, and its log carries the registration error.
    logs = "".join((Path(outcome.run_dir) / rel).read_text(errors="replace") for rel in cell.logs.values())
    assert "/overlays/" in logs
    assert "KV cache tensor has too few blocks" in logs or "cannot be partitioned into NIXL regions" in logs


def test_fault_02_reversed_kv_blocks_collapse_accuracy_while_kv_moves(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    result = run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["02"], overrides=FAST)
    outcome = result.faults[0]
    assert outcome.detected, outcome.detail
    assert "accuracy" in outcome.fired and "parity" in outcome.fired

    run = _run_result(outcome.run_dir)
    (cell,) = run.cells
    startup, parity, accuracy, kv = (cell.check(n) for n in ("startup", "parity", "accuracy", "kv_transfer"))
    assert startup is not None and startup.verdict == "pass", "the engines start and answer"
    assert parity is not None and parity.verdict == "fail" and parity.metrics["parity_match_rate"] < 1.0
    assert "blocks beyond the first" in parity.evidence["diagnosis"], parity.evidence["diagnosis"]
    assert accuracy is not None and accuracy.verdict == "fail"
    # The KV did move over NIXL (it is the wrong KV): every transport gate passes. Only the reuse probe can
    # fail here (its second send, served from the corrupt prefix decode cached, need not answer like the first).
    assert kv is not None and kv.verdict in ("pass", "fail"), kv.summary
    assert {g.name for g in kv.gates if not g.passed} <= {"reuse-same-output"}, kv.summary
    assert all(g.passed for g in kv.gates if g.name in ("nixl-bytes-grew", "no-failed-transfers")), kv.gates


def test_fault_07_blocks_beyond_the_first_are_caught_by_parity(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    result = run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["07"], overrides=FAST)
    outcome = result.faults[0]
    assert outcome.detected, outcome.detail
    assert "parity" in outcome.fired

    run = _run_result(outcome.run_dir)
    (cell,) = run.cells
    parity = cell.check("parity")
    assert parity is not None and parity.verdict == "fail", parity and parity.summary
    rows = parity.evidence["per_prompt"]
    block = cell.cell.decode_block_size
    # decode loads the KV of every prompt token but the last: prompts that load one block are
    # untouched by this fault (B+1 tokens included), every prompt that loads more diverges
    assert any(r["length"] - 1 <= block for r in rows) and any(r["length"] - 1 > block for r in rows)
    assert all(not r["beyond_noise"] for r in rows if r["length"] - 1 <= block)
    assert all(r["beyond_noise"] for r in rows if r["length"] - 1 > block)
    assert "blocks beyond the first" in parity.summary


def test_fault_08_a_candidate_images_numerics_change_is_reported_as_drift(tiny_model: Path, tmp_path: Path) -> None:
    """The sampler nudges every logit: the candidate's own parity has nothing to compare against but
    the baseline image (deployed in the same run), and the drift gates report it with its size."""
    del tiny_model
    result = run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["08"])
    outcome = result.faults[0]
    assert outcome.detected, outcome.detail
    assert outcome.fired == ["parity"]

    run = _run_result(outcome.run_dir)
    by_image = {cell.cell.image: cell for cell in run.cells}
    baseline = by_image.pop(run.baseline_image or "")
    (candidate,) = by_image.values()
    clean = baseline.check("parity")
    # the baseline's own reference has nothing to drift from: measured, not gated (issue 41), never "pass"
    assert clean is not None and clean.verdict == "ungated", clean and clean.summary
    assert not any(g.name.startswith("drift-") for g in clean.gates)  # the baseline is not compared with itself
    parity = candidate.check("parity")
    assert parity is not None and parity.verdict == "fail", parity and parity.summary
    failing = {g.name for g in parity.gates if not g.passed}
    assert "drift-kl-vs-baseline" in failing, parity.gates
    assert parity.metrics["parity_drift_kl_max"] > 1e-3  # the size: not float noise
    assert parity.metrics["parity_drift_prompts"] >= 3
    assert parity.evidence["drift"]["baseline_cell"] == baseline.cell.id
    assert parity.summary.startswith("drift vs the baseline image")


def test_fault_12_a_dead_decode_engine_on_a_known_bad_cell_is_named_and_fails_the_run(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Issue 41: the P/D cell is expected to fail parity and kv_transfer (a known bug); decode's engine
    dies on its first KV read. The checks end in error, the runner names the death, the cell fails."""
    del tiny_model
    result = run_selftest(DEFAULT_CONFIG, tmp_path, clean_runs=0, only=["12"], overrides=FAST)
    outcome = result.faults[0]
    assert outcome.detected, outcome.detail
    assert "engines" in outcome.fired

    run = _run_result(outcome.run_dir)
    pd = next(c for c in run.cells if c.cell.topology == "pd-nixl")
    assert pd.cell.expect is not None and pd.cell.expect.failing_checks == ["parity", "kv_transfer"]
    assert pd.verdict == "fail", (pd.verdict, pd.reason)
    assert run.outcome == "failed" and run.exit_code == 1
    engines = pd.check("engines")
    assert engines is not None and engines.verdict == "fail"
    (death,) = [d for d in engines.evidence["deaths"] if d["role"] == "decode"]
    assert death["how"].startswith(("exited with status", "killed by signal")), death
    assert any("selftest fault 12" in line or "EngineCore" in line for line in death["log_tail"]), death["log_tail"]
    assert "decode server died" in pd.reason
    # The aggregated control has no KV read: it serves and passes.
    agg = next(c for c in run.cells if c.cell.topology == "aggregated")
    assert agg.verdict in ("pass", "ungated") and agg.check("engines") is None
