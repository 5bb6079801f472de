"""The lifecycle check (canary/checks/lifecycle): its gates fail when the restarted prefill does not come back,
when decode dies or refuses while prefill is down, or when the pair serves other tokens after it; the check
itself against a stand-in pair (HTTP on loopback) whose restart the test scripts; where it does not apply;
and the local target's restart of one role (canary.targets.restart) on real processes."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from canary.checks.base import CheckContext
from canary.checks.lifecycle.check import lifecycle_check
from canary.checks.lifecycle.steps import Observed, judge
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from canary.targets.engine_plan import ServerPlan
from canary.targets.restart import RESTART_MARKER, restarter
from canary.targets.supervisor import Launch, Started, Supervisor

GOOD = Observed(
    restart_error=None,
    restart_s=21.5,
    prefill_pids=(100, 200),
    decode_pids=(101, 101),
    decode_exit=None,
    outage_seen=True,
    outage_answer=None,
    before=[[1, 2], [3, 4], [5, 6]],
    after=[[1, 2], [3, 4], [5, 6]],
    nixl_bytes_after=4096.0,
)


def _failed(seen: Observed) -> list[str]:
    return [g.name for g in judge(seen) if not g.passed]


def test_a_clean_restart_passes_every_gate() -> None:
    assert _failed(GOOD) == []


def test_a_prefill_that_does_not_come_back_fails_and_so_does_the_pair() -> None:
    seen = Observed(
        **{
            **GOOD.__dict__,
            "restart_error": "restarted prefill exited with code 1 (process exited before it was ready)",
            "prefill_pids": (100, 200),
            "after": [None, None, None],
            "after_errors": ["POST http://x/v1/completions: HTTP 503"],
            "nixl_bytes_after": 0.0,
        }
    )
    assert _failed(seen) == ["prefill-restarted", "pair-serves-again", "parity-after-restart", "kv-after-restart"]


def test_a_decode_that_died_or_was_replaced_fails() -> None:
    assert _failed(Observed(**{**GOOD.__dict__, "decode_exit": -9})) == ["decode-survived"]
    assert _failed(Observed(**{**GOOD.__dict__, "decode_pids": (101, 333)})) == ["decode-survived"]


def test_decode_refusing_alone_and_other_tokens_after_fail() -> None:
    refused = Observed(**{**GOOD.__dict__, "outage_answer": "HTTP 500"})
    assert _failed(refused) == ["decode-served-during-restart"]
    assert _failed(Observed(**{**GOOD.__dict__, "outage_seen": False})) == ["decode-served-during-restart"]
    drifted = Observed(**{**GOOD.__dict__, "after": [[1, 2], [3, 9], [5, 6]]})
    assert _failed(drifted) == ["parity-after-restart"]
    assert _failed(Observed(**{**GOOD.__dict__, "nixl_bytes_after": 0.0})) == ["kv-after-restart"]


# --------------------------------------------------------------------------- the check on a stand-in pair


@dataclass
class Pair:
    """A stand-in P/D pair: one HTTP server plays router, prefill and decode (distinct paths by port)."""

    tokens: list[int] = field(default_factory=lambda: [7, 8, 9])
    prefill_up: bool = True
    nixl_bytes: float = 0.0
    decode_requests: int = 0


def _handler(pair: Pair, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _send(self, status: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if role == "prefill" and not pair.prefill_up:
                self._send(503, "{}")
            elif self.path == "/health":
                self._send(200, "{}")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": "tiny"}]}))
            elif self.path == "/metrics":
                self._send(200, f"vllm:nixl_bytes_transferred_sum {pair.nixl_bytes}\n", "text/plain")
            else:
                self._send(404, "{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if role == "router" and not pair.prefill_up:
                self._send(503, '{"error": "prefill unavailable"}')
                return
            if role == "decode":
                pair.decode_requests += 1
            if role == "router":
                pair.nixl_bytes += 1024.0
            self._send(200, json.dumps({"choices": [{"token_ids": pair.tokens}]}))

    return Handler


@pytest.fixture
def pair() -> Iterator[tuple[Pair, dict[str, str]]]:
    state = Pair()
    servers = {
        role: ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, role)) for role in ("router", "prefill", "decode")
    }
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = {role: f"http://127.0.0.1:{s.server_address[1]}" for role, s in servers.items()}
    yield state, urls
    for server in servers.values():
        server.shutdown()


def _config(**lifecycle: Any) -> CanaryConfig:
    overrides = [f"checks.lifecycle.{k}={json.dumps(v)}" for k, v in {"enabled": True, **lifecycle}.items()]
    return load_config(str(REPO_ROOT / "configs" / "cpu-default.yaml"), overrides)


def _cell(config: CanaryConfig, topology: str = "pd-nixl") -> Cell:
    return next(c for c in plan(config).planned() if c.topology == topology and c.image == "baseline")


def _deployment(cell: Cell, urls: dict[str, str], exit_status: Any = None) -> Deployment:
    servers = {
        role: ServerInfo(role, urls[role], metrics_url=f"{urls[role]}/metrics", pid=pid)
        for role, pid in (("router", 10), ("prefill", 11), ("decode", 12))
    }
    deployment = Deployment(cell, urls["router"], "tiny", servers, started=True)
    deployment.exit_status = exit_status or (lambda role: None)
    return deployment


def _scripted_restart(state: Pair, deployment: Deployment, comes_back: bool) -> None:
    def restart(role: str, timeout_s: float) -> str | None:
        state.prefill_up = False
        time.sleep(1.2)  # the check sees prefill down and asks decode alone
        if not comes_back:
            return f"restarted {role} exited with code 1 (process exited before it was ready)"
        deployment.servers[role].pid = 99
        state.prefill_up = True
        return None

    deployment.restart_role = restart


def test_the_check_passes_when_prefill_comes_back_and_decode_served_alone(
    tmp_path: Path, pair: tuple[Pair, dict[str, str]]
) -> None:
    state, urls = pair
    config = _config(prompts=2, max_tokens=3)
    cell = _cell(config)
    deployment = _deployment(cell, urls)
    _scripted_restart(state, deployment, comes_back=True)
    result = lifecycle_check(CheckContext(cell, deployment, config, tmp_path))
    assert result.verdict == "pass", result.summary
    assert state.decode_requests == 1 and result.evidence["prefill_pids"] == [11, 99]
    assert result.metrics["decode_survived"] == 1.0 and result.metrics["parity_after_restart"] == 1.0


def test_the_check_fails_when_the_restarted_prefill_does_not_come_back(
    tmp_path: Path, pair: tuple[Pair, dict[str, str]]
) -> None:
    state, urls = pair
    config = _config(prompts=2, max_tokens=3)
    cell = _cell(config)
    deployment = _deployment(cell, urls)
    _scripted_restart(state, deployment, comes_back=False)
    result = lifecycle_check(CheckContext(cell, deployment, config, tmp_path))
    assert result.verdict == "fail"
    failed = [g.name for g in result.gates if not g.passed]
    assert failed == ["prefill-restarted", "pair-serves-again", "parity-after-restart", "kv-after-restart"]
    assert "prefill did not come back: restarted prefill exited with code 1" in result.summary


def test_the_check_fails_when_decode_dies_during_the_restart(tmp_path: Path, pair: tuple[Pair, dict[str, str]]) -> None:
    state, urls = pair
    config = _config(prompts=1, max_tokens=3)
    cell = _cell(config)
    deployment = _deployment(cell, urls, exit_status=lambda role: -9 if role == "decode" else None)
    _scripted_restart(state, deployment, comes_back=True)
    result = lifecycle_check(CheckContext(cell, deployment, config, tmp_path))
    assert result.verdict == "fail" and result.metrics["decode_survived"] == 0.0
    assert [g.name for g in result.gates if not g.passed] == ["decode-survived"]


def test_where_it_does_not_apply_or_cannot_run(tmp_path: Path, pair: tuple[Pair, dict[str, str]]) -> None:
    _, urls = pair
    config = _config()
    aggregated = _cell(config, "aggregated")
    assert (
        lifecycle_check(CheckContext(aggregated, _deployment(aggregated, urls), config, tmp_path)).verdict == "skipped"
    )
    cell = _cell(config)
    no_restart = _deployment(cell, urls)  # a target that cannot restart one role
    assert lifecycle_check(CheckContext(cell, no_restart, config, tmp_path)).verdict == "unsupported"
    other = _config(cells=[{"decode_tp": 2}])
    result = lifecycle_check(CheckContext(cell, _deployment(cell, urls), other, tmp_path))
    assert result.verdict == "skipped" and "checks.lifecycle.cells" in result.summary


def test_its_cells_are_cell_matches_checked_at_load() -> None:
    from canary.errors import ConfigError

    with pytest.raises(ConfigError, match="decode_tpp"):
        _config(cells=[{"decode_tpp": 2}])


# --------------------------------------------------------------------------- the local target's restart


def _launch(tmp_path: Path, port: str, *argv: str) -> Launch:
    program = [sys.executable, str(REPO_ROOT / "tests" / "support" / "scripted_server.py")]
    command = [*program, "--port", port, "--model", "tiny", "--no-record", *argv]
    plan_ = ServerPlan("prefill", command, 2, {"PATH": "/usr/bin:/bin"}, port, None)
    return Launch(plan_, command, plan_.env)


def test_the_local_restart_replaces_the_process_and_the_liveness_follows_it(tmp_path: Path) -> None:
    from canary.core.ports import free_ports

    port = str(free_ports(1, "127.0.0.1")[0])
    config = _config()
    cell = _cell(config)
    launch = _launch(tmp_path, port)
    supervisor, deployment = Supervisor(config), Deployment(cell, "", "tiny")
    typed: Started = {}
    supervisor.bring_up(deployment, [launch], typed, tmp_path)
    try:
        assert deployment.started, deployment.failure
        supervisor.watch(deployment, typed)
        deployment.restart_role = restarter(deployment, [launch], typed)
        old = deployment.servers["prefill"].pid
        assert deployment.restart("prefill", 30.0) is None
        assert deployment.servers["prefill"].pid not in (None, old)
        assert deployment.exit_status is not None and deployment.exit_status("prefill") is None  # the new one runs
        assert deployment.deaths() == []
        assert RESTART_MARKER in (tmp_path / "prefill.log").read_text()
        assert deployment.restart("decode", 5.0) == "no decode engine in this deployment (roles: prefill)"
        # a server that does not come back (it exits at start): the restart says so, and the liveness sees it
        dies = Launch(launch.plan, [sys.executable, "-c", "raise SystemExit(3)"], launch.env)
        deployment.restart_role = restarter(deployment, [dies], typed)
        assert (deployment.restart("prefill", 10.0) or "").startswith(
            "restarted prefill exited with code 3 (process exited before it was ready"
        )
        assert [d.how for d in deployment.deaths()] == ["exited with status 3"]
    finally:
        supervisor.stop(deployment, typed)
