"""Which GPUs each engine of a cell gets from the device pool (`target.devices`): pure functions, no I/O.

One cell runs at a time, so every cell is handed GPUs from the start of the pool: each engine as many
as its tensor-parallel size (canary.plan.waves.engine_gpus), in start order, so prefill and decode of
a P/D pair never share a GPU (prefill [0], decode [1] with TP 1; prefill [0, 1], decode [2, 3] with
TP 2). A cell that needs more than the pool holds is a ConfigError (exit 2) before anything starts.
CPU platforms get no devices.

The local target turns an engine's devices into its environment (`visible_devices_env`); a container
target passes them to the container runtime (`container_device_args`) and sets no CUDA_VISIBLE_DEVICES
inside, where the runtime renumbers the GPUs it exposes from 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from canary.config import CanaryConfig
from canary.core.words import listing
from canary.errors import CanaryError, ConfigError
from canary.plan.cell import Cell
from canary.plan.waves import engine_gpus

GPUS_KEY = "target.devices.gpus"
ContainerCli = Literal["docker", "podman"]
Devices = tuple[int, ...]


@dataclass(frozen=True)
class Pool:
    """The GPUs engines may use, in hand-out order, and where that list came from (for messages)."""

    gpus: Devices
    origin: str = GPUS_KEY
    """`target.devices.gpus` (a list in the config), or how `all` was resolved (nvidia-smi)."""

    def describe(self) -> str:
        """`target.devices.gpus has 2 ([0, 1])`-style text for an error."""
        return f"{self.origin} has {len(self.gpus)} ({listing(self.gpus)})"


def resolve_pool(setting: Sequence[int] | str, listed: Sequence[int] | None) -> Pool | None:
    """The pool of a `target.devices.gpus` setting; `listed`: the GPUs the machine shows (nvidia-smi), None
    when unknown. A list is taken as given; `all` is what the machine shows (None while that is unknown)."""
    if not isinstance(setting, str):
        return Pool(tuple(setting))
    if listed is None:
        return None
    return Pool(tuple(listed), f"{GPUS_KEY} (all: the GPUs nvidia-smi lists)")


def assign(cell_id: str, needs: Mapping[str, int], pool: Pool, *, source: str) -> dict[str, Devices]:
    """Disjoint GPUs for each role of a cell, in the order of `needs` ({role: GPUs}), from the pool's start."""
    total = sum(needs.values())
    if total > len(pool.gpus):
        parts = " + ".join(f"{role} {count}" for role, count in needs.items())
        raise ConfigError(source, GPUS_KEY, f"cell {cell_id} needs {total} GPUs ({parts}), {pool.describe()}")
    out: dict[str, Devices] = {}
    start = 0
    for role, count in needs.items():
        out[role] = pool.gpus[start : start + count]
        start += count
    return out


def cell_needs(cell: Cell, config: CanaryConfig) -> dict[str, int]:
    """GPUs each engine role of a cell needs ({} on a CPU platform)."""
    return {} if config.platform == "cpu" else engine_gpus(cell, config)


def cell_devices(cell: Cell, config: CanaryConfig, pool: Pool, *, source: str) -> dict[str, Devices]:
    """The GPUs of each engine role of a cell ({} on a CPU platform); ConfigError when the pool is too small."""
    needs = cell_needs(cell, config)
    return assign(cell.id, needs, pool, source=source) if needs else {}


def check_pool(cells: Iterable[Cell], config: CanaryConfig, pool: Pool, *, source: str) -> None:
    """ConfigError naming the cell that needs the most GPUs when it needs more than the pool holds."""
    needy = max(cells, key=lambda c: sum(cell_needs(c, config).values()), default=None)
    if needy is not None:
        cell_devices(needy, config, pool, source=source)


def most_needed(cells: Iterable[Cell], config: CanaryConfig) -> int:
    """The most GPUs any of the cells needs at once (0: none, e.g. on CPU)."""
    return max((sum(cell_needs(c, config).values()) for c in cells), default=0)


def visible_devices_env(devices: Devices) -> dict[str, str]:
    """What a process started on this machine needs to see exactly these GPUs, numbered as nvidia-smi does."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def container_device_args(cli: ContainerCli, devices: Devices) -> list[str]:
    """The container runtime flags that expose exactly these host GPUs ([] for none).

    docker: `--gpus '"device=0,1"'` (the NVIDIA container toolkit; the quotes are part of the value, or
    docker splits it at the comma). podman: one CDI `--device nvidia.com/gpu=N` per GPU (needs
    `nvidia-ctk cdi generate`)."""
    if not devices:
        return []
    if cli == "docker":
        return ["--gpus", f'"device={",".join(str(d) for d in devices)}"']
    if cli == "podman":
        return [arg for d in devices for arg in ("--device", f"nvidia.com/gpu={d}")]
    raise CanaryError(f"unknown container cli {cli!r}: docker or podman")
