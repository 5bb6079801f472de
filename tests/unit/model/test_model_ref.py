"""canary.model.ref: the one resolver of `builtin:NAME`, directory and hub-id model sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.errors import CanaryError
from canary.model.ref import builtin_dir, is_builtin, local_model_dir, resolve_model


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
