"""image_facts: each engine's ref, digest and the vLLM version it reports on GET /version, read from a
real HTTP server on 127.0.0.1 (stdlib http.server), and the startup check's evidence carrying them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.checks.startup.image_facts import engine_version, image_facts
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from tests.support.sample import sample_config


def _handler(routes: dict[str, tuple[int, bytes]], delay_s: float = 0.0) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay_s)
            status, body = routes.get(self.path, (404, b"{}"))
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (the deadline test)
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def _server(routes: dict[str, tuple[int, bytes]], delay_s: float = 0.0) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(routes, delay_s))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _version(text: str) -> dict[str, tuple[int, bytes]]:
    return {"/version": (200, json.dumps({"version": text}).encode())}


def _pd_cell() -> Cell:
    return next(c for c in plan(sample_config()).planned() if c.topology == "pd-nixl")


def test_the_version_is_what_the_server_says() -> None:
    with _server(_version("0.32.0")) as url:
        assert engine_version(url) == "0.32.0"
        assert engine_version(url + "/") == "0.32.0"


def test_an_unreadable_version_is_none() -> None:
    with _server({"/version": (200, b"not json")}) as url:
        assert engine_version(url) is None
    with _server({}) as url:  # no /version: 404
        assert engine_version(url) is None
    with _server({"/version": (200, b'{"version": 3}')}) as url:
        assert engine_version(url) is None
    with _server(_version("0.32.0")) as url:
        pass
    assert engine_version(url) is None  # nobody listens any more
    assert engine_version("") is None


def test_a_slow_server_meets_the_deadline() -> None:
    with _server(_version("0.32.0"), delay_s=3.0) as url:
        started = time.monotonic()
        assert engine_version(url, timeout_s=0.5) is None
        assert time.monotonic() - started < 1.5


def test_facts_per_role_take_the_digest_and_ref_the_target_recorded() -> None:
    cell = _pd_cell()
    with _server(_version("0.32.0")) as prefill, _server(_version("0.33.0")) as decode:
        deployment = Deployment(
            cell=cell,
            base_url=prefill,
            served_model=cell.model,
            servers={
                "prefill": ServerInfo(role="prefill", base_url=prefill),
                "decode": ServerInfo(role="decode", base_url=decode),
                "router": ServerInfo(role="router", base_url="http://127.0.0.1:9"),
            },
            evidence={
                "image_digests": {"prefill": "sha256:" + "a" * 64, "decode": ""},
                "containers": {"prefill": {"name": "p", "image": "localhost/mine:1"}},
            },
        )
        facts = image_facts(deployment)
    assert facts == {
        "prefill": {"ref": "localhost/mine:1", "digest": "sha256:" + "a" * 64, "vllm_version": "0.32.0"},
        "decode": {"ref": cell.image_ref_for("decode"), "digest": None, "vllm_version": "0.33.0"},
    }


def test_the_startup_check_records_the_image_facts(tmp_path: Path) -> None:
    config = sample_config()
    config.checks.startup.verify_live_config = False
    cell = next(c for c in plan(config).planned() if c.topology == "aggregated")
    routes = {
        **_version("0.32.0"),
        "/health": (200, b""),
        "/v1/models": (200, json.dumps({"data": [{"id": cell.model}]}).encode()),
    }
    with _server(routes) as url:
        deployment = Deployment(
            cell=cell,
            base_url=url,
            served_model=cell.model,
            servers={"server": ServerInfo(role="server", base_url=url)},
            started=True,
        )
        result = startup_check(CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path))
    assert result.verdict == "ungated", result.summary  # verify_live_config off: serving, config not judged
    assert result.evidence["image_facts"] == {
        "server": {"ref": cell.image_ref, "digest": None, "vllm_version": "0.32.0"}
    }
