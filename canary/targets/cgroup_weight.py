"""A parent cgroup whose CPU weight ranks a container target's servers below the load client.

The local target starts each server in its own session at `target.local.nice` (and gives that
session's scheduler autogroup the same nice: canary.targets.processes.lower_session_priority), so the
load client sharing their cores wins them when it wakes. A container's processes are not in an
autogroup: the CLI puts each container in its own cpu cgroup under one parent (podman's
`libpod_parent`, docker's `docker`), and the scheduler ranks that parent against the client's
autogroup at equal weight, whatever the nice inside. Measured on 2 cores (2026-12-04, two-cell
paired runs of the container target with the helpers and the client on core 0): 71 and 76 of ~96
windows had the client's event loop lag past 50 ms; with the parent at the weight of nice 10, none
did (docs/operations/containers.md).

So the container target asks for a parent of its own, `vllm-canary`, at the weight of its servers'
nice, and passes `--cgroup-parent` to every `run`. That works where the CLI manages cgroups as plain
directories (`cgroupfs`, the podman default without systemd) and this process may write them (root).
Elsewhere (`systemd` manager, rootless, a read-only /sys) `prepare` says why not, and the target
leaves the containers where the CLI puts them and does not move their helpers (moving the helpers
and the client onto one core without the weight starves the client: the numbers above).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "vllm-canary"
V1_DEFAULT_SHARES = 1024
"""cpu.shares of a nice-0 task group (cgroup v1), and the kernel's weight of a nice-0 task."""
V2_DEFAULT_WEIGHT = 100
"""cpu.weight of a nice-0 group (cgroup v2; 1..10000)."""
NICE_STEP = 1.25
"""The kernel's weights fall by about 1.25x per nice step (nice 10: 1024 / 1.25**10 = 110)."""


@dataclass(frozen=True)
class WeightedParent:
    """A parent cgroup prepared for the containers: the `--cgroup-parent` value and what was written."""

    cli_value: str
    version: int
    weight_file: Path
    weight: int

    def to_json(self) -> dict[str, object]:
        """For Deployment.evidence."""
        return {"cgroup_parent": self.cli_value, "cgroup_version": self.version, str(self.weight_file): self.weight}


def v1_shares(nice: int) -> int:
    """cpu.shares (cgroup v1) that weigh a group like one task at `nice`."""
    return max(2, round(V1_DEFAULT_SHARES / NICE_STEP**nice))


def v2_weight(nice: int) -> int:
    """cpu.weight (cgroup v2) that weighs a group like one task at `nice`."""
    return max(1, round(V2_DEFAULT_WEIGHT / NICE_STEP**nice))


def prepare(nice: int, manager: str, root: Path = CGROUP_ROOT) -> WeightedParent | str:
    """Create (or reuse) the parent at the weight of `nice`; a sentence saying why not otherwise.

    manager: the CLI's cgroup manager as it reports it (`cgroupfs`, `systemd`). The parent is left in
    place after the run, empty, like the CLI's own parent, and reused by the next one."""
    if nice <= 0:
        return "target.local.nice is 0: the servers are not ranked below the client"
    if manager != "cgroupfs":
        return f"the container CLI's cgroup manager is {manager or 'unknown'}, not cgroupfs"
    if (root / "cgroup.controllers").is_file():
        return _prepare_v2(nice, root)
    for name in ("cpu", "cpu,cpuacct"):
        hierarchy = root / name
        if (hierarchy / "cpu.shares").is_file():
            return _write(hierarchy / PARENT_NAME, "cpu.shares", v1_shares(nice), version=1)
    return f"no cgroup v1 cpu hierarchy with cpu.shares under {root}"


def _prepare_v2(nice: int, root: Path) -> WeightedParent | str:
    controllers = (root / "cgroup.subtree_control").read_text().split()
    if "cpu" not in controllers:
        return f"cgroup v2: the cpu controller is not enabled for children of {root}"
    prepared = _write(root / PARENT_NAME, "cpu.weight", v2_weight(nice), version=2)
    if isinstance(prepared, WeightedParent):  # the containers' own cgroups below need the controller too
        with contextlib.suppress(OSError):
            (root / PARENT_NAME / "cgroup.subtree_control").write_text("+cpu")
    return prepared


def _write(directory: Path, file_name: str, weight: int, *, version: int) -> WeightedParent | str:
    try:
        directory.mkdir(exist_ok=True)
        (directory / file_name).write_text(str(weight))
    except OSError as error:
        return f"cannot prepare {directory} ({error.strerror or error})"
    return WeightedParent(f"/{PARENT_NAME}", version, directory / file_name, weight)
