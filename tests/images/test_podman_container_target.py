"""The container target against real podman and the CPU engine image (no stand-ins).

`make test` builds the images first (`make images-cpu`); a missing image fails these tests with
the command to run, it never skips them. Each test checks that nothing it started is left in
`podman ps -a`: after a cell, after SIGTERM while a P/D pair starts, and after a refused run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from canary.config.load import load_config
from canary.images.table import cpu_engine_ref, router_ref
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.matrix import plan
from canary.targets import processes
from canary.targets.container.target import ContainerTarget
from canary.targets.container_cli import CELL_LABEL, MANAGED_LABEL, OWNER_LABEL, find_cli, owner_id
from canary.targets.readiness import probe

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CLI = find_cli(None)
TIMEOUT_S = 900


def _containers(label: str) -> list[str]:
    return [r["name"] for r in CLI.labelled(label)]


@pytest.fixture(scope="module", autouse=True)
def images_present() -> None:
    missing = [ref for ref in (cpu_engine_ref(), router_ref()) if CLI.image_inspect(ref) is None]
    assert not missing, f"images not built: {missing}: run `make images-cpu` (make test does)"


def _config(*overrides: str) -> object:
    return load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        ["target.kind=container", f"checks.startup.timeout_s={TIMEOUT_S}", *overrides],
    )


def test_an_aggregated_cell_serves_from_its_image_and_leaves_nothing(tmp_path: Path) -> None:
    config = _config()
    cell = next(c for c in plan(config).planned() if c.id == "agg.cpu_attn.b32.auto.v1.baseline")  # type: ignore[arg-type]
    target = ContainerTarget(config)  # type: ignore[arg-type]
    target.preflight([cell])
    with target.deploy(cell, tmp_path / "logs") as deployment:
        assert deployment.started, deployment.failure
        running = _containers(f"{OWNER_LABEL}={owner_id()}")
        assert len(running) == 1
        body = json.dumps({"model": cell.model, "prompt": "Question: 1 + 1 = ?\nAnswer:", "max_tokens": 8}).encode()
        request = urllib.request.Request(
            f"{deployment.base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            text = json.loads(response.read())["choices"][0]["text"]
        assert text, "the engine in the image answered with no text"
        server = deployment.servers["aggregated"]
        log = server.log_text()
        assert "Application startup complete" in log  # the log is captured from the container's start
        layout = server.layout()
        assert layout is not None and layout.get("kv_cache_groups"), "the layout probe ran inside the image"
        digests = deployment.evidence["image_digests"]
        assert isinstance(digests, dict) and digests["aggregated"], "the image's digest is recorded"
    assert _containers(f"{OWNER_LABEL}={owner_id()}") == []


def test_sigterm_while_a_pair_starts_leaves_no_container(tmp_path: Path) -> None:
    cell_id = "pd.cpu_attn.p32-d32.auto.v1.baseline"
    config = _config()
    cell = next(c for c in plan(config).planned() if c.id == cell_id)  # type: ignore[arg-type]
    label = f"{CELL_LABEL}={cell.k8s_name}"
    assert _containers(label) == []
    argv = [sys.executable, "-m", "canary", "run", str(CONFIGS_DIR / "cpu-default.yaml"), "--only", cell_id]
    argv += ["--set", "target.kind=container", "--results-dir", str(tmp_path / "results")]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        try:
            deadline = time.monotonic() + 300
            while len(_containers(label)) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(1)
            assert len(_containers(label)) >= 2, "prefill and decode containers never appeared"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0, out.decode(errors="replace")[-2000:]
    deadline = time.monotonic() + 30
    while _containers(label) and time.monotonic() < deadline:
        time.sleep(1)
    assert _containers(label) == [], "containers outlived a SIGTERMed controller"


def test_an_image_that_is_not_there_is_refused_before_anything_starts(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "canary", "run", str(CONFIGS_DIR / "cpu-default.yaml")]
    argv += ["--set", "target.kind=container", "--set", "target.container.pull=never"]
    argv += ["--set", "target.container.images.baseline=localhost/no-such-image:1"]
    argv += ["--results-dir", str(tmp_path / "results")]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "localhost/no-such-image:1" in done.stderr
    assert not list((tmp_path / "results").glob("*/results.json"))
    assert _containers(MANAGED_LABEL + "=true") == []


def _cpu_ticks(pids: set[int]) -> int:
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks


def _cpu_cgroup(pid: int) -> str:
    """The process's cgroup in the cpu hierarchy (v1), else its unified one (v2)."""
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    v1 = [path for _, controllers, path in lines if "cpu" in controllers.split(",")]
    return v1[0] if v1 else next(path for _, controllers, path in lines if controllers == "")


