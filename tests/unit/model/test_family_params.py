"""The KV family models' names, cache keys and `make model-families`' "built and linked" test (stdlib side)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from canary.config.catalog import load_catalog
from canary.model import family_params
from canary.model.family_params import (
    FAMILY_MODELS,
    FAMILY_NAMES,
    family_cache_key,
    family_dir,
    family_model,
    main,
    unlinked,
)
from canary.model.params import MANIFEST_NAME
from canary.model.ref import BUILTIN_MODELS, unknown_builtin


def test_every_family_model_is_a_builtin_name_with_a_catalog_family(tmp_path: Path) -> None:
    assert ("tiny", *FAMILY_NAMES) == BUILTIN_MODELS
    families = load_catalog().families
    assert sorted({m.family for m in FAMILY_MODELS}) == sorted(set(families) - {"dense"})
    for name in FAMILY_NAMES:
        assert unknown_builtin(f"builtin:{name}", tmp_path) is None  # known before it is built
    assert unknown_builtin("builtin:tiny-mistral", tmp_path) is not None


def test_the_cache_key_follows_the_shape_and_the_seed() -> None:
    gemma = family_model("tiny-gemma3")
    wider = replace(gemma, config=MappingProxyType({**gemma.config, "sliding_window": 32}))
    keys = {family_cache_key(gemma, 0), family_cache_key(gemma, 1), family_cache_key(wider, 0)}
    assert len(keys) == 3
    assert family_cache_key(gemma, 0) == family_cache_key(family_model("tiny-gemma3"), 0)
    assert len({family_cache_key(m) for m in FAMILY_MODELS}) == len(FAMILY_MODELS)


def _fake_build(root: Path, name: str) -> Path:
    directory = family_dir(root, family_model(name))
    directory.mkdir(parents=True)
    (directory / MANIFEST_NAME).write_text(json.dumps({"name": name}))
    return directory


def test_linked_only_when_every_family_is_complete_and_pointed_at(tmp_path: Path) -> None:
    assert unlinked(tmp_path) == list(FAMILY_NAMES)
    for name in FAMILY_NAMES:
        (tmp_path / name).symlink_to(_fake_build(tmp_path, name).name)
    assert unlinked(tmp_path) == []
    assert main(["--out-root", str(tmp_path), "--linked"]) == 0
    stale = tmp_path / "tiny-gemma3"
    stale.unlink()
    (tmp_path / "elsewhere").mkdir()
    stale.symlink_to("elsewhere")  # a link to an older build is not this build
    assert unlinked(tmp_path) == ["tiny-gemma3"]
    assert main(["--out-root", str(tmp_path), "--linked"]) == 1


def test_an_edit_of_the_builder_selects_a_fresh_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = family_dir(tmp_path, family_model("tiny-nemotron-h"))
    sources = tmp_path / "src"
    sources.mkdir()
    package = Path(family_params.__file__).parent
    for name in family_params.HASHED_FAMILY_SOURCES:
        (sources / name).write_bytes((package / name).read_bytes() + b"\n# edited\n")
    monkeypatch.setattr(family_params, "__file__", str(sources / "family_params.py"))
    assert family_dir(tmp_path, family_model("tiny-nemotron-h")) != before
