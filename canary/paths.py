"""Where the project's own files live, resolved once so every module agrees.

In a checkout, REPO_ROOT is the repository (configs/, docker/, helm/ beside canary/). An installed
wheel (`pip install .`) has no repository: its build (setup.py) copies the BUNDLED paths into the
package as canary/_data/, laid out as in the repository, and REPO_ROOT is that folder; the cache then
lives under $XDG_CACHE_HOME/vllm-canary (~/.cache/vllm-canary), since site-packages is no place to write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_ROOT = PACKAGE_DIR / "_data"
BUNDLED: tuple[str, ...] = (
    "configs",
    "docker/images.yaml",
    "docker/patches",
    "docker/podman",
    "docker/apply-series.sh",
    "helm/vllm-pd",
    "requirements/engine.txt",
)
"""Repository paths the controller reads at run time, relative to REPO_ROOT: what a wheel carries."""


def _checkout(package_dir: Path) -> Path | None:
    """The repository around the package, if it runs from one (configs/ beside canary/)."""
    root = package_dir.parent
    return root if (root / "configs" / "backends.yaml").is_file() else None


def _user_cache(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-canary"


CHECKOUT = _checkout(PACKAGE_DIR)
INSTALLED = CHECKOUT is None
"""True when the package runs from an installed wheel, not a checkout."""
REPO_ROOT = CHECKOUT if CHECKOUT is not None else BUNDLED_ROOT
CONFIGS_DIR = REPO_ROOT / "configs"
BACKENDS_CATALOG = CONFIGS_DIR / "backends.yaml"
SIGNATURES_CATALOG = CONFIGS_DIR / "signatures.yaml"
CACHE_DIR = REPO_ROOT / ".cache" if CHECKOUT is not None else _user_cache(os.environ)
DEFAULT_ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
