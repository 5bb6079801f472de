"""Helpers of the Prometheus tests: processes, queries with deadlines, dashboard expressions.

(A uniquely named module: tests import it by name; conftest.py holds only the fixtures.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.config import CanaryConfig
from canary.export.prometheus.dashboards import LIMIT_DEFAULT, LIMIT_VAR
from canary.paths import REPO_ROOT
from tests.support.sample import sample_config

RULES = REPO_ROOT / "configs" / "alerts" / "canary-rules.yaml"
SCRAPE_INTERVAL_S = 1
START_DEADLINE_S = 60.0


def binary(env: str, default: str) -> str:
    """A Prometheus binary: $ENV (set by mk/prometheus.mk), else PATH, else the Debian path."""
    path = os.environ.get(env) or shutil.which(Path(default).name) or default
    if not Path(path).exists():
        pytest.fail(f"{path} not installed: run `make prometheus-tools` (Debian prometheus packages)")
    return path


def http_get(url: str, timeout_s: float = 5.0) -> bytes:
    """GET url, return the body."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return bytes(response.read())


def wait_until(what: str, probe: Callable[[], bool], deadline_s: float, interval_s: float = 0.2) -> float:
    """Poll probe until it is true; returns the seconds it took; fails the test at the deadline."""
    start = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > deadline_s:
            pytest.fail(f"{what}: not true after {deadline_s:.0f} s")
        time.sleep(interval_s)


@dataclass
class Proc:
    """A process we started (own process group), with its log."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


@dataclass
class PromStack:
    """The running stack and helpers to use it."""

    prometheus_url: str
    pushgateway_url: str
    pushgateway_port: int
    exporter_results: Path
    exporter_url: str
    workdir: Path
    pushgateway: Proc
    prometheus: Proc
    timings: dict[str, float] = field(default_factory=dict)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (fails on a PromQL error)."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            payload = json.loads(http_get(url))
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"query failed: {expr}\n{exc.read().decode(errors='replace')}") from None
        assert payload["status"] == "success", payload
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def wait_for(self, expr: str, predicate: Callable[[list[dict[str, Any]]], bool], deadline_s: float = 30.0) -> float:
        """Wait until the query's result satisfies predicate; seconds waited."""
        return wait_until(f"query {expr}", lambda: predicate(self.query(expr)), deadline_s)

    def restart_pushgateway(self) -> None:
        """Start the Pushgateway again on the same port (after a test stopped it)."""
        self.pushgateway.start()
        wait_until("pushgateway up", lambda: http_get(f"{self.pushgateway_url}/-/ready") is not None, START_DEADLINE_S)

    def stop_pushgateway(self) -> None:
        """Stop the Pushgateway (the port then refuses connections)."""
        self.pushgateway.stop()


# --------------------------------------------------------------------------- dashboards and samples

DASHBOARDS_DIR = REPO_ROOT / "configs" / "dashboards"
IDENTITY_LABELS = ("job", "scope", "instance")


@dataclass(frozen=True)
class PanelQuery:
    """One query of a committed dashboard panel."""

    dashboard: str
    panel: str
    ref: str
    expr: str


def dashboard_queries() -> list[PanelQuery]:
    """Every target expression of every committed dashboard (rows included)."""
    out = []
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        board = json.loads(path.read_text())
        panels = list(board["panels"])
        for panel in list(panels):
            panels += panel.get("panels", [])
        for panel in panels:
            for target in panel.get("targets", []):
                out.append(PanelQuery(path.stem, panel["title"], target["refId"], target["expr"]))
    return out


def dashboard_variables() -> list[tuple[str, str, str]]:
    """(dashboard, variable, query) of every query variable."""
    out = []
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        board = json.loads(path.read_text())
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                out.append((path.stem, variable["name"], variable["query"]))
    return out


LIMIT = int(LIMIT_DEFAULT)
"""The top-N panels' $limit as the dashboards' default."""


def interpolate(expr: str, scope: str, job: str = ".*", limit: int = LIMIT) -> str:
    """What Grafana sends with the scope (and job, top N) chosen and every other variable at All."""
    values = {"$scope": scope, "$job": job, f"${LIMIT_VAR}": str(limit), "$percentile": "p50|p90|p99"}
    for var in ("$image", "$topology", "$model", "$backend"):
        values[var] = ".*"
    for var, value in values.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"uninterpolated variable in {expr}"
    return expr


_SELECTOR = re.compile(r"(canary_[a-z0-9_]+)\{([^}]*)\}")
_MATCHER = re.compile(r'([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def primary_selector(expr: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The first canary metric of an expression and its label matchers."""
    found = _SELECTOR.search(expr)
    assert found, f"no canary selector in {expr}"
    return found.group(1), _MATCHER.findall(found.group(2))


def matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    """PromQL matcher semantics (regexes fully anchored; a missing label is the empty string)."""
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have):
            return False
        if op == "!~" and re.fullmatch(value, have):
            return False
    return True


def without_identity(metric: dict[str, str]) -> dict[str, str]:
    """A result's labels without __name__ and the grouping/target labels."""
    return {k: v for k, v in metric.items() if k != "__name__" and k not in IDENTITY_LABELS}


def yaml_rules() -> dict[str, str]:
    """Alert name -> expression, read straight from the rules file (not through canary's loader)."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


# --------------------------------------------------------------------------- configs

JOB = "vllm-canary"


def config_for(scope: str, url: str, results_dir: Path) -> CanaryConfig:
    """The sample config exporting to the test's Pushgateway under a scope of its own."""
    config = sample_config()
    export = config.export.model_copy(
        update={
            "results_dir": str(results_dir),
            "pushgateway": config.export.pushgateway.model_copy(
                update={"url": url, "job": JOB, "scope": scope, "retries": 1, "timeout_s": 5.0}
            ),
        }
    )
    return config.model_copy(update={"export": export})
