"""The GPU configs tell the true story, pinned to the upstream source (sdists of .cache/sdist):

- seed-42846: 0.21.0 has the crash and lacks the fix, the fix series brings it, the baseline's
  error text is what the signature catalog classifies, and each image is expected to be caught by
  the check the config names;
- DeepSeek-V4 as 0.33.0 runs it: the backend name, block size and KV dtype the config asks for are
  the ones the engine reports, and the storage block follows from the compress ratio;
- the storage-block overrun of 0.22.1 and its fix, expected on Model Runner V2 only.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from functools import cache
from pathlib import Path

import pytest

from canary.config import CanaryConfig, CompressedCache
from canary.config.load import load_config, validate_config
from canary.plan.cell import RISK_COMPRESSED_CACHE, Cell
from canary.plan.matrix import plan
from canary.targets.signatures import classify

REPO = Path(__file__).resolve().parents[2]
SDIST_DIR = REPO / ".cache" / "sdist"
CONFIGS = REPO / "configs"
PATCHES = REPO / "docker" / "patches"
ATTN_UTILS = "vllm/v1/worker/gpu/attn_utils.py"
NIXL_WORKER = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/worker.py"


WANTED = {
    "0.21.0": [
        ATTN_UTILS,
        NIXL_WORKER,
        "vllm/v1/worker/gpu/block_table.py",
        "vllm/v1/worker/gpu/model_runner.py",
        "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py",
    ],
    "0.22.1": [ATTN_UTILS, "vllm/v1/kv_cache_interface.py"],
    "0.33.0": [
        ATTN_UTILS,
        "tests/models/registry.py",
        "vllm/models/deepseek_v4/sparse_mla.py",
        "vllm/models/deepseek_v4/attention.py",
    ],
}


@cache
def _sources(release: str) -> dict[str, str]:
    """The WANTED files of a release, read in one pass over its sdist."""
    path = SDIST_DIR / f"vllm-{release}.tar.gz"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make k8s-tools` (it fetches every base release's sdist)")
    prefix = f"vllm-{release}/"
    wanted = {prefix + member for member in WANTED[release]}
    found: dict[str, str] = {}
    with tarfile.open(path, "r:gz") as archive:
        for info in archive:
            if info.name in wanted:
                handle = archive.extractfile(info)
                assert handle is not None
                found[info.name[len(prefix) :]] = handle.read().decode()
    assert set(found) == set(WANTED[release]), f"missing from vllm {release}: {set(WANTED[release]) - set(found)}"
    return found


def _source(release: str, member: str) -> str:
    return _sources(release)[member]


def _patched(release: str, series: Path, members: list[str], tmp_path: Path) -> Path:
    """The members of a release with a series applied by docker/apply-series.sh (GNU patch, no fuzz)."""
    tree = tmp_path / f"vllm-{release}"
    for member in members:
        (tree / member).parent.mkdir(parents=True, exist_ok=True)
        (tree / member).write_text(_source(release, member))
    done = subprocess.run(
        [
            str(REPO / "docker" / "apply-series.sh"),
            "--apply",
            "--tool",
            "patch",
            "--series",
            str(series),
            "--tree",
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return tree


def _by_image(cells: list[Cell], **axes: object) -> dict[str, Cell]:
    chosen = [c for c in cells if all(getattr(c, k) == v for k, v in axes.items())]
    return {c.image: c for c in chosen}


# --------------------------------------------------------------------------- seed 42846


def test_0_21_0_lacks_the_fix_and_0_22_1_has_it() -> None:
    assert "prepare_kernel_block_sizes" not in _source("0.21.0", ATTN_UTILS)
    assert "kernel_block_sizes = prepare_kernel_block_sizes(" in _source("0.22.1", ATTN_UTILS)


def test_the_fix_series_brings_the_kernel_grain_to_0_21_0(tmp_path: Path) -> None:
    members = [
        ATTN_UTILS,
        "vllm/v1/worker/gpu/block_table.py",
        "vllm/v1/worker/gpu/model_runner.py",
        "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py",
    ]
    tree = _patched("0.21.0", PATCHES / "seed-42846-fix" / "series", members, tmp_path)
    text = (tree / ATTN_UTILS).read_text()
    assert "kernel_block_sizes = prepare_kernel_block_sizes(kv_cache_config, attn_groups)" in text
    assert "num_blocks *= kv_cache_spec.block_size // kernel_block_size" in text
    header = (PATCHES / "seed-42846-fix" / "series").read_text()
    assert "fba010dd74e2f94e4f7223b164ec9097d1b8a6af" in header and "2026-05-19" in header


def test_the_workaround_skips_the_nixl_kernel_split_under_mrv2_only(tmp_path: Path) -> None:
    tree = _patched("0.21.0", PATCHES / "seed-42846-nixl-workaround" / "series", [NIXL_WORKER], tmp_path)
    text = (tree / NIXL_WORKER).read_text()
    body = text[text.index("def _sync_block_size_with_kernel") : text.index("def _nixl_handshake")]
    guard = body.index("if envs.VLLM_USE_V2_MODEL_RUNNER:")
    assert guard < body.index("if self.block_size != kernel_block_size:")
    assert "self._physical_blocks_per_logical_kv_block = 1\n            return" in body


def test_the_baseline_crash_text_is_classified_as_the_expected_signature() -> None:
    """The message 0.21.0's NIXL worker raises when the MRV2 cache has logical-grain blocks."""
    source = _source("0.21.0", NIXL_WORKER)
    literal = re.search(
        r'raise AssertionError\(\s*"(All kv cache tensors must have the same number of )"\s*f"(blocks;)', source
    )
    assert literal, "the registration assertion moved: update the signature and this test"
    line = f"AssertionError: {literal.group(1)}{literal.group(2)} layer=model.layers.0.attn, expected_num_blocks=3626"
    assert classify({"prefill": line}).failure_class == "nixl-registration-mismatch"
    config = load_config(CONFIGS / "seed-42846.yaml")
    baseline = next(e for e in config.matrix.expectations if e.match.image == "baseline" and e.expect == "startup-fail")
    assert baseline.failure_class == "nixl-registration-mismatch"


