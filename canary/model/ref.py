"""Model sources in a config (`models[].source`): `builtin:NAME`, a local directory, or a hub id.

`builtin:NAME` names a model this project builds (`make model` links it at .cache/models/NAME).
It exists only where that cache does: the local target resolves it, the Kubernetes values refuse it.
A NAME that is neither the one `make model` builds nor already in the cache is unknown (a config
error, `unknown_builtin`); a known one that is not built yet is a run-time condition (`resolve_model`).
A hub id (ORG/NAME) is served from a Hugging Face cache already on the machine (`target.hf_home`):
the canary downloads nothing, engines run offline, and a model the cache lacks is an error that
names the download command (`hub_model_missing`).
Stdlib only (the controller imports it without torch).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from canary.errors import CanaryError
from canary.paths import CACHE_DIR

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("tiny", "tiny-gemma3", "tiny-deepseek-v3", "tiny-qwen3-next", "tiny-nemotron-h")
"""The builtin models this project builds: `make model` links the tiny model as builtin:tiny
(mk/model.mk MODEL_NAME; another MODEL_NAME links another name, which `known_builtins` finds),
`make model-families` the KV family models (canary/model/family_params.py FAMILY_NAMES; a unit test
keeps the two lists equal)."""


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


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
"""ORG/NAME as the Hugging Face hub spells repository ids."""


def is_hub_id(source: str) -> bool:
    """Whether a model source is a hub id (ORG/NAME) and not a builtin or an existing directory."""
    return not is_builtin(source) and local_model_dir(source) is None and bool(HUB_ID.match(source))


def hf_home(configured: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face cache root: the configured one, else $HF_HOME, else ~/.cache/huggingface."""
    env = os.environ if environ is None else environ
    text = configured or env.get("HF_HOME") or "~/.cache/huggingface"
    return Path(text).expanduser().absolute()


def hub_repo_dir(home: Path, repo_id: str) -> Path:
    """Where the hub cache keeps a model: <HF_HOME>/hub/models--ORG--NAME."""
    return home / "hub" / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(home: Path, repo_id: str) -> Path | None:
    """The snapshot an offline engine loads for a hub id: the one refs/main names, with a config.json
    (what `huggingface-cli download ORG/NAME` leaves); None when the cache lacks it."""
    repo = hub_repo_dir(home, repo_id)
    try:
        commit = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / commit
    return snapshot if commit and (snapshot / "config.json").is_file() else None


def hub_model_missing(source: str, home: Path) -> str | None:
    """Why a model source cannot be served from this machine (None: it can, or it is a builtin, whose
    build `resolve_model` checks). A hub id must be in the cache; any other text must be a directory."""
    if is_builtin(source) or local_model_dir(source) is not None:
        return None
    if not HUB_ID.match(source):
        return f"model source {source!r} is neither a directory nor a hub id (ORG/NAME)"
    if cached_snapshot(home, source) is not None:
        return None
    return (
        f"model {source} is not in the Hugging Face cache {home} (no {hub_repo_dir(home, source)}/snapshots/<refs/main>"
        f"/config.json) and nothing downloads it: run `HF_HOME={home} huggingface-cli download {source}` on a "
        f"machine with network (then copy or mount that cache here and set target.hf_home), or set models[].source "
        f"to a local directory"
    )
