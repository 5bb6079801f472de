"""Model sources in a config (`models[].source`): `builtin:NAME`, a local directory, or a hub id.

`builtin:NAME` names a model this project builds (`make model` links it at .cache/models/NAME).
It exists only where that cache does: the local target resolves it, the Kubernetes values refuse it.
Stdlib only (the controller imports it without torch).
"""

from __future__ import annotations

from pathlib import Path

from canary.errors import CanaryError
from canary.paths import CACHE_DIR

BUILTIN_PREFIX = "builtin:"


def is_builtin(source: str) -> bool:
    """Whether a model source names a model this project builds (`builtin:NAME`)."""
    return source.startswith(BUILTIN_PREFIX)


def builtin_dir(source: str, cache_dir: Path = CACHE_DIR) -> Path:
    """`cache_dir/models/NAME` for `builtin:NAME`, built or not."""
    name = source.removeprefix(BUILTIN_PREFIX)
    if not is_builtin(source) or not name or "/" in name or name in (".", ".."):
        raise CanaryError(f"model source {source!r} is not builtin:NAME (a plain name, no '/')")
    return cache_dir / "models" / name


def local_model_dir(source: str, cache_dir: Path = CACHE_DIR) -> Path | None:
    """The local directory of a model source (builtin or an existing directory), None for a hub id."""
    if is_builtin(source):
        return builtin_dir(source, cache_dir)
    path = Path(source).expanduser()
    return path if path.is_dir() else None


def resolve_model(source: str, cache_dir: Path = CACHE_DIR) -> str:
    """What an engine is given: a built builtin's or an existing directory's absolute path, else the hub id.

    A builtin that is not built yet is an error (it names `make model`)."""
    directory = local_model_dir(source, cache_dir)
    if directory is None:
        return source
    if is_builtin(source) and not (directory / "config.json").exists():
        raise CanaryError(f"model {source} is not built ({directory} has no config.json): run `make model` first")
    return str(directory.resolve())
