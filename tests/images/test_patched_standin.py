"""The patched vLLM images (docker/vllm-patched) built here for real, on stand-ins of their
upstream bases (docker/vllm-standin: each release's Python sources from its pinned sdist, no CUDA).

`make images-standin` runs docker/vllm-patched/Dockerfile unchanged for every `patched` entry of
docker/images.yaml; these tests check what that build left in the image: the series of the entry,
applied in order inside the image's own site-packages (every patch reverse-applies exactly, on a
scratch copy, where the unpatched stand-in refuses the first), the pins and the series hash in
build-info.json and the labels, and the stand-in mark, so the image cannot pass for an engine.
What stays unproven here: the real upstream base (CUDA, the compiled extensions, FlashInfer's
kernels), and any engine serving from a patched image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from canary.images.patchseries import read_series
from canary.paths import REPO_ROOT
from canary.targets.container_cli import repo_podman_conf

pytestmark = pytest.mark.slow

LABEL = "dev.vllm.canary.test=test_patched_standin"
BUILD_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Patched:
    """One `patched` entry of docker/images.yaml and the images built for it."""

    image: str
    standin: str
    release: str
    series: Path
    sha256: str
    flashinfer: str
    nixl: str


class Podman:
    def __init__(self) -> None:
        binary = shutil.which("podman")
        if binary is None:
            pytest.fail("podman is not installed: run `make container-tools` (make test does)")
        self.binary = binary
        self.env = dict(os.environ)
        for key, path in repo_podman_conf().items():
            self.env.setdefault(key, str(path))

    def run(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def shell(self, image: str, script: str, *volumes: str) -> subprocess.CompletedProcess[str]:
        """`bash -c script` in a throwaway container of `image` (no network, removed afterwards)."""
        name = f"canary-test-{uuid.uuid4().hex[:10]}"
        mounts = [arg for volume in volumes for arg in ("-v", volume)]
        try:
            return self.run(
                "run", "--rm", "--name", name, "--label", LABEL, "--network", "none", "--user", "0",
                *mounts, "--entrypoint", "bash", image, "-c", script,
            )  # fmt: skip
        finally:
            self.run("rm", "-f", name)

    def labels(self, image: str) -> dict[str, str]:
        done = self.run("image", "inspect", "--format", "{{json .Labels}}", image)
        assert done.returncode == 0, f"{image}: {done.stderr}"
        labels = json.loads(done.stdout)
        assert isinstance(labels, dict)
        return labels


@pytest.fixture(scope="module")
def podman() -> Iterator[Podman]:
    cli = Podman()
    yield cli
    done = cli.run("ps", "-aq", "--filter", f"label={LABEL}")
    for container in done.stdout.split():
        cli.run("rm", "-f", container)


@pytest.fixture(scope="module")
def patched(podman: Podman) -> list[Patched]:
    built = subprocess.run(
        ["make", "-s", "--no-print-directory", "images-standin", "CONTAINER_ENGINE=buildah"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert built.returncode == 0, f"make images-standin failed:\n{built.stdout[-3000:]}\n{built.stderr[-6000:]}"
    print(built.stdout)
    plan = subprocess.run(
        [sys.executable, "-m", "canary.images.table", "build-plan"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [line.split("\t") for line in plan.stdout.splitlines() if line.strip()]
    assert rows, "docker/images.yaml has no patched entry"
    entries = [
        Patched(
            image=f"localhost/vllm-patched-standin:{ref.rsplit(':', 1)[1]}",
            standin=f"localhost/vllm-openai-standin:v{release}",
            release=release,
            series=REPO_ROOT / series,
            sha256=sha,
            flashinfer=flashinfer,
            nixl=nixl,
        )
        for ref, _base, release, series, sha, flashinfer, nixl in rows
    ]
    for entry in entries:
        for image in (entry.standin, entry.image):
            assert podman.run("image", "exists", image).returncode == 0, f"{image}: not built by make images-standin"
    return entries


@contextmanager
def mounted(podman: Podman, image: str) -> Iterator[Path]:
    """The image's root filesystem, read from storage (`podman image mount`; no container)."""
    done = podman.run("image", "mount", image)
    assert done.returncode == 0, f"podman image mount {image}: {done.stderr}"
    try:
        yield Path(done.stdout.strip())
    finally:
        podman.run("image", "unmount", image)


