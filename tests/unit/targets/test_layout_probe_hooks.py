"""The layout probe's hooking on stand-in vLLM classes (no engine): what it records on entry, at
allocation and after return, what it reads of a backend's declaration, and that a hooked call that
raises leaves its record and the same exception. The real engine: tests/integration/test_layout_probe.py."""

from __future__ import annotations

import json
import math
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from canary.targets.engine_site import layout_probe as probe


@dataclass(frozen=True)
class MultipleOf:  # vLLM's vllm.v1.attention.backend.MultipleOf has the same shape (pinned by tests/source)
    base: int


class FixedBackend:
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "fp8"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[int | MultipleOf]:
        return [32]

    @staticmethod
    def get_name() -> str:
        return "CPU_ATTN"

    @classmethod
    def is_mla(cls) -> bool:
        return False


class OldBackend:
    """A vLLM before get_supported_kernel_block_sizes took the spec, and without a dtype list."""

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:
        return [MultipleOf(16), 64]

    @staticmethod
    def get_name() -> str:
        return "FLASH_ATTN"


class Tensor:
    def __init__(self, *shape: int) -> None:
        self.shape = shape
        self.dtype = "torch.bfloat16"

    def stride(self) -> list[int]:
        out, step = [], 1
        for size in reversed(self.shape):
            out.insert(0, step)
            step *= size
        return out

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return 2


@dataclass
class Spec:
    block_size: int


@dataclass
class Group:
    layer_names: list[str]
    kv_cache_spec: Spec


@dataclass
class KVConfig:
    kv_cache_groups: list[Group]
    num_blocks: int


@dataclass
class AttnGroup:
    backend: type
    kv_cache_spec: Spec


@dataclass
class CacheConfig:
    cache_dtype: str = "auto"


@dataclass
class Runner:
    """initialize_kv_cache as V1 runs it: backends, kernel sizes, allocation, then NIXL registration."""

    backend: type = FixedBackend
    kernel: int = 128
    nixl: Any = None
    cache_config: CacheConfig = field(default_factory=CacheConfig)

    def initialize_kv_cache(self, kv_cache_config: KVConfig, is_profiling: bool = False) -> None:
        self.kv_cache_config = kv_cache_config
        spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
        self.attn_groups = [[AttnGroup(self.backend, spec)]]
        self._kernel_block_sizes = [self.kernel]
        caches = self.initialize_kv_cache_tensors(kv_cache_config, self._kernel_block_sizes)
        if self.nixl is not None and not is_profiling:
            self.nixl.register_kv_caches(caches)

    def initialize_kv_cache_tensors(self, kv_cache_config: KVConfig, kernel_block_sizes: list[int]) -> dict[str, Any]:
        ratio = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size // kernel_block_sizes[0]
        caches = {
            name: Tensor(kv_cache_config.num_blocks * ratio, 2, kernel_block_sizes[0], 64)
            for name in kv_cache_config.kv_cache_groups[0].layer_names
        }
        self.kv_caches = list(caches.values())
        return caches


class Worker:
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        raise ValueError("KV cache view cannot be partitioned into NIXL regions")

    def add_remote_agent(self, nixl_agent_meta: Any) -> None:  # a hook point too: all of them are here
        del nixl_agent_meta


def _hooked(tmp_path: Path) -> tuple[probe.Recorder, type[Runner], type[Worker]]:
    recorder = probe.Recorder(str(tmp_path))
    runner_cls = type("GPUModelRunner", (Runner,), {})
    worker_cls = type("NixlBaseConnectorWorker", (Worker,), {})
    runner_module = types.ModuleType(probe.RUNNER_V1)
    runner_module.GPUModelRunner = runner_cls  # type: ignore[attr-defined]
    nixl_module = types.ModuleType(probe.NIXL_BASE)
    nixl_module.NixlBaseConnectorWorker = worker_cls  # type: ignore[attr-defined]
    probe.install_hooks(recorder, runner_module)
    probe.install_hooks(recorder, nixl_module)
    return recorder, runner_cls, worker_cls


def _config() -> KVConfig:
    return KVConfig([Group(["layers.0.attn", "layers.1.attn"], Spec(128))], num_blocks=100)


def _written(tmp_path: Path) -> dict[str, Any]:
    (path,) = tmp_path.glob("layout.*.json")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def test_records_what_the_backend_declares_and_the_kernel_in_use(tmp_path: Path) -> None:
    _, runner_cls, _ = _hooked(tmp_path)
    runner_cls().initialize_kv_cache(_config())
    record = _written(tmp_path)
    assert record["schema_version"] == 2 and record["phase"] == "initialized"
    (group,) = record["kv_cache_groups"]
    assert (group["logical_block_size"], group["kernel_block_sizes"]) == (128, [128])
    assert group["declared"] == [
        {
            "backend": "CPU_ATTN",
            "class": f"{__name__}.FixedBackend",
            "kernel_block_sizes": [{"int": 32}],
            "kv_cache_dtypes": ["auto", "fp8"],
            "is_mla": False,
        }
    ]
    assert record["kv_cache_dtype"] == "auto"
    assert record["hooks"][f"{probe.RUNNER_V1}.GPUModelRunner.initialize_kv_cache_tensors"] == "ok"