def test_seed_42846_says_which_check_catches_which_image() -> None:
    config = load_config(CONFIGS / "seed-42846.yaml")
    cells = list(plan(config).cells)
    assert all(c.status == "planned" for c in cells)
    assert config.images["baseline"].ref == "vllm/vllm-openai:v0.21.0"
    seed = _by_image(cells, backend="FLASHINFER", prefill_block_size=128, runner="v2", topology="pd-nixl")
    assert seed["baseline"].expect is not None and seed["baseline"].expect.expect == "startup-fail"
    workaround = seed["workaround"].expect
    assert workaround is not None and workaround.expect == "check-fail" and workaround.failing_checks == ["startup"]
    assert seed["fix"].expect is not None and seed["fix"].expect.expect == "pass"
    assert seed["baseline"].kernel_block_prefill == 64 and "kernel-split" in seed["baseline"].risks
    # The controls carry no expectation: they must pass on every image.
    for cell in cells:
        if cell.backend == "FLASH_ATTN" or cell.runner == "v1" or cell.prefill_block_size == 64:
            assert cell.expect is None, cell.id


def _seed_free(config: CanaryConfig, cell: Cell) -> bool:
    """No seed failure expected of a cell: none, or `pass`; a KV family model's cell (include-only, issue 40) may
    carry upstream's xfail or a hybrid's block rewrite, which are check failures of a serving engine, never the
    seeds' startup failures."""
    if cell.expect is None or cell.expect.expect == "pass":
        return True
    family_cell = next(m for m in config.models if m.name == cell.model).include_only
    return family_cell and cell.expect.expect == "check-fail"


def test_the_0_33_0_matrix_expects_no_seed_failure() -> None:
    config = load_config(CONFIGS / "h200-mrv2-pd.yaml")
    cells = plan(config).planned()
    assert all(_seed_free(config, cell) for cell in cells)
    dense = [c for c in cells if not next(m for m in config.models if m.name == c.model).include_only]
    assert dense and all(c.expect is None or c.expect.expect == "pass" for c in dense)
    assert config.images["baseline"].ref == "vllm/vllm-openai:v0.33.0"


# --------------------------------------------------------------------------- DeepSeek-V4 on 0.33.0


