"""Helpers for tests that run checks against the shared engine deployments (imported as `checkhelpers`)."""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from canary.checks.base import CheckContext
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.judge.results import CellResult
from canary.targets.base import Deployment


def served_cell_config(deployment: Deployment, model_dir: Path, name: str, checks: dict[str, Any]) -> CanaryConfig:
    """A config whose one cell is the deployment's, serving the model at model_dir, with these checks."""
    cell = deployment.cell
    return validate_config(
        {
            "name": name,
            "platform": "cpu",
            "models": [{"name": cell.model, "source": str(model_dir)}],
            "images": {cell.image: {"ref": cell.image_ref}},
            "matrix": {
                "attention_backends": [cell.backend],
                "prefill_block_sizes": [cell.prefill_block_size],
                "decode_block_sizes": [cell.decode_block_size],
            },
            "checks": checks,
        },
        f"tests/integration ({name})",
    )


def check_context(
    deployment: Deployment, config: CanaryConfig, cell_dir: Path, earlier: dict[str, CellResult] | None = None
) -> CheckContext:
    """What a check gets for a deployment: the cell, the config, a fresh cell directory, earlier cells."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    return CheckContext(
        cell=deployment.cell, deployment=deployment, config=config, cell_dir=cell_dir, earlier=earlier or {}
    )


class StandInPdRouter(BaseHTTPRequestHandler):
    """Base of the STAND-IN P/D routers the tests put where vllm-router would be, to plant a routing bug.

    POST /v1/completions goes to `decode_request`, which may call `prefill` (as vllm-router does:
    max_tokens=1, not streamed, do_remote_decode) and returns the request decode gets, or a reply
    (status, body) to send instead. Everything else goes to decode as it came.
    """

    prefill_url: ClassVar[str] = ""
    decode_url: ClassVar[str] = ""

    def forward(self, url: str, body: bytes | None, method: str) -> tuple[int, bytes, str]:
        request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return response.status, response.read(), response.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), "application/json"

    def reply(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def prefill(self, request: dict[str, Any]) -> tuple[int, bytes]:
        """The prefill leg of vllm-router's P/D protocol; returns prefill's status and body."""
        prefill = copy.deepcopy(request)
        prefill.update({"max_tokens": 1, "stream": False, "kv_transfer_params": {"do_remote_decode": True}})
        prefill.pop("stream_options", None)
        status, payload, _ = self.forward(self.prefill_url + self.path, json.dumps(prefill).encode(), "POST")
        return status, payload

    def decode_request(self, request: dict[str, Any]) -> dict[str, Any] | tuple[int, bytes]:
        raise NotImplementedError

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/v1/completions"):
            routed = self.decode_request(json.loads(body))
            if isinstance(routed, tuple):
                self.reply(*routed)
                return
            body = json.dumps(routed).encode()
        self.reply(*self.forward(self.decode_url + self.path, body, "POST"))

    def do_GET(self) -> None:
        self.reply(*self.forward(self.decode_url + self.path, None, "GET"))

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def stand_in_router(pd_deployment: Deployment, router: type[StandInPdRouter]) -> Iterator[Deployment]:
    """pd_deployment's engines behind `router` (on a free loopback port) instead of vllm-router."""
    prefill, decode = pd_deployment.server("prefill"), pd_deployment.server("decode")
    assert prefill is not None and decode is not None
    handler = type(router.__name__, (router,), {"prefill_url": prefill.base_url, "decode_url": decode.base_url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield replace(pd_deployment, base_url=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
