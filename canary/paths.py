"""Where the project's own files live, resolved once so every module agrees."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS_DIR = REPO_ROOT / "configs"
BACKENDS_CATALOG = CONFIGS_DIR / "backends.yaml"
SIGNATURES_CATALOG = CONFIGS_DIR / "signatures.yaml"
CACHE_DIR = REPO_ROOT / ".cache"
DEFAULT_ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
