"""canary.model.ref: the one resolver of `builtin:NAME`, directory and hub-id model sources, and the hub cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.errors import CanaryError
from canary.model.ref import (
    builtin_dir,
    cached_snapshot,
    hf_home,
    hub_model_missing,
    hub_repo_dir,
    is_builtin,
    is_hub_id,
    local_model_dir,
    resolve_model,
)


def test_a_builtin_that_is_not_built_names_make_model(tmp_path: Path) -> None:
    with pytest.raises(CanaryError, match=r"builtin:tiny is not built .*run `make model`"):
        resolve_model("builtin:tiny", cache_dir=tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    assert resolve_model("builtin:tiny", cache_dir=tmp_path) == str((tmp_path / "models" / "tiny").resolve())


def test_a_directory_resolves_to_its_absolute_path_and_a_hub_id_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "weights").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model("weights", cache_dir=tmp_path) == str(tmp_path / "weights")
    assert local_model_dir("weights", cache_dir=tmp_path) == Path("weights")
    assert resolve_model("org/some-model", cache_dir=tmp_path) == "org/some-model"
    assert local_model_dir("org/some-model", cache_dir=tmp_path) is None


def test_builtin_names_map_into_the_models_cache(tmp_path: Path) -> None:
    assert is_builtin("builtin:tiny") and not is_builtin("tiny") and not is_builtin("org/builtin:x")
    assert builtin_dir("builtin:tiny", tmp_path) == tmp_path / "models" / "tiny"
    assert local_model_dir("builtin:tiny", tmp_path) == tmp_path / "models" / "tiny"  # built or not


@pytest.mark.parametrize("source", ["builtin:", "builtin:a/b", "builtin:..", "tiny"])
def test_a_malformed_builtin_is_refused_by_name(source: str, tmp_path: Path) -> None:
    with pytest.raises(CanaryError, match=f"model source {source!r} is not builtin:NAME"):
        builtin_dir(source, tmp_path)


def _cache(home: Path, repo_id: str, *, config: bool = True, ref: bool = True) -> Path:
    """A hub cache entry as `huggingface-cli download` leaves it: refs/main -> snapshots/<commit>."""
    repo = hub_repo_dir(home, repo_id)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    if config:
        (snapshot / "config.json").write_text("{}")
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("abc123\n")
    return snapshot


def test_a_cached_hub_model_is_found_through_refs_main(tmp_path: Path) -> None:
    snapshot = _cache(tmp_path, "Qwen/Qwen3-0.6B")
    assert hub_repo_dir(tmp_path, "Qwen/Qwen3-0.6B") == tmp_path / "hub" / "models--Qwen--Qwen3-0.6B"
    assert cached_snapshot(tmp_path, "Qwen/Qwen3-0.6B") == snapshot
    assert hub_model_missing("Qwen/Qwen3-0.6B", tmp_path) is None


@pytest.mark.parametrize(("config", "ref"), [(False, True), (True, False)])
def test_a_snapshot_without_config_or_ref_is_not_cached(tmp_path: Path, config: bool, ref: bool) -> None:
    _cache(tmp_path, "org/m", config=config, ref=ref)
    assert cached_snapshot(tmp_path, "org/m") is None


def test_a_missing_hub_model_names_the_download_and_the_alternative(tmp_path: Path) -> None:
    message = hub_model_missing("org/some-model", tmp_path)
    assert message is not None
    assert f"HF_HOME={tmp_path} huggingface-cli download org/some-model" in message
    assert "models[].source" in message and str(tmp_path) in message


def test_sources_that_need_no_cache_and_text_that_is_no_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "weights").mkdir()
    monkeypatch.chdir(tmp_path)
    assert hub_model_missing("builtin:tiny", tmp_path) is None  # its build is resolve_model's to check
    assert hub_model_missing("weights", tmp_path) is None
    assert not is_hub_id("weights") and not is_hub_id("builtin:tiny") and is_hub_id("org/m")
    assert hub_model_missing("/no/such/dir", tmp_path) == (
        "model source '/no/such/dir' is neither a directory nor a hub id (ORG/NAME)"
    )


def test_hf_home_prefers_the_config_then_the_environment(tmp_path: Path) -> None:
    assert hf_home(str(tmp_path / "cfg"), {"HF_HOME": "/env"}) == tmp_path / "cfg"
    assert hf_home(None, {"HF_HOME": str(tmp_path)}) == tmp_path
    assert hf_home(None, {}) == Path("~/.cache/huggingface").expanduser()
