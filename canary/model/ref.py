"""Model sources in a config (`models[].source`): `builtin:NAME`, a local directory, or a hub id.

`builtin:NAME` names a model this project builds (`make model` links it at .cache/models/NAME).
It exists only where that cache does: the local target resolves it, the Kubernetes values refuse it.
A NAME that is neither the one `make model` builds nor already in the cache is unknown (a config
error, `unknown_builtin`); a known one that is not built yet is a run-time condition (`resolve_model`).
Stdlib only (the controller imports it without torch).
"""

from __future__ import annotations

from pathlib import Path

from canary.errors import CanaryError
from canary.paths import CACHE_DIR

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny",)
"""The builtin models this project builds: `make model` links the tiny model as builtin:tiny
(mk/model.mk MODEL_NAME; another MODEL_NAME links another name, which `known_builtins` finds)."""


def is_builtin(source: str) -> bool:
    """Whether a model source names a model this project builds (`builtin:NAME`)."""
    return source.startswith(BUILTIN_PREFIX)


def builtin_dir(source: str, cache_dir: Path = CACHE_DIR) -> Path:
    """`cache_dir/models/NAME` for `builtin:NAME`, built or not."""
    name = source.removeprefix(BUILTIN_PREFIX)
    if not is_builtin(source) or not name or "/" in name or name in (".", ".."):
        raise CanaryError(f"model source {source!r} is not builtin:NAME (a plain name, no '/')")
    return cache_dir / "models" / name


def known_builtins(cache_dir: Path = CACHE_DIR) -> list[str]:
    """The builtin model names to offer: BUILTIN_MODELS and the names linked in cache_dir/models
    (`make model MODEL_NAME=...`); a build's own content-hash directory is accepted too, not offered."""
    models = cache_dir / "models"
    entries = list(models.iterdir()) if models.is_dir() else []
    linked = [p.name for p in entries if p.is_symlink() and not p.name.startswith(".")]
    return sorted({*BUILTIN_MODELS, *linked})


def unknown_builtin(source: str, cache_dir: Path = CACHE_DIR) -> str | None:
    """Why a `builtin:NAME` source names no model this project builds (None: it does, built or not)."""
    try:
        directory = builtin_dir(source, cache_dir)
    except CanaryError as exc:
        return str(exc)
    known = known_builtins(cache_dir)
    if directory.name in known or directory.is_dir():
        return None
    offered = ", ".join(BUILTIN_PREFIX + name for name in known)
    return (
        f"unknown builtin model {source!r}: builtin:NAME is a model this project builds, one of {offered} "
        f"(`make model` builds {BUILTIN_PREFIX}{BUILTIN_MODELS[0]}); a hub model is named by its id, a local one "
        "by its directory"
    )


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