def _vllm_dir(root: Path) -> Path:
    """The installed `vllm` package of an image (its venv or system site-packages)."""
    found = sorted(root.glob("opt/venv/lib/python3*/site-packages/vllm/__init__.py"))
    found += sorted(root.glob("usr/local/lib/python3*/site-packages/vllm/__init__.py"))
    assert len(found) == 1, f"{root}: expected one installed vllm package, found {found}"
    return found[0].parent


def _unapplied(entry: Patched, vllm_dir: Path, scratch: Path) -> str | None:
    """Reverse-apply the series on a copy of `vllm_dir`, last patch first, each exactly (`git apply
    -R`: no fuzz, every context line must match); the first patch that does not reverse, or None
    when the whole series does, i.e. the tree holds it."""
    tree = scratch / "tree"
    shutil.copytree(vllm_dir, tree / "vllm", ignore=shutil.ignore_patterns("__pycache__"))
    for patch in reversed(read_series(entry.series).patches):
        done = subprocess.run(
            ["git", "apply", "-R", "-p1", str(patch)],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            return f"{patch.name}: {done.stderr.strip()[:500]}"
    return None


def test_every_series_is_applied_inside_the_image_site_packages(
    podman: Podman, patched: list[Patched], tmp_path: Path
) -> None:
    for index, entry in enumerate(patched):
        with mounted(podman, entry.image) as root:
            problem = _unapplied(entry, _vllm_dir(root), tmp_path / str(index))
        assert problem is None, f"{entry.image}: {entry.series} is not applied as built: {problem}"


def test_the_unpatched_stand_in_fails_the_same_check(podman: Podman, patched: list[Patched], tmp_path: Path) -> None:
    # The check reads the tree it is given: the stand-in (the base the series went onto) never had
    # the series, so the same check must name a patch there.
    for index, entry in enumerate(patched):
        with mounted(podman, entry.standin) as root:
            problem = _unapplied(entry, _vllm_dir(root), tmp_path / str(index))
        assert problem is not None, f"{entry.standin}: the check passed on a tree without {entry.series}"


def test_build_info_and_labels_carry_the_pins_and_the_series_hash(podman: Podman, patched: list[Patched]) -> None:
    for entry in patched:
        with mounted(podman, entry.image) as root:
            info = json.loads((root / "opt" / "vllm-canary" / "build-info.json").read_text())
        assert info["vllm"] == entry.release
        assert info["patch_series_sha256"] == entry.sha256
        assert info["patch_series"] == str(entry.series.relative_to(REPO_ROOT))
        assert info["base_image"] == entry.standin
        if entry.nixl:
            assert info["nixl"] == entry.nixl
        labels = podman.labels(entry.image)
        assert labels["dev.vllm.canary.patch-series-sha256"] == entry.sha256
        assert labels["dev.vllm.canary.vllm-version"] == entry.release
        assert labels["dev.vllm.canary.flashinfer-version"] == entry.flashinfer


def test_a_patched_stand_in_says_it_is_a_stand_in(podman: Podman, patched: list[Patched]) -> None:
    for entry in patched:
        assert podman.labels(entry.image).get("dev.vllm.canary.stand-in") == "true", entry.image
        with mounted(podman, entry.image) as root:
            assert "no CUDA" in (root / "opt" / "vllm-canary" / "STAND-IN").read_text()
        assert not entry.image.startswith("ghcr.io/"), "a stand-in must never carry the real image's reference"


def test_the_image_python_finds_the_patched_vllm(podman: Podman, patched: list[Patched]) -> None:
    # One container per image: its own `python3` (what `vllm serve` would run) resolves the vllm
    # of the checked site-packages, at the release's version.
    for entry in patched:
        done = podman.shell(
            entry.image,
            "python3 -c 'import importlib.metadata as m, importlib.util as u; "
            'print(m.version("vllm"), u.find_spec("vllm").origin)\'',
        )
        assert done.returncode == 0, done.stderr
        version, origin = done.stdout.split()
        assert version == entry.release and origin.startswith("/opt/venv/lib/python3"), done.stdout


def test_nothing_is_left_running(podman: Podman, patched: list[Patched]) -> None:
    done = podman.run("ps", "-aq", "--filter", f"label={LABEL}")
    assert done.returncode == 0 and not done.stdout.split(), done.stdout
