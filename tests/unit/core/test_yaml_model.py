"""canary.core.yaml_model: every YAML file the canary reads fails the same way, naming the file and the key
(or line and column), exit 2. Each loader is tried on a broken copy of its real file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.config.catalog import load_catalog
from canary.core.yaml_model import FrozenModel, StrictModel, load_yaml_model
from canary.errors import ConfigError
from canary.images.table import IMAGES_CATALOG, ImageError, load_image_catalog
from canary.paths import BACKENDS_CATALOG, SIGNATURES_CATALOG
from canary.selftest.model import FAULTS_FILE, load_faults
from canary.targets.signatures import load_signatures
from canary.vllm_source.catalog_check import read_catalog

LOADERS: dict[str, tuple[Path, Callable[[Path], Any]]] = {
    "backends": (BACKENDS_CATALOG, load_catalog),
    "signatures": (SIGNATURES_CATALOG, load_signatures),
    "images": (IMAGES_CATALOG, load_image_catalog),
    "faults": (FAULTS_FILE, load_faults),
}


def _copy(tmp_path: Path, real: Path, text: str | None = None) -> Path:
    path = tmp_path / real.name
    path.write_text(real.read_text(encoding="utf-8") if text is None else text, encoding="utf-8")
    if real == FAULTS_FILE:  # the fault series are found next to faults.yaml
        for series in real.parent.glob("*/series"):
            (tmp_path / series.parent.name).mkdir(exist_ok=True)
            (tmp_path / series.parent.name / "series").write_text(series.read_text())
    return path


def _error(load: Callable[[Path], Any], path: Path) -> str:
    with pytest.raises((ConfigError, ImageError)) as caught:
        load(path)
    assert caught.value.exit_code == 2
    return str(caught.value)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_the_real_file_loads_and_an_unknown_key_is_named(name: str, tmp_path: Path) -> None:
    real, load = LOADERS[name]
    good = tmp_path / "good"
    good.mkdir()
    assert load(_copy(good, real)) is not None
    data = yaml.safe_load(real.read_text(encoding="utf-8"))
    data["schema_versoin"] = 1
    bad = _copy(tmp_path, real, yaml.safe_dump(data, sort_keys=False))
    assert _error(load, bad) == f"{bad}: schema_versoin: unknown key: did you mean schema_version? (check the spelling)"


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_syntax_errors_empty_and_missing_files_are_named(name: str, tmp_path: Path) -> None:
    real, load = LOADERS[name]
    broken = _copy(tmp_path, real, "schema_version: 1\nitems: [unclosed\n")
    assert _error(load, broken).startswith(f"{broken}: line 3, column 1: YAML syntax error: ")
    empty = _copy(tmp_path, real, "# nothing\n")
    assert _error(load, empty) == f"{empty}: file is empty"
    listed = _copy(tmp_path, real, "- a\n- b\n")
    assert _error(load, listed) == f"{listed}: expected a mapping at the top level, got list"
    assert _error(load, tmp_path / "absent.yaml") == f"{tmp_path / 'absent.yaml'}: file not found"


def test_a_wrong_value_names_its_key_path_and_the_value(tmp_path: Path) -> None:
    data = yaml.safe_load(SIGNATURES_CATALOG.read_text(encoding="utf-8"))
    data["signatures"][1]["priority"] = "high"
    bad = _copy(tmp_path, SIGNATURES_CATALOG, yaml.safe_dump(data, sort_keys=False))
    assert _error(load_signatures, bad) == (
        f"{bad}: signatures.1.priority: Input should be a valid integer, unable to parse string as an integer "
        "(got 'high')"
    )


def test_the_catalog_check_reads_the_catalog_with_the_same_errors(tmp_path: Path) -> None:
    header, data = read_catalog(BACKENDS_CATALOG)
    assert header and header[0].startswith("#") and "FLASH_ATTN" in data["backends"]
    no_backends = _copy(tmp_path, BACKENDS_CATALOG, "schema_version: 1\n")
    assert _error(read_catalog, no_backends) == f"{no_backends}: backends: no `backends:` mapping"
    assert _error(read_catalog, tmp_path / "gone.yaml") == f"{tmp_path / 'gone.yaml'}: file not found"


class _Point(StrictModel):
    x: int


class _Frozen(FrozenModel):
    x: int


def test_the_strict_bases_forbid_unknown_keys_and_the_frozen_one_changes(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: 1\ny: 2\nz: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml_model(path, _Point)
    assert str(caught.value) == f"{path}: y: unknown key (check the spelling) (and 1 more)"
    point = _Point(x=1)
    point.x = 2
    frozen = _Frozen(x=1)
    with pytest.raises(ValueError, match="frozen"):
        frozen.x = 2  # type: ignore[misc]
