"""The tiny model shipped in canary/model/prebuilt/ (issue 42: the first run in 6 minutes): it matches the
current recipe, unpacks verified and atomically, and `make model` takes it without the engine venv."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from canary.model import prebuilt
from canary.model.params import MANIFEST_NAME, cache_key, default_params, is_complete
from canary.paths import REPO_ROOT


def test_the_shipped_build_is_the_current_recipes() -> None:
    archive = prebuilt.archive_path()
    assert archive.is_file(), (
        f"no {archive.name} in canary/model/prebuilt/: the tiny model's recipe (canary/model/dataset.py, params.py, "
        "build.py) changed since the shipped build; run `make model-prebuilt` and commit the archive"
    )
    assert [p.name for p in prebuilt.PREBUILT_DIR.glob("tiny-*")] == [archive.name], "stale archives left beside it"


def test_it_unpacks_verified_links_and_is_reused(tmp_path: Path) -> None:
    root = tmp_path / "models"
    found = prebuilt.unpack(root)
    assert found is not None and is_complete(found)
    manifest = json.loads((found / MANIFEST_NAME).read_text())
    assert manifest["cache_key"] == cache_key(default_params())
    assert (found / "data" / "test.jsonl").is_file() and (found / "model.safetensors").is_file()
    prebuilt.link(root, "tiny", found)
    assert (root / "tiny").resolve() == found.resolve()
    assert prebuilt.unpack(root) == found  # complete: reused, not unpacked again
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def _tampered_copy(tmp_path: Path) -> Path:
    """The shipped archive with one byte of the weights flipped, in a folder of its own."""
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with tarfile.open(prebuilt.archive_path(), "r:xz") as tar:
        for info in tar.getmembers():
            handle = tar.extractfile(info)
            assert handle is not None
            data = handle.read()
            if info.name == "model.safetensors":
                data = data[:-1] + bytes([data[-1] ^ 1])
            members.append((info, data))
    folder = tmp_path / "shipped"
    folder.mkdir()
    with tarfile.open(folder / prebuilt.archive_path().name, "w:xz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return folder


def test_a_tampered_archive_is_refused_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", _tampered_copy(tmp_path))
    root = tmp_path / "models"
    with pytest.raises(prebuilt.PrebuiltError, match=r"model\.safetensors: sha256"):
        prebuilt.unpack(root)
    assert list(root.iterdir()) == []


def test_make_model_takes_it_without_the_engine_venv(tmp_path: Path) -> None:
    """The user's path: `make model` on a fresh root with no engine venv at all unpacks the shipped build."""
    root = tmp_path / "models"
    done = subprocess.run(
        ["make", "--no-print-directory", "model", f"MODEL_ROOT={root}", f"ENGINE_VENV={tmp_path / 'no-venv'}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from canary/model/prebuilt" in done.stdout
    assert not (tmp_path / "no-venv").exists()
    assert is_complete((root / "tiny").resolve())
