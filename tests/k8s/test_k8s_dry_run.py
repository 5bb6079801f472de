"""`canary run CONFIG --dry-run` on the Kubernetes target, through the real CLI and the real helm:
with a GPU budget it renders tonight's waves and the first wave's manifests with their
`nvidia.com/gpu` requests (it used to print "Helm deploys the cells; this target only reads them"
and no manifest); without one the cells are read from an installed release, and it says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from k8s_helpers import REPO, helm_bin, load_crd_schemas, validate

from canary.targets.kubernetes.waves import gpu_requests


def _dry_run(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "canary", "run", "configs/h200-mrv2-pd.yaml", "--dry-run", *args],
        cwd=REPO,
        env={**os.environ, "HELM": str(helm_bin()), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _gpus(container: dict[str, Any]) -> tuple[str, str]:
    """(requests, limits) of nvidia.com/gpu, as text ("None" where absent)."""
    resources = container.get("resources") or {}
    return tuple(str((resources.get(k) or {}).get("nvidia.com/gpu")) for k in ("requests", "limits"))  # type: ignore[return-value]


def test_the_dry_run_renders_the_first_wave_with_its_gpu_requests() -> None:
    data = _dry_run()
    waves = data["waves"]
    assert waves["gpu_budget"] == 16 and waves["waves"], waves.keys()
    first = waves["first_wave"]
    assert first["cells"] == waves["waves"][0]["cells"] and first["gpus"] <= 16
    manifests = first["manifests"]
    assert validate(manifests, load_crd_schemas()) == []
    servers = [m for m in manifests if m["kind"] in ("Deployment", "LeaderWorkerSet") and gpu_requests(m)]
    cells = {m["metadata"]["labels"]["canary.vllm.dev/cell"] for m in servers}
    assert len(cells) == len(first["cells"])  # every cell of the wave holds GPUs
    for server in servers:
        (engine,) = [c for c in server["spec"]["template"]["spec"]["containers"] if _gpus(c) != ("None", "None")]
        assert _gpus(engine) == ("1", "1"), server["metadata"]["name"]  # tensor_parallel_size 1: one each
    assert sum(gpu_requests(m) for m in manifests) == first["gpus"] == sum(first["gpu_requests"].values())
    assert all(m["metadata"]["labels"]["canary.vllm.dev/run"] == "dry-run" for m in servers)
    assert "only reads them" not in data["cells"][0]["note"] and "waves.first_wave" in data["cells"][0]["note"]


def test_without_a_budget_the_dry_run_says_the_cells_are_read_from_a_release() -> None:
    data = _dry_run("--set", "target.kubernetes.gpu_budget=null", "--only", "pd.flashinfer.p128-d128.auto.v2")
    assert "waves" not in data
    assert data["cells"] and all("only reads them" in cell["note"] for cell in data["cells"])
