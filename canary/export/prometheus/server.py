"""`canary serve-metrics`: an HTTP exporter of the latest results (results/latest/results.json).

GET /metrics answers the newest run's metrics (the same exposition as the Pushgateway push and the
textfile). The file is re-read when `latest` points at another run or results.json changed; while
a new results.json is unreadable the last good run is served. Before the first run /metrics is
empty (a comment says why).
"""

from __future__ import annotations

import signal
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pydantic import ValidationError

from canary.export.prometheus.schema import exposition
from canary.judge.results import RunResult

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class LatestResults:
    """The exposition of results_root/latest/results.json, cached by (file, mtime)."""

    def __init__(self, results_root: Path) -> None:
        self.results_root = results_root
        self._lock = threading.Lock()
        self._key: tuple[str, int] | None = None
        self._body: bytes | None = None

    @property
    def path(self) -> Path:
        """The results.json served."""
        return self.results_root / "latest" / "results.json"

    def body(self) -> bytes:
        """The current exposition (re-read when the file changed)."""
        with self._lock:
            try:
                resolved = self.path.resolve(strict=True)
                key = (str(resolved), resolved.stat().st_mtime_ns)
            except OSError:
                return f"# no results yet: {self.path} does not exist\n".encode()
            if key != self._key or self._body is None:
                try:
                    run = RunResult.model_validate_json(resolved.read_text(encoding="utf-8"))
                except (OSError, ValueError, ValidationError) as exc:
                    if self._body is not None:
                        return self._body
                    raise RuntimeError(f"cannot read {resolved}: {exc}") from exc
                self._body, self._key = exposition(run), key
            return self._body


def _handler(latest: LatestResults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "vllm-canary-exporter"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    self._send(HTTPStatus.OK, latest.body(), CONTENT_TYPE)
                except RuntimeError as exc:
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, f"{exc}\n".encode(), "text/plain")
            elif path in ("/", "/healthz"):
                self._send(HTTPStatus.OK, b"vllm-canary exporter: see /metrics\n", "text/plain")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: Prometheus scrapes every few seconds."""

    return Handler


def make_server(results_root: Path, host: str = "127.0.0.1", port: int = 9464) -> ThreadingHTTPServer:
    """A bound, not yet serving exporter (port 0 picks a free port: read server.server_address)."""
    server = ThreadingHTTPServer((host, port), _handler(LatestResults(results_root)))
    server.daemon_threads = True
    return server


def serve(results_root: Path, host: str = "127.0.0.1", port: int = 9464) -> None:
    """Serve /metrics until Ctrl-C or SIGTERM."""
    server = make_server(results_root, host, port)
    bound_host, bound_port = server.server_address[:2]
    print(
        f"serving {results_root / 'latest' / 'results.json'} at http://{bound_host!s}:{bound_port}/metrics",
        file=sys.stderr,
    )
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (Kubernetes stopping the pod; PID 1 would otherwise ignore it) stops serving cleanly.
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    finally:
        server.server_close()