def _complete(deployment: Any, prompt: str) -> str:
    body = json.dumps({"model": deployment.served_model, "prompt": prompt, "max_tokens": 8, "temperature": 0})
    request = urllib.request.Request(
        f"{deployment.base_url}/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.loads(response.read())["choices"][0]["text"])


def test_a_pd_pair_in_containers_is_placed_freezes_serves_after_its_thaw_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """Placed like a local pair: every container under the weighted parent cgroup (the servers rank
    below the load client) and the router on the helper cores. Then what the runner does with a
    baseline pair kept for a paired check (canary.run.held), with `podman pause`: frozen, no process
    of its containers takes CPU and the router does not answer; thawed, the pair answers; left frozen
    at the deployment's end, it still stops on SIGTERM (its containers are continued first), not by
    the SIGKILL of `rm -f`, and nothing is left."""
    config = _config()
    cell = next(c for c in plan(config).planned() if c.id == "pd.cpu_attn.p32-d32.auto.v1.baseline")  # type: ignore[arg-type]
    target = ContainerTarget(config)  # type: ignore[arg-type]
    target.preflight([cell])
    with target.deploy(cell, tmp_path / "logs") as deployment:
        assert deployment.started, deployment.failure
        before_freeze = _complete(deployment, "Question: 2 + 2 = ?\nAnswer:")
        leaders = {s.pid for s in deployment.servers.values() if s.pid is not None}
        assert len(leaders) == 3, deployment.servers  # prefill, decode, router: each its container's first process
        weight = deployment.evidence["cpu_weight"]  # below the client, as a local server's session is ranked
        assert isinstance(weight, dict) and weight["cgroup_parent"] == "/vllm-canary", weight
        assert all(_cpu_cgroup(leader).startswith("/vllm-canary/") for leader in leaders)
        helpers = target.helper_cpus(cell)  # on CPU P/D: prefill's cores (core 0 of 2)
        router_pid = deployment.servers["router"].pid
        assert helpers and deployment.helper_cpus == helpers, deployment.evidence.get("helper_cpus")
        assert router_pid is not None and os.sched_getaffinity(router_pid) == set(helpers), "router not moved"
        pids = leaders | {pid for leader in leaders for pid in processes.descendants(leader)}
        assert target.freeze(deployment)
        names = [c["name"] for c in deployment.evidence["containers"].values()]  # type: ignore[attr-defined]
        states = {n: CLI.check("inspect", "--format", "{{.State.Status}}", n).strip() for n in names}
        assert set(states.values()) == {"paused"}, states
        before = _cpu_ticks(pids)
        time.sleep(5.0)
        assert _cpu_ticks(pids) == before, "a process of a paused container used CPU"
        assert not probe(deployment.base_url, deployment.served_model, timeout_s=1.0).ready
        target.thaw(deployment)
        assert probe(deployment.base_url, deployment.served_model, timeout_s=30.0).ready
        assert _complete(deployment, "Question: 2 + 2 = ?\nAnswer:") == before_freeze  # greedy, same pair
        assert target.freeze(deployment)  # and left frozen: the deployment's end must still stop it cleanly
    codes = {role: server.exit_code for role, server in deployment.servers.items()}
    assert all(code is not None and code != 137 for code in codes.values()), f"SIGKILLed, not stopped: {codes}"
    assert _containers(f"{OWNER_LABEL}={owner_id()}") == []
