"""`pip install .` gives a working controller: the wheel carries every file the controller reads at run time.

The wheel is built for real (pip, the project's setup.py, from a copy of the sources so the checkout gets no
build/ folder), unpacked, and run from outside any checkout with PYTHONPATH naming only the unpacked wheel
(the controller venv's interpreter supplies the locked dependencies): `canary --help`, `canary plan` and
`canary run --dry-run` of the default config, which read the catalogs, the image table, the engine lock and
the engine site. A fresh venv with the wheel and requirements/controller.txt was tried by hand (docs/operations/cli.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from canary.paths import BUNDLED, REPO_ROOT

SOURCES = ("pyproject.toml", "setup.py", "README.md", "canary", *BUNDLED)


def _copy_sources(dest: Path) -> None:
    for relative in SOURCES:
        source, target = REPO_ROOT / relative, dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data"))
        else:
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree, built by pip and unpacked."""
    root = tmp_path_factory.mktemp("wheel")
    src, dist, out = root / "src", root / "dist", root / "site"
    _copy_sources(src)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src), "-w", str(dist)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("vllm_canary-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(out)
    return out


def _canary(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the unpacked wheel's canary in tmp_path (no checkout there), its cache under tmp_path."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(site),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path),
        "COLUMNS": "200",
    }
    code = "import sys; from canary.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_wheel_carries_every_runtime_file(unpacked: Path) -> None:
    data = unpacked / "canary" / "_data"
    for relative in BUNDLED:
        assert (data / relative).exists(), f"the wheel lacks {relative}"
        assert not (REPO_ROOT / relative).is_dir() or any((data / relative).iterdir())
    assert (data / "configs" / "cpu-default.yaml").read_bytes() == (REPO_ROOT / "configs/cpu-default.yaml").read_bytes()
    assert (unpacked / "canary" / "model" / "gsm8k_local.yaml").is_file()
    assert (unpacked / "canary" / "targets" / "engine_site" / "sitecustomize.py").is_file()
    assert not (unpacked / "tests").exists()  # test support stays out of the installed package


def test_the_installed_canary_plans_and_dry_runs_from_anywhere(unpacked: Path, tmp_path: Path) -> None:
    where = _canary(unpacked, tmp_path, "--help")
    assert where.returncode == 0, where.stderr
    assert "exit codes:" in where.stdout and "check" in where.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import canary.paths as p; print(p.PACKAGE_DIR, p.INSTALLED, p.CACHE_DIR)"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(unpacked), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    package_dir, installed, cache = probe.stdout.split()
    assert Path(package_dir) == unpacked / "canary"  # the wheel's code, not the checkout's
    assert installed == "True"
    assert Path(cache) == tmp_path / "xdg" / "vllm-canary"  # never inside site-packages
    plan = _canary(unpacked, tmp_path, "plan", "configs/cpu-default.yaml")
    assert plan.returncode == 0, plan.stderr
    assert "pd.cpu_attn.p128-d128.auto.v1.kernel32" in plan.stdout
    dry = _canary(unpacked, tmp_path, "run", "configs/cpu-default.yaml", "--dry-run", "--only", "agg.cpu_attn.b32")
    assert dry.returncode == 0, dry.stderr
    assert str(unpacked / "canary" / "targets" / "engine_site") in dry.stdout  # engines get the wheel's site
