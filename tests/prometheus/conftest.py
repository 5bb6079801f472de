"""A real Prometheus, Pushgateway and canary exporter, started ONCE per test session on free
loopback ports (Debian packages installed by `make prometheus-tools`).

Prometheus scrapes the Pushgateway (honor_labels, as in production) and the canary's own HTTP
exporter every second, and loads configs/alerts/canary-rules.yaml, so the tests can push a run,
wait for the scrape and query every dashboard panel and alert expression.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from promhelpers import (
    RULES,
    SCRAPE_INTERVAL_S,
    START_DEADLINE_S,
    Proc,
    PromStack,
    binary,
    http_get,
    wait_until,
)

from canary.core.ports import free_port
from canary.export.prometheus.server import make_server


def _prometheus_config(pushgateway_port: int, exporter_port: int) -> str:
    return f"""
global:
  scrape_interval: {SCRAPE_INTERVAL_S}s
  evaluation_interval: {SCRAPE_INTERVAL_S}s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{pushgateway_port}"]
  - job_name: canary-exporter
    static_configs:
      - targets: ["127.0.0.1:{exporter_port}"]
"""


@pytest.fixture(scope="session")
def prom_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromStack]:
    """Pushgateway + Prometheus + the canary exporter, once per session; everything stopped at the end."""
    prometheus_bin = binary("PROMETHEUS_BIN", "/usr/bin/prometheus")
    pushgateway_bin = binary("PUSHGATEWAY_BIN", "/usr/bin/prometheus-pushgateway")
    workdir = tmp_path_factory.mktemp("prom")
    exporter_results = workdir / "exporter-results"
    exporter_results.mkdir()
    exporter: ThreadingHTTPServer = make_server(exporter_results, "127.0.0.1", 0)
    exporter_port = int(exporter.server_address[1])
    thread = threading.Thread(target=exporter.serve_forever, name="canary-exporter", daemon=True)
    thread.start()

    pg_port, prom_port = free_port(), free_port()
    (workdir / "prometheus.yml").write_text(_prometheus_config(pg_port, exporter_port))
    pushgateway = Proc(
        "pushgateway",
        [pushgateway_bin, f"--web.listen-address=127.0.0.1:{pg_port}", "--log.level=warn"],
        workdir / "pushgateway.log",
    )
    prometheus = Proc(
        "prometheus",
        [
            prometheus_bin,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        workdir / "prometheus.log",
    )
    stack = PromStack(
        prometheus_url=f"http://127.0.0.1:{prom_port}",
        pushgateway_url=f"http://127.0.0.1:{pg_port}",
        pushgateway_port=pg_port,
        exporter_results=exporter_results,
        exporter_url=f"http://127.0.0.1:{exporter_port}",
        workdir=workdir,
        pushgateway=pushgateway,
        prometheus=prometheus,
    )
    started = time.monotonic()
    try:
        pushgateway.start()
        prometheus.start()
        stack.timings["pushgateway_ready_s"] = wait_until(
            "pushgateway ready", lambda: bool(http_get(f"{stack.pushgateway_url}/-/ready")), START_DEADLINE_S
        )
        stack.timings["prometheus_ready_s"] = wait_until(
            "prometheus ready", lambda: bool(http_get(f"{stack.prometheus_url}/-/ready")), START_DEADLINE_S
        )
        # The first scrape of the gateway: `up` exists once Prometheus scraped it.
        stack.timings["first_scrape_s"] = (
            stack.wait_for('up{job="pushgateway"} == 1', lambda r: len(r) == 1, START_DEADLINE_S)
            + stack.timings["prometheus_ready_s"]
        )
        stack.timings["stack_start_s"] = time.monotonic() - started
        yield stack
    except BaseException:
        print(f"--- pushgateway log\n{pushgateway.log_tail()}\n--- prometheus log\n{prometheus.log_tail()}")
        raise
    finally:
        prometheus.stop()
        pushgateway.stop()
        exporter.shutdown()
        exporter.server_close()
        print(f"\nprometheus stack timings: {json.dumps({k: round(v, 2) for k, v in stack.timings.items()})}")
