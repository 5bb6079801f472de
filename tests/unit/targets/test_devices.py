"""canary.targets.devices: which GPUs each engine of a cell gets, and the container runtime flags for them."""

from __future__ import annotations

import pytest

from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.devices import (
    Pool,
    assign,
    cell_devices,
    check_pool,
    container_device_args,
    most_needed,
    resolve_pool,
    visible_devices_env,
)
from canary.targets.host_gpus import parse_indices

ONE_BOX = CONFIGS_DIR / "one-box-8gpu.yaml"
AGG = "agg.flashinfer.b128.auto.v2.baseline"
PD = "pd.flashinfer.p128-d128.auto.v2.baseline"


def _config(*overrides: str, path: object = ONE_BOX) -> tuple[CanaryConfig, dict[str, Cell]]:
    config = load_config(str(path), list(overrides))
    return config, {c.id: c for c in plan(config).planned()}


def test_pd_engines_get_disjoint_gpus_from_the_start_of_the_pool() -> None:
    config, cells = _config()
    pool = Pool(tuple(range(8)))
    assert cell_devices(cells[PD], config, pool, source="x") == {"prefill": (0,), "decode": (1,)}
    assert cell_devices(cells[AGG], config, pool, source="x") == {"aggregated": (0,)}


def test_tensor_parallel_engines_get_that_many_gpus_each_in_pool_order() -> None:
    config, cells = _config("models.0.tensor_parallel_size=2")
    pool = Pool((7, 6, 5, 4, 3))
    assert cell_devices(cells[PD], config, pool, source="x") == {"prefill": (7, 6), "decode": (5, 4)}
    assert cell_devices(cells[AGG], config, pool, source="x") == {"aggregated": (7, 6)}
    config, cells = _config("models.0.tensor_parallel_size=4")
    assert cell_devices(cells[PD], config, Pool(tuple(range(8))), source="x") == {
        "prefill": (0, 1, 2, 3),
        "decode": (4, 5, 6, 7),
    }


def test_a_pool_smaller_than_the_cell_is_a_config_error_naming_both() -> None:
    config, cells = _config("models.0.tensor_parallel_size=2")
    with pytest.raises(ConfigError) as raised:
        cell_devices(cells[PD], config, Pool((0, 1)), source="box.yaml")
    assert raised.value.exit_code == 2
    assert str(raised.value) == (
        f"box.yaml: target.devices.gpus: cell {PD} needs 4 GPUs (prefill 2 + decode 2), "
        "target.devices.gpus has 2 (0, 1)"
    )
    assert cell_devices(cells[AGG], config, Pool((0, 1)), source="box.yaml") == {"aggregated": (0, 1)}


def test_check_pool_names_the_cell_that_needs_the_most() -> None:
    config, cells = _config()
    dense = [c for c in cells.values() if c.model == "qwen3-0-6b"]  # the cross product: TP1 pairs
    assert most_needed(dense, config) == 2
    check_pool(dense, config, Pool((0, 1)), source="x")  # fits: nothing raised
    with pytest.raises(ConfigError, match=r"cell pd\.flashinfer\.p16-d16\.auto\.v2\.baseline needs 2 GPUs"):
        check_pool(dense, config, Pool((0,)), source="x")
    aggregated = [c for c in dense if c.topology == "aggregated"]
    check_pool(aggregated, config, Pool((0,)), source="x")
    # The box's KV family cells include upstream's 2p2d shape (gemma3-4b-hma): 4 GPUs, the most of any cell.
    planned = list(cells.values())
    assert most_needed(planned, config) == 4
    check_pool(planned, config, Pool((0, 1, 2, 3)), source="x")
    with pytest.raises(
        ConfigError,
        match=r"cell gemma3_4b_hma\.pd\.flash_attn\.p128-d128\.tp2p2d\.auto\.v2\.baseline "
        r"needs 4 GPUs \(prefill 2 \+ decode 2\)",
    ):
        check_pool(planned, config, Pool((0, 1, 2)), source="x")


def test_cpu_cells_get_no_devices() -> None:
    config, cells = _config(path=CONFIGS_DIR / "cpu-default.yaml")
    for cell in cells.values():
        assert cell_devices(cell, config, Pool(()), source="x") == {}
    assert most_needed(cells.values(), config) == 0
    check_pool(cells.values(), config, Pool(()), source="x")


def test_assign_keeps_the_role_order_and_hands_out_nothing_twice() -> None:
    got = assign("c", {"prefill": 3, "decode": 2}, Pool((9, 8, 7, 6, 5, 4)), source="x")
    assert got == {"prefill": (9, 8, 7), "decode": (6, 5)}
    assert not set(got["prefill"]) & set(got["decode"])


def test_all_resolves_to_the_listed_gpus_and_a_list_is_taken_as_given() -> None:
    assert resolve_pool([4, 5], None) == Pool((4, 5))
    assert resolve_pool([4, 5], (0, 1, 2)) == Pool((4, 5))
    listed = resolve_pool("all", (0, 1, 2))
    assert listed is not None and listed.gpus == (0, 1, 2) and "nvidia-smi" in listed.describe()
    assert resolve_pool("all", None) is None


def test_nvidia_smi_index_listing_is_parsed() -> None:
    assert parse_indices("0\n1\n2\n3\n") == (0, 1, 2, 3)
    assert parse_indices("") == ()
    assert parse_indices("No devices were found\n") is None


@pytest.mark.parametrize(
    ("devices", "docker", "podman"),
    [
        ((0, 1), ["--gpus", '"device=0,1"'], ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]),
        ((5,), ["--gpus", '"device=5"'], ["--device", "nvidia.com/gpu=5"]),
        ((), [], []),
    ],
)
def test_container_device_args(devices: tuple[int, ...], docker: list[str], podman: list[str]) -> None:
    assert container_device_args("docker", devices) == docker
    assert container_device_args("podman", devices) == podman


def test_visible_devices_env_numbers_gpus_as_nvidia_smi_does() -> None:
    assert visible_devices_env((2, 3)) == {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[]", "empty GPU list"),
        ("[0, 1, 1]", r"GPU\(s\) \[1\] listed twice"),
        ("[-1]", "greater than or equal to 0"),
        ("some", r"expected a list of GPU indices, e.g. \[0, 1\], or all; got 'some'"),
    ],
)
def test_bad_pools_are_config_errors_on_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(str(ONE_BOX), [f"target.devices.gpus={value}"])
    assert raised.value.key_path.startswith("target.devices.gpus")