def test_deepseek_v4_asks_for_what_0_33_0_runs() -> None:
    config = load_config(CONFIGS / "deepseek-v4.yaml")
    (model,) = config.models
    registry = _source("0.33.0", "tests/models/registry.py")
    example = re.search(r'"DeepseekV4ForCausalLM": _HfExamplesInfo\(\s*"([^"]+)"', registry)
    assert example and model.source == example.group(1) == "deepseek-ai/DeepSeek-V4-Flash"

    sparse = _source("0.33.0", "vllm/models/deepseek_v4/sparse_mla.py")
    name = re.search(r'def get_name\(\) -> str:\s*return "(\w+)"', sparse)
    blocks = re.search(r"def get_supported_kernel_block_sizes\(kv_cache_spec=None\)[^:]*:\s*return \[(\d+)\]", sparse)
    assert name and blocks
    assert config.matrix.attention_backends == [name.group(1)] == ["FLASHMLA_SPARSE_DSV4"]
    assert config.matrix.prefill_block_sizes == [int(blocks.group(1))] == [256]

    attention = _source("0.33.0", "vllm/models/deepseek_v4/attention.py")
    resolve = attention[
        attention.index("def _resolve_dsv4_kv_cache_dtype") : attention.index("class DeepseekV4Attention")
    ]
    assert 'if kv_cache_dtype == "auto":\n            kv_cache_dtype = "fp8"' in resolve
    assert 'cache_config.cache_dtype = "fp8_ds_mla"' in resolve
    assert config.matrix.kv_cache_dtypes == ["fp8_ds_mla"]


def test_deepseek_v4_models_the_storage_block_from_the_compress_ratio() -> None:
    config = load_config(CONFIGS / "deepseek-v4.yaml")
    assert config.models[0].compressed_cache == CompressedCache(compress_ratio=128)
    for cell in plan(config).planned():
        assert (cell.storage_block_prefill, cell.storage_block_decode) == (2, 2)
        assert RISK_COMPRESSED_CACHE in cell.risks
        assert cell.expect is None or cell.expect.expect == "pass"


def test_a_block_size_that_is_no_multiple_of_the_compress_ratio_is_impossible() -> None:
    data = {
        "version": 1,
        "name": "cc",
        "platform": "sm90",
        "models": [{"name": "m", "source": "x/y", "attention": "mla", "compressed_cache": {"compress_ratio": 128}}],
        "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
        "matrix": {"attention_backends": ["FLASHMLA"], "prefill_block_sizes": [64, 128]},
    }
    cells = {c.prefill_block_size: c for c in plan(validate_config(data, "cc")).cells if c.topology == "aggregated"}
    assert cells[64].status == "skipped" and "not a multiple of m's compress_ratio 128" in str(cells[64].reason)
    assert cells[128].status == "planned" and cells[128].storage_block_prefill == 1
    assert CompressedCache(compress_ratio=1).storage_block_size(64) == 64
    uncompressed = {**data, "models": [{**data["models"][0], "compressed_cache": {"compress_ratio": 1}}]}
    assert all(RISK_COMPRESSED_CACHE not in c.risks for c in plan(validate_config(uncompressed, "cc")).cells)


# --------------------------------------------------------------------------- DeepSeek-V4 seed on 0.22.1


def test_0_22_1_sizes_compressed_caches_by_block_size_and_the_fix_by_storage(tmp_path: Path) -> None:
    interface = _source("0.22.1", "vllm/v1/kv_cache_interface.py")
    assert "def storage_block_size(self) -> int:\n        return self.block_size // self.compress_ratio" in interface
    bug = "num_blocks *= kv_cache_spec.block_size // kernel_block_size"
    assert bug in _source("0.22.1", ATTN_UTILS)
    assert bug not in _source("0.33.0", ATTN_UTILS)
    tree = _patched("0.22.1", PATCHES / "seed-dsv4-storage-block" / "series", [ATTN_UTILS], tmp_path)
    text = (tree / ATTN_UTILS).read_text()
    guard = text.index("if kv_cache_spec.storage_block_size != kv_cache_spec.block_size:")
    assert guard < text.index(bug) and "kernel_block_size = kv_cache_spec.storage_block_size" in text[guard:]


def test_the_overrun_is_expected_on_model_runner_v2_of_the_baseline_only() -> None:
    config = load_config(CONFIGS / "seed-dsv4-storage-block.yaml")
    cells = list(plan(config).planned())
    assert cells
    for cell in cells:
        failing = cell.expect is not None and cell.expect.expect == "startup-fail"
        assert failing == (cell.runner == "v2" and cell.image == "baseline"), cell.id
        if failing:
            assert cell.expect is not None and cell.expect.failure_class == "kv-view-overrun"
        assert cell.storage_block_prefill == 2


def test_no_gpu_config_expects_a_seed_failure_of_0_33_0() -> None:
    for path in sorted(CONFIGS.glob("*.yaml")):
        if not re.search(r"^matrix:", path.read_text(), re.M):
            continue
        config = load_config(path)
        for cell in plan(config).planned():
            if cell.image_ref == "vllm/vllm-openai:v0.33.0":
                assert _seed_free(config, cell), f"{path.name}: {cell.id}"
