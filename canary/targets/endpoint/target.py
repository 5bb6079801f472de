"""The endpoint target: run the checks against a server or P/D router that already runs.

Nothing is started or stopped. `target.endpoint` gives the URL (an OpenAI-compatible server or a
P/D router), the model (default: the first one /v1/models lists) and the /metrics URLs: one for
an aggregated server, or one each for the prefill and decode servers behind a router. deploy
waits (up to checks.startup.timeout_s) for the URL to be ready and yields a Deployment whose
engine servers are the metrics endpoints, so the startup check verifies what it can read there
(block sizes, KV cache dtype and size); the backend and runner need logs, which an endpoint does
not give, and are reported as not verifiable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from canary.config import CanaryConfig, EndpointTargetConfig
from canary.errors import CanaryError
from canary.plan.cell import Cell
from canary.targets import target_kind
from canary.targets.base import Deployment, ServerInfo
from canary.targets.readiness import wait_ready


def _base_of(metrics_url: str) -> str:
    """http://host:port/metrics -> http://host:port."""
    return metrics_url.rstrip("/").removesuffix("/metrics")


@target_kind("endpoint")
class EndpointTarget:
    """Points the checks at an existing deployment."""

    kind = "endpoint"

    def __init__(self, config: CanaryConfig, *, source: str = "config") -> None:
        if config.target.endpoint is None:
            raise CanaryError(f"{source}: target.kind is endpoint but target.endpoint is not set")
        self.config = config
        self.settings: EndpointTargetConfig = config.target.endpoint

    def servers(self) -> dict[str, ServerInfo]:
        """The servers as configured (router + prefill/decode metrics, or one aggregated server)."""
        s = self.settings
        url = s.url.rstrip("/")
        if s.topology == "aggregated":
            return {
                "aggregated": ServerInfo(role="aggregated", base_url=url, metrics_url=s.metrics_url or f"{url}/metrics")
            }
        servers = {"router": ServerInfo(role="router", base_url=url, metrics_url=None)}
        for role, metrics_url in (("prefill", s.prefill_metrics_url), ("decode", s.decode_metrics_url)):
            if metrics_url:
                servers[role] = ServerInfo(role=role, base_url=_base_of(metrics_url), metrics_url=metrics_url)
        return servers

    def describe(self, cell: Cell) -> dict[str, object]:
        """Nothing is started: what would be checked."""
        del cell
        return {
            "starts": "nothing",
            "servers": {
                role: {"base_url": s.base_url, "metrics_url": s.metrics_url} for role, s in self.servers().items()
            },
            "model": self.settings.model or "first model listed by /v1/models",
        }

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Wait for the endpoint to be ready; yield it. Exiting stops nothing."""
        del log_dir
        settings = self.config.checks.startup
        servers = self.servers()
        front = "aggregated" if "aggregated" in servers else "router"
        t0 = time.monotonic()
        result = wait_ready(
            servers[front].base_url,
            self.settings.model,
            t0 + settings.timeout_s,
            interval_s=settings.poll_interval_s,
        )
        model = self.settings.model or (result.models[0] if result.models else cell.model)
        deployment = Deployment(cell=cell, base_url=servers[front].base_url, served_model=model, servers=servers)
        if result.ready:
            deployment.started = True
            deployment.ready_seconds = round(time.monotonic() - t0, 3)
            servers[front].ready_seconds = deployment.ready_seconds
        else:
            deployment.failure = (
                f"{front} not ready after {settings.timeout_s} s (startup timeout; last probe: {result.detail})"
            )
        yield deployment
