"""Load a canary config: read the YAML, apply `--set` overrides, validate the model, then check the
names it uses (backends, KV cache dtypes, the platform) against the capability catalog, and what
it points at: builtin model names, image patch series, request lengths against every model.

An error about a key a `--set` override wrote says so (`blame_overrides`): the file is not at fault.

canary.config defines the model and canary.config.catalog the catalog; this loader is the one place that
brings the two together, so neither imports the other.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from canary.config import CanaryConfig
from canary.config.catalog import Catalog, load_catalog
from canary.config.lengths import check_lengths
from canary.config.root import RefError
from canary.config.trace import TraceError, load_trace
from canary.core.words import by_closeness, listing
from canary.core.yaml_model import read_yaml, validation_error
from canary.errors import ConfigError
from canary.images.patchseries import SeriesError, read_series
from canary.images.table import check_image, find_series
from canary.model.ref import is_builtin, unknown_builtin
from canary.paths import CONFIGS_DIR, REPO_ROOT

UNKNOWN_CONFIG_KEY_HINT = "check the spelling; see the config reference in docs/reference/config.md"


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse one `--set a.b.c=value` override. The value is read as YAML (so 3, true, [1,2] work)."""
    if "=" not in text:
        raise ConfigError("--set", text, "expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not key.strip() or any(not p for p in parts):
        raise ConfigError("--set", text, "expected a dotted key path like checks.accuracy.limit")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError("--set", key, f"value is not valid YAML: {exc}") from None
    return parts, value


def apply_override(data: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set data[p0][p1]...[pn] = value, creating mappings and indexing lists by number."""
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node = node[_list_index(node, part, where)]
        elif isinstance(node, dict):
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
        else:
            raise ConfigError("--set", where, f"cannot descend into a {type(node).__name__}")
    last = parts[-1]
    if isinstance(node, list):
        node[_list_index(node, last, ".".join(parts))] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError("--set", ".".join(parts), f"cannot set a key on a {type(node).__name__}")


def _list_index(node: list[Any], part: str, where: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError("--set", where, f"expected a list index below {len(node)}")
    return int(part)


def validate_config(data: Any, source: str) -> CanaryConfig:
    """Validate parsed YAML into a CanaryConfig, raising ConfigError with file and key path."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        config = CanaryConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        ctx_error = first.get("ctx", {}).get("error")
        if isinstance(ctx_error, RefError):
            raise ConfigError(source, ctx_error.key_path, str(ctx_error)) from None
        raise validation_error(source, exc, UNKNOWN_CONFIG_KEY_HINT, CanaryConfig) from None
    validate_against_catalog(config, load_catalog(), source)
    validate_references(config, source)
    check_lengths(config, source)
    return config


def load_config(path: str | Path, overrides: list[str] | None = None) -> CanaryConfig:
    """Read a YAML config file, apply `--set` overrides, validate."""
    source = str(path)
    path = project_file(Path(path))
    if not Path(path).is_file():
        raise ConfigError(source, "", missing_config(Path(path)))
    data = read_yaml(Path(path))
    in_file = copy.deepcopy(data)
    for text_override in overrides or []:
        parts, value = parse_override(text_override)
        if not isinstance(data, dict):
            raise ConfigError(source, "", "expected a mapping at the top level")
        apply_override(data, parts, value)
    try:
        return validate_config(data, source)
    except ConfigError as exc:
        raise blame_overrides(exc, overrides or [], in_file) from None


def project_file(path: Path) -> Path:
    """A relative path that is not here but is one of the project's files (configs/cpu-default.yaml run from
    another directory, or from an installed wheel: canary.paths.REPO_ROOT), else the path as given."""
    if path.is_absolute() or path.exists() or not (REPO_ROOT / path).is_file():
        return path
    return REPO_ROOT / path


def matrix_configs(directory: Path = CONFIGS_DIR) -> list[Path]:
    """The matrix configs in a directory (YAML files with a top-level `matrix:`; not the catalogs)."""
    return sorted(p for p in directory.glob("*.yaml") if re.search(r"^matrix:", p.read_text(encoding="utf-8"), re.M))


def missing_config(path: Path) -> str:
    """Why a config path cannot be read, with the configs of configs/ to pick from (the closest first)."""
    names = by_closeness(path.name, [p.name for p in matrix_configs()])
    where = CONFIGS_DIR.relative_to(REPO_ROOT) if Path.cwd() == REPO_ROOT else CONFIGS_DIR
    problem = "not a file" if path.exists() else "file not found"
    return f"{problem}; the configs in {where}/: {listing(names)}"


def _override_key(text: str) -> list[str]:
    return text.split("=", 1)[0].strip().split(".")


def _has_path(data: Any, parts: list[str]) -> bool:
    node = data
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def blame_overrides(error: ConfigError, overrides: list[str], in_file: Any = None) -> ConfigError:
    """The error with the `--set` overrides that wrote its key (or a key inside or above it) named.

    An override that wrote the key or a key above it, or a key inside one the file does not have
    (`in_file`: the file's data before the overrides), is the error's source: `--set KEY=VALUE: key:
    message`; the file is not at fault. An override inside a key the file has (or may have: no
    `in_file`) is named after the message: `(set by --set ...)`."""
    where = error.key_path.split(".") if error.key_path else []
    if not where:
        return error
    sources, involved = [], []
    for text in overrides:
        parts = _override_key(text)
        if where[: len(parts)] == parts or (
            parts[: len(where)] == where and in_file is not None and not _has_path(in_file, where)
        ):
            sources.append(text)
        elif parts[: len(where)] == where:
            involved.append(text)
    if sources:
        return ConfigError(", ".join(f"--set {text}" for text in sources), error.key_path, error.message)
    if not involved:
        return error
    named = ", ".join(f"--set {text}" for text in involved)
    first, *rest = error.message.split("\n", 1)
    return ConfigError(error.source, error.key_path, "\n".join([f"{first} (set by {named})", *rest]))


def validate_references(config: CanaryConfig, source: str) -> None:
    """What the config points at must be there: a builtin model this project builds, a patch series file (and,
    for a cluster, the patched image `make images` builds from it), a trace workload's file, every line sound."""
    for index, model in enumerate(config.models):
        if is_builtin(model.source):
            why = unknown_builtin(model.source)
            if why is not None:
                raise ConfigError(source, f"models.{index}.source", why)
    workload = config.checks.throughput.workload
    if config.checks.throughput.enabled and workload.kind == "trace":  # relative paths: the working directory
        try:
            load_trace(Path(str(workload.trace_path)))
        except TraceError as exc:
            raise ConfigError(source, "checks.throughput.workload.trace_path", str(exc)) from None
    for key, image in config.images.items():
        if image.patches is None:
            continue
        series = find_series(image.patches)
        if series is None:
            raise ConfigError(
                source,
                f"images.{key}.patches",
                f"patch series {image.patches!r} not found (relative paths are read from the working directory "
                "or the repository root)",
            )
        try:
            read_series(series)
        except SeriesError as exc:
            raise ConfigError(source, f"images.{key}.patches", str(exc)) from None
        if config.target.kind == "kubernetes":  # a cluster pulls the patched ref: `make images` must build it
            problem = check_image(image.ref, image.patches)
            if problem:
                raise ConfigError(source, f"images.{key}.ref", problem)


def validate_against_catalog(config: CanaryConfig, catalog: Catalog, source: str) -> None:
    """Names in the config must exist in the catalog: unknown backends and dtypes are config errors."""
    known_backends = sorted(catalog.backends)
    known_dtypes = sorted({d for b in catalog.backends.values() for d in b.kv_cache_dtypes})
    for index, backend in enumerate(config.matrix.attention_backends):
        if backend not in catalog.backends:
            raise ConfigError(
                source,
                f"matrix.attention_backends.{index}",
                f"unknown backend {backend!r}; expected one of {listing(known_backends)}",
            )
    for index, extra in enumerate(config.matrix.include):
        if extra.backend.upper() not in catalog.backends:
            raise ConfigError(
                source,
                f"matrix.include.{index}.backend",
                f"unknown backend {extra.backend!r}; expected one of {listing(known_backends)}",
            )
    for index, dtype in enumerate(config.matrix.kv_cache_dtypes):
        if dtype not in known_dtypes:
            raise ConfigError(
                source,
                f"matrix.kv_cache_dtypes.{index}",
                f"unknown KV cache dtype {dtype!r}; expected one of {listing(known_dtypes)}",
            )
    if config.platform not in catalog.platforms:
        raise ConfigError(source, "platform", f"platform {config.platform!r} is not in the catalog")
    for index, model in enumerate(config.models):
        if model.family not in catalog.families:
            raise ConfigError(
                source,
                f"models.{index}.family",
                f"unknown KV family {model.family!r}; expected one of {listing(sorted(catalog.families))}",
            )