def test_reads_multiple_of_and_a_declaration_without_the_spec_argument() -> None:
    facts = probe.declared_facts(OldBackend, Spec(128))
    assert facts["kernel_block_sizes"] == [{"multiple_of": 16}, {"int": 64}]
    assert "kv_cache_dtypes" not in facts and "is_mla" not in facts
    assert probe.size_facts(True) == {"unknown": "True"}


def test_a_registration_that_raises_leaves_the_allocated_layout(tmp_path: Path) -> None:
    """Fault 01's shape: NIXL raises inside initialize_kv_cache; the record says what was allocated
    and handed to NIXL, and the engine sees the very same exception."""
    _, runner_cls, worker_cls = _hooked(tmp_path)
    runner = runner_cls(kernel=32, nixl=worker_cls())
    with pytest.raises(ValueError, match="cannot be partitioned into NIXL regions"):
        runner.initialize_kv_cache(_config())
    record = _written(tmp_path)
    assert record["phase"] == "failed"
    assert record["kv_cache_groups"][0]["kernel_block_sizes"] == [32]
    assert record["kernel_views"][0]["shape"] == [400, 2, 32, 64] and record["kernel_views"][0]["grain"] == "kernel"
    assert record["nixl"]["input_views"][0]["shape"] == [400, 2, 32, 64]
    hooks = record["hooks"]
    assert hooks[f"{probe.NIXL_BASE}.NixlBaseConnectorWorker.register_kv_caches"].startswith(
        "raised: ValueError: KV cache view cannot be partitioned"
    )
    assert hooks[f"{probe.RUNNER_V1}.GPUModelRunner.initialize_kv_cache"].startswith("raised: ValueError")


def test_a_profile_run_records_nothing(tmp_path: Path) -> None:
    _, runner_cls, _ = _hooked(tmp_path)
    runner_cls().initialize_kv_cache(_config(), is_profiling=True)
    assert list(tmp_path.glob("layout.*.json")) == []


def test_entry_is_recorded_before_anything_is_allocated(tmp_path: Path) -> None:
    recorder = probe.Recorder(str(tmp_path))
    probe.record_runner_entry(recorder, Runner(), (_config(),), {})
    record = _written(tmp_path)
    assert record["phase"] == "entered" and record["num_blocks"] == 100
    assert record["kv_cache_groups"][0]["logical_block_size"] == 128
    assert record["kv_cache_groups"][0]["kernel_block_sizes"] == []


@dataclass
class SlidingWindowSpec:
    block_size: int
    sliding_window: int
    page_size_bytes: int = 8192


@dataclass
class MambaSpec:
    block_size: int

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError("shapes unknown")


def test_every_group_is_recorded_with_its_kind_window_and_page(tmp_path: Path) -> None:
    """A hybrid's groups (sliding window, full attention, Mamba state) each get their own record, and
    the runner's kernel list as it stands (shorter than the groups when one was skipped)."""
    _, runner_cls, _ = _hooked(tmp_path)
    config = KVConfig(
        [
            Group(["layers.0.attn"], SlidingWindowSpec(128, 64)),  # type: ignore[arg-type]
            Group(["layers.1.attn"], Spec(128)),
            Group(["layers.2.mixer"], MambaSpec(256)),  # type: ignore[arg-type]
        ],
        num_blocks=10,
    )
    runner_cls().initialize_kv_cache(config)
    groups = _written(tmp_path)["kv_cache_groups"]
    facts = [(g["kind"], g["sliding_window"], g["page_size_bytes"], g["logical_block_size"]) for g in groups]
    assert facts == [("sliding", 64, 8192, 128), ("other", None, None, 128), ("mamba", None, None, 256)]
    assert _written(tmp_path)["runner_kernel_block_sizes"] == [128]  # the stand-in runner sets one entry


def test_nixl_regions_are_recorded_per_group() -> None:
    worker = types.SimpleNamespace(
        region_group_ids=[0, 1, 1],
        region_num_blocks=[100, 100],
        region_mem_types=["DRAM", "DRAM", "DRAM"],
        region_names=["layers.0", "layers.1", "layers.2"],
    )
    regions = probe.region_facts(worker)
    assert regions is not None and [r["group_id"] for r in regions] == [0, 1, 1]
    assert [r["num_blocks"] for r in regions] == [100, 100, None]  # a shorter list is unknown, not guessed
    assert probe.region_facts(types.SimpleNamespace()) is None


def test_a_state_layers_view_is_tagged_with_its_group_kind(tmp_path: Path) -> None:
    _, runner_cls, _ = _hooked(tmp_path)
    config = KVConfig(
        [Group(["layers.0.attn"], Spec(128)), Group(["layers.1.mixer"], MambaSpec(128))],  # type: ignore[list-item]
        num_blocks=10,
    )
    runner_cls().initialize_kv_cache(config)
    views = _written(tmp_path)["kernel_views"]
    assert views and views[0]["first_layer"] == "layers.0.attn" and views[0]["kind"] == "other"
