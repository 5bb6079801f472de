"""The endpoint target against a STAND-IN OpenAI-compatible server (real HTTP, canned answers).

The real-engine counterpart is in tests/integration/test_startup.py (the endpoint target pointed at
the shared aggregated server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets import create_target
from canary.targets.endpoint.target import EndpointTarget

CACHE_INFO = (
    'vllm:cache_config_info{block_size="%d",cache_dtype="auto",effective_attention_block_size="%d",'
    'num_gpu_blocks="4096",kv_cache_size_tokens="131072"} 1.0\n'
)


class StandInServer(BaseHTTPRequestHandler):
    """STAND-IN for a vLLM server: /health, /v1/models (model "tiny"), /metrics with cache_config_info."""

    block_size: ClassVar[int] = 32
    healthy: ClassVar[bool] = True

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200 if self.healthy else 503, b"")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode())
        elif self.path == "/metrics":
            self._send(200, (CACHE_INFO % (self.block_size, self.block_size)).encode())
        else:
            self._send(404, b"")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture()
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StandInServer.block_size, StandInServer.healthy = 32, True
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _config(url: str, *overrides: str) -> CanaryConfig:
    return load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        [
            "target.kind=endpoint",
            f"target.endpoint={{url: '{url}'}}",
            "matrix.prefill_block_sizes=[32]",
            "matrix.topologies=[aggregated]",
            "matrix.include=[]",
            "checks.startup.timeout_s=3",
            *overrides,
        ],
    )


def _run(config: CanaryConfig, tmp_path: Path) -> tuple[bool, str | None, object]:
    target = create_target(config)
    assert isinstance(target, EndpointTarget)
    cell = plan(config).planned()[0]
    with target.deploy(cell, tmp_path) as deployment:
        result = startup_check(CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path))
    return deployment.started, deployment.served_model, result


def test_endpoint_passes_and_reads_block_size_from_metrics(stand_in: str, tmp_path: Path) -> None:
    started, model, result = _run(_config(stand_in), tmp_path)
    assert started and model == "tiny"
    assert result.verdict == "pass", result.summary
    assert result.metrics["block_size_aggregated"] == 32
    # No logs behind an endpoint: backend and runner are reported as not verifiable, not failed.
    assert result.evidence["unverified"] == {"aggregated": ["attention backend", "model runner", "kernel block size"]}


def test_endpoint_running_another_block_size_fails(stand_in: str, tmp_path: Path) -> None:
    StandInServer.block_size = 128
    _, _, result = _run(_config(stand_in), tmp_path)
    assert result.verdict == "fail"
    assert "aggregated block_size: asked 32, runs 128" in result.evidence["mismatches"]


def test_unhealthy_endpoint_is_a_classified_timeout(stand_in: str, tmp_path: Path) -> None:
    StandInServer.healthy = False
    started, _, result = _run(_config(stand_in), tmp_path)
    assert not started
    assert result.verdict == "fail"
    assert result.evidence["failure_class"] == "startup-timeout"
    assert "/health answered 503" in result.evidence["failure"]


def test_pd_endpoint_servers_and_describe(stand_in: str) -> None:
    config = _config(
        stand_in,
        f"target.endpoint={{url: '{stand_in}', topology: pd-nixl, prefill_metrics_url: 'http://p:1/metrics', "
        "decode_metrics_url: 'http://d:2/metrics'}",
    )
    target = EndpointTarget(config)
    servers = target.servers()
    assert set(servers) == {"router", "prefill", "decode"}
    assert servers["decode"].base_url == "http://d:2"
    assert target.describe(plan(config).planned()[0])["starts"] == "nothing"


def test_every_target_kind_is_built_the_same_way() -> None:
    """Issue 44: the registry has no special case; each class takes (config, *, source)."""
    import inspect

    from canary.config.targets import TARGET_KINDS
    from canary.targets import target_class

    for kind in TARGET_KINDS:
        params = inspect.signature(target_class(kind)).parameters
        assert "source" in params and params["source"].kind is inspect.Parameter.KEYWORD_ONLY, kind
