"""The images `make images-cpu` builds, run here with podman (daemonless: runc, host network,
loopback only): the controller's CLI and the default matrix's plan, the router's CLI, and the CPU
engine serving the tiny model (mounted read-only) on a free 127.0.0.1 port, answering one
completion.

The session fixture runs `make images-cpu CONTAINER_ENGINE=buildah` (cached: seconds when nothing
changed, ~10 min cold) so the images are in podman's storage even where a Docker engine exists,
and `make model` where the tiny model is not built yet. Nothing here is skipped: without podman or
buildah the fixture fails and names `make container-tools`. Every container gets the label
LABEL and is removed, also when a test fails; the last test checks none is left.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from canary.targets.container_cli import repo_podman_conf

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LABEL_KEY = "dev.vllm.canary.test"
LABEL = f"{LABEL_KEY}=test_built_images"
ENGINE_LOCK = REPO / "requirements" / "engine.txt"
MODEL_LINK = REPO / ".cache" / "models" / "tiny"
BUILD_TIMEOUT_S = 3600
STARTUP_DEADLINE_S = 900  # vfs copies the 3 GB image into the container first; vLLM takes 20-60 s on 2 cores
ENGINE_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "UCX_NET_DEVICES": "lo",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


@dataclass(frozen=True)
class Podman:
    """podman with the environment `make` gives it (docker/podman/*.conf unless already set)."""

    binary: str
    env: dict[str, str]

    def run(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def labelled(self) -> list[str]:
        done = self.run("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
        assert done.returncode == 0, done.stderr
        return done.stdout.split()


@dataclass(frozen=True)
class Images:
    canary: str
    router: str
    cpu_engine: str


def _make(*args: str, timeout_s: float = BUILD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "--no-print-directory", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    missing = [tool for tool in ("podman", "buildah", "runc") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run `make container-tools` (make test does)")
    env = dict(os.environ)
    for key, path in repo_podman_conf().items():
        env.setdefault(key, str(path))
    cli = Podman(shutil.which("podman") or "podman", env)
    yield cli
    # Whatever a failed test left behind goes (the last test fails if there was any).
    for name in cli.labelled():
        cli.run("rm", "-f", name)


@pytest.fixture(scope="session")
def images(podman: Podman) -> Images:
    started = time.monotonic()
    built = _make("images-cpu", "CONTAINER_ENGINE=buildah")
    assert built.returncode == 0, f"make images-cpu failed:\n{built.stdout[-3000:]}\n{built.stderr[-6000:]}"
    print(f"make images-cpu ({time.monotonic() - started:.0f} s):\n{built.stdout}")
    listed = _make("images-cpu-refs", "CONTAINER_ENGINE=buildah", timeout_s=300)
    assert listed.returncode == 0, listed.stderr
    refs = dict(line.split("\t", 1) for line in listed.stdout.splitlines() if "\t" in line)
    assert set(refs) == {"canary", "router", "cpu-engine"}, listed.stdout
    for ref in refs.values():
        assert podman.run("image", "exists", ref).returncode == 0, f"{ref}: not in podman's storage after make"
    return Images(refs["canary"], refs["router"], refs["cpu-engine"])


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    if not MODEL_LINK.exists():
        built = _make("model")
        assert built.returncode == 0, f"make model failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}"
    path = MODEL_LINK.resolve()
    assert (path / "config.json").is_file(), f"{path}: no config.json (make model)"
    return path


def _container_name() -> str:
    return f"canary-test-{uuid.uuid4().hex[:10]}"


def _run(
    podman: Podman, image: str, *args: str, entrypoint: str | None = None, workdir: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run IMAGE once (foreground), labelled and removed whatever happens."""
    name = _container_name()
    argv = ["run", "--name", name, "--label", LABEL, "--network", "host"]
    argv += ["--entrypoint", entrypoint] if entrypoint else []
    argv += ["--workdir", workdir] if workdir else []
    try:
        return podman.run(*argv, image, *args)
    finally:
        podman.run("rm", "-f", name)


def _image_config(podman: Podman, image: str) -> dict[str, object]:
    done = podman.run("image", "inspect", "--format", "{{json .Config}}", image)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert isinstance(config, dict)
    return config


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert isinstance(port, int)
        return port


def _get(url: str, timeout_s: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status = response.status
            assert isinstance(status, int)
            return status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def _post_json(url: str, body: dict[str, object], timeout_s: float = 120) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.loads(response.read())
    assert isinstance(answer, dict)
    return answer


# --------------------------------------------------------------------------- controller


def test_the_controller_image_runs_the_cli(podman: Podman, images: Images) -> None:
    done = _run(podman, images.canary, "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan" in done.stdout


def test_the_controller_image_plans_the_default_matrix(podman: Podman, images: Images) -> None:
    # the image's user (10001) cannot write under /opt/canary/app, and plan refuses a results directory that
    # could not hold runs (issue 41): point it where the user can write, as the chart's results volume does
    done = _run(
        podman,
        images.canary,
        *("plan", "configs/cpu-default.yaml", "--all", "--set", "export.results_dir=/tmp/results"),
        workdir="/opt/canary/app",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cells = re.findall(r"\b(?:agg|pd)\.cpu_attn\.[\w.-]+", done.stdout)
    assert len(set(cells)) == 10, done.stdout  # --all: every cell, not only the first run's matrix.select
    assert "planned" in done.stdout


def test_the_controller_image_runs_as_non_root(podman: Podman, images: Images) -> None:
    user = str(_image_config(podman, images.canary).get("User", ""))
    assert user.split(":")[0] not in ("", "0", "root")


# --------------------------------------------------------------------------- router


def test_the_router_image_runs_vllm_router(podman: Podman, images: Images) -> None:
    done = _run(podman, images.router, "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--vllm-pd-disaggregation" in done.stdout + done.stderr


# --------------------------------------------------------------------------- CPU engine


def test_the_cpu_engine_image_names_its_vllm_and_lock(podman: Podman, images: Images) -> None:
    config = _image_config(podman, images.cpu_engine)
    labels = config.get("Labels")
    assert isinstance(labels, dict)
    version = re.search(r"^vllm-cpu==(\S+)$", ENGINE_LOCK.read_text(), re.M)
    assert version, f"{ENGINE_LOCK}: no vllm-cpu pin"
    lock_sha256 = hashlib.sha256(ENGINE_LOCK.read_bytes()).hexdigest()
    assert labels.get("dev.vllm.canary.vllm-version") == version.group(1)
    assert labels.get("dev.vllm.canary.engine-lock-sha256") == lock_sha256
    assert images.cpu_engine.endswith(f":{version.group(1)}-{lock_sha256[:12]}")
    assert str(config.get("User", "")).split(":")[0] not in ("", "0", "root")
    assert config.get("Entrypoint") == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def _wait_healthy(podman: Podman, name: str, port: int) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if _get(f"http://127.0.0.1:{port}/health") == 200:
            return
        state = podman.run("inspect", "--format", "{{.State.Status}}", name)
        if state.returncode == 0 and state.stdout.strip() in ("exited", "stopped"):
            pytest.fail(f"the engine container exited before /health answered:\n{_logs(podman, name)}")
        time.sleep(2)
    pytest.fail(f"no /health 200 within {STARTUP_DEADLINE_S} s:\n{_logs(podman, name)}")


def _logs(podman: Podman, name: str) -> str:
    done = podman.run("logs", name)
    return (done.stdout + done.stderr)[-6000:]


def _engine_argv(name: str, model: Path, image: str, port: int) -> Sequence[str]:
    argv = ["run", "--detach", "--name", name, "--label", LABEL, "--network", "host"]
    argv += ["--volume", f"{model}:/models/tiny:ro"]
    for key, value in ENGINE_ENV.items():
        argv += ["--env", f"{key}={value}"]
    return [
        *argv,
        image,
        "--model",
        "/models/tiny",
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "512",
    ]


def test_the_cpu_engine_image_serves_the_tiny_model(podman: Podman, images: Images, tiny_model: Path) -> None:
    name = _container_name()
    port = _free_port()
    try:
        started = podman.run(*_engine_argv(name, tiny_model, images.cpu_engine, port), timeout_s=STARTUP_DEADLINE_S)
        assert started.returncode == 0, started.stderr
        _wait_healthy(podman, name, port)
        answer = _post_json(
            f"http://127.0.0.1:{port}/v1/completions",
            {"model": "tiny", "prompt": "Question: What is 2 + 3?\nAnswer:", "max_tokens": 16, "temperature": 0},
        )
        choices = answer.get("choices")
        assert isinstance(choices, list) and choices, answer
        text = choices[0].get("text") if isinstance(choices[0], dict) else None
        assert isinstance(text, str) and text.strip(), answer
        # Logprobs, as the parity check asks for them: vLLM torch.compiles the sampler's rank helper
        # on the first such request, so an image without a C++ compiler serves plain completions and
        # dies here (InvalidCxxCompiler).
        scored = _post_json(
            f"http://127.0.0.1:{port}/v1/completions",
            {
                "model": "tiny",
                "prompt": "Question: What is 4 + 4?\nAnswer:",
                "max_tokens": 4,
                "temperature": 0,
                "logprobs": 2,
            },
        )
        scored_choices = scored.get("choices")
        assert isinstance(scored_choices, list) and scored_choices, scored
        logprobs = scored_choices[0].get("logprobs") if isinstance(scored_choices[0], dict) else None
        assert isinstance(logprobs, dict) and logprobs.get("token_logprobs"), scored
    finally:
        podman.run("rm", "-f", name)


def test_no_container_is_left_behind(podman: Podman) -> None:
    assert podman.labelled() == []
