"""The container target's weighted parent cgroup, on a stand-in /sys/fs/cgroup (a temp folder laid out as
cgroup v1 or v2; the real v1 hierarchy of this machine is used by tests/images/test_podman_container_target.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.targets.cgroup_weight import PARENT_NAME, WeightedParent, prepare, v1_shares, v2_weight


def _v1(root: Path, hierarchy: str = "cpu") -> Path:
    (root / hierarchy).mkdir(parents=True)
    (root / hierarchy / "cpu.shares").write_text("1024\n")
    return root


def _v2(root: Path, subtree: str = "cpuset cpu io memory pids") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text(subtree + "\n")
    return root


@pytest.mark.parametrize(("nice", "shares", "weight"), [(0, 1024, 100), (5, 336, 33), (10, 110, 11), (19, 15, 1)])
def test_the_weights_follow_the_kernels_step_of_a_quarter_per_nice(nice: int, shares: int, weight: int) -> None:
    assert (v1_shares(nice), v2_weight(nice)) == (shares, weight)


@pytest.mark.parametrize("hierarchy", ["cpu", "cpu,cpuacct"])
def test_v1_gets_a_parent_with_the_shares_of_the_nice(tmp_path: Path, hierarchy: str) -> None:
    root = _v1(tmp_path / "cgroup", hierarchy)
    parent = prepare(10, "cgroupfs", root)
    assert isinstance(parent, WeightedParent), parent
    assert parent.cli_value == f"/{PARENT_NAME}" and parent.version == 1
    assert (root / hierarchy / PARENT_NAME / "cpu.shares").read_text() == "110"
    assert prepare(10, "cgroupfs", root) == parent  # a second run reuses it


def test_v2_gets_a_parent_with_the_weight_and_the_cpu_controller_for_its_children(tmp_path: Path) -> None:
    root = _v2(tmp_path / "cgroup")
    parent = prepare(10, "cgroupfs", root)
    assert isinstance(parent, WeightedParent) and parent.version == 2, parent
    assert (root / PARENT_NAME / "cpu.weight").read_text() == "11"
    assert (root / PARENT_NAME / "cgroup.subtree_control").read_text() == "+cpu"


@pytest.mark.parametrize(
    ("nice", "manager", "layout", "why"),
    [
        (0, "cgroupfs", "v1", "nice is 0"),
        (10, "systemd", "v1", "manager is systemd, not cgroupfs"),
        (10, "", "v1", "manager is unknown"),
        (10, "cgroupfs", "v2-no-cpu", "cpu controller is not enabled"),
        (10, "cgroupfs", "none", "no cgroup v1 cpu hierarchy"),
        (10, "cgroupfs", "blocked", "cannot prepare"),
    ],
)
def test_where_no_parent_can_be_prepared_it_says_why_and_writes_nothing_else(
    tmp_path: Path, nice: int, manager: str, layout: str, why: str
) -> None:
    root = tmp_path / "cgroup"
    if layout == "v1":
        _v1(root)
    elif layout == "v2-no-cpu":
        _v2(root, subtree="memory pids")
    elif layout == "blocked":  # a file where the parent's folder would go
        _v1(root)
        (root / "cpu" / PARENT_NAME).write_text("")
    else:
        root.mkdir()
    before = sorted(str(p) for p in root.rglob("*"))
    parent = prepare(nice, manager, root)
    assert isinstance(parent, str) and why in parent, parent
    assert sorted(str(p) for p in root.rglob("*")) == before
