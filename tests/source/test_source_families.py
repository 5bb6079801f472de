"""The catalog's KV families (configs/backends.yaml `families`) are what vLLM's source says: every block
rewrite and constraint cites a text that is in the file it names, in the tree it names, and the backends
that serve a family exist, run on that platform and match the family's attention kind."""

from __future__ import annotations

import ast

import pytest

from canary.config.catalog import SourceFact, load_catalog
from canary.vllm_source.facts import method
from canary.vllm_source.tree import SourceTree

CATALOG = load_catalog()
FACTS = [
    (f"{name}:{fact.text[:40]}", fact)
    for name, family in CATALOG.families.items()
    for fact in [*(r.fact for r in family.block_rewrites), *family.facts]
]


@pytest.fixture(scope="module")
def trees(sdist: SourceTree, cpu_vllm: SourceTree) -> dict[str, SourceTree]:
    return {"sdist": sdist, "cpu": cpu_vllm}


@pytest.mark.parametrize("fact", [f for _, f in FACTS], ids=[i for i, _ in FACTS])
def test_every_family_fact_is_in_the_file_it_names(trees: dict[str, SourceTree], fact: SourceFact) -> None:
    tree = trees[fact.tree]
    assert tree.has(fact.path), f"{tree.label} has no {fact.path} (the catalog's families cite it)"
    assert fact.text in tree.read(fact.path), f"{tree.label} {fact.path} no longer says {fact.text!r}: {fact.means}"


def test_cpu_mla_forces_block_16_for_every_user_block(cpu_vllm: SourceTree) -> None:
    (rewrite,) = CATALOG.families["mla"].block_rewrites
    assert rewrite.to == 16 and rewrite.platforms == ["cpu"] and not rewrite.unless_at_least
    found = method(cpu_vllm, "vllm.platforms.cpu", "CpuPlatform", "check_and_update_config")
    assert found is not None, "vllm/platforms/cpu.py CpuPlatform.check_and_update_config is gone"
    body = ast.unparse(found[0])
    assert "cache_config.block_size = 16" in body, f"{found[1]} no longer sets block_size = 16 for CPU MLA"
    assert CATALOG.backend("CPU_MLA").kernel_block_sizes.allowed == [16]


def test_hybrids_only_raise_the_attention_block(cpu_vllm: SourceTree, sdist: SourceTree) -> None:
    for tree in (cpu_vllm, sdist):
        found = method(tree, "vllm.platforms.interface", "Platform", "_align_hybrid_block_size")
        assert found is not None, f"{tree.label}: vllm/platforms/interface.py Platform._align_hybrid_block_size is gone"
        body = ast.unparse(found[0])
        assert "if cache_config.block_size < attn_block_size:" in body, (
            f"{found[1]} no longer raises only a smaller block (the catalog's unless_at_least)"
        )
    for name in ("gdn-hybrid", "mamba-hybrid"):
        (rewrite,) = CATALOG.families[name].block_rewrites
        assert rewrite.unless_at_least and rewrite.to is None


@pytest.mark.parametrize("name", sorted(CATALOG.families))
def test_a_familys_backends_run_there_and_match_its_attention_kind(name: str) -> None:
    family = CATALOG.families[name]
    for platform, backends in family.backends.items():
        assert platform in CATALOG.platforms
        for backend in backends:
            info = CATALOG.backend(backend)
            assert platform in info.platforms, f"{name}: {backend} does not run on {platform}"
            assert info.mla == (name == "mla"), f"{name}: {backend} is {'an' if info.mla else 'no'} MLA backend"
