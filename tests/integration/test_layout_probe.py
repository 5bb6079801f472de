"""The KV layout probe on the real engine, and kernel != logical on CPU for real.

- The probe's record matches what vLLM allocated (the block count vLLM exports on /metrics) and
  what NIXL registered and transferred.
- The kernel-split build (configs/engine-patches/cpu-attn-kernel-32: CPU_ATTN pages by 32-token
  kernel blocks) runs logical 128 over kernel 32 through vLLM's own split code, aggregated and as
  a NIXL P/D pair, and the startup check's layout gates pass on it.
- The probe changes nothing: greedy tokens and logprobs are identical with and without it.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from canary.checks.startup.check import startup_check
from canary.checks.startup.layout import judge_transfers
from canary.core.promtext import first, scrape
from canary.targets.base import Deployment
from tests.integration.checkhelpers import check_context

KERNEL32 = (
    "images.baseline.patches=configs/engine-patches/cpu-attn-kernel-32/series",
    "images.baseline.kernel_block_sizes={CPU_ATTN: [32]}",
)
# In the tiny model's own domain (GSM8K-format arithmetic), long enough to span several blocks.
PROMPTS = [
    "Question: Sam has 12 marbles and buys 7 more. He gives 5 to Ann. How many marbles does Sam have now?\nAnswer:",
    "Question: A box holds 9 pens. Tom fills 6 boxes and loses 4 pens. How many pens does he have?\nAnswer:",
    "Question: Mia reads 15 pages a day for 8 days, then 20 pages on the last day. How many pages?\nAnswer:",
]


def complete(base_url: str, prompt: str, max_tokens: int = 24) -> dict[str, Any]:
    body = json.dumps(
        {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1}
    ).encode()
    request = urllib.request.Request(
        f"{base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        choice: dict[str, Any] = json.loads(response.read())["choices"][0]
    return choice


def tokens_and_logprobs(base_url: str) -> list[tuple[list[str], list[float]]]:
    out = []
    for prompt in PROMPTS:
        choice = complete(base_url, prompt)
        out.append((choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"]))
    return out


def wait_for_layout(deployment: Deployment, role: str, key: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        record = deployment.servers[role].layout()
        if record is not None and record.get(key):
            return record
        assert time.monotonic() < deadline, f"{role}: no {key!r} in the layout record after {timeout_s}s: {record}"
        time.sleep(0.5)


def num_gpu_blocks(deployment: Deployment, role: str) -> int:
    url = deployment.servers[role].metrics_url
    assert url is not None
    sample = first(scrape(url), "vllm:cache_config_info")
    assert sample is not None
    return int(float(dict(sample.labels)["num_gpu_blocks"]))


def test_probe_records_what_the_engine_allocated(agg_deployment: Deployment) -> None:
    record = wait_for_layout(agg_deployment, "aggregated", "kv_cache_groups")
    assert record["runner_class"].endswith("CPUModelRunner")
    (group,) = record["kv_cache_groups"]
    assert (group["logical_block_size"], group["kernel_block_sizes"], group["backends"]) == (32, [32], ["CPU_ATTN"])
    assert record["num_blocks"] == num_gpu_blocks(agg_deployment, "aggregated")  # vLLM's own count on /metrics
    views = record["kernel_views"]
    assert views and all(v["grain"] == "same" for v in views)
    assert sum(v["layers"] for v in views) == 2  # the tiny model's two attention layers
    assert record["num_blocks"] in views[0]["shape"] and 32 in views[0]["shape"]
    assert record["hooks"]["vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_kv_cache"] == "ok"


def test_pd_probe_records_nixl_registration_and_transfers(pd_deployment: Deployment) -> None:
    complete(pd_deployment.base_url, PROMPTS[0], max_tokens=4)
    decode = wait_for_layout(pd_deployment, "decode", "transfers")
    prefill = wait_for_layout(pd_deployment, "prefill", "nixl")
    for record, role in ((prefill, "prefill"), (decode, "decode")):
        nixl = record["nixl"]
        assert (nixl["block_size"], nixl["physical_blocks_per_logical"]) == (32, 1)
        assert nixl["num_blocks"] == record["num_blocks"] == num_gpu_blocks(pd_deployment, role)
    transfer = decode["transfers"][0]
    assert transfer["local_block_ids"] and transfer["remote_block_ids"]
    assert [r["block_size"] for r in decode["nixl"]["remotes"]] == [32]


@pytest.mark.own_engines
def test_kernel_split_runs_on_cpu_aggregated_and_pd(tmp_path: Path, engine_cells: Any) -> None:
    """Logical 128 over kernel 32 through vLLM's own split path; layout gates pass; P/D == control."""
    with engine_cells.start(tmp_path / "agg", prefill=128, overrides=KERNEL32) as (config, agg):
        engine_cells.require_started(agg)
        assert agg.cell.kernel_block_prefill == 32
        record = wait_for_layout(agg, "aggregated", "kv_cache_groups")
        (group,) = record["kv_cache_groups"]
        assert (group["logical_block_size"], group["kernel_block_sizes"]) == (128, [32])
        assert all(v["grain"] == "kernel" for v in record["kernel_views"])
        assert record["num_blocks"] * 4 in record["kernel_views"][0]["shape"]
        result = startup_check(check_context(agg, config, tmp_path / "agg-checks"))
        assert result.verdict == "pass", result.summary
        assert {g.name for g in result.gates} >= {"layout-kernel-block-aggregated", "layout-tensor-grain-aggregated"}
        assert result.metrics["kernel_block_size_aggregated"] == 32
        control = tokens_and_logprobs(agg.base_url)
    overrides = KERNEL32
    with engine_cells.start(tmp_path / "pd", topology="pd-nixl", prefill=128, decode=128, overrides=overrides) as (
        config,
        pd,
    ):
        engine_cells.require_started(pd)
        split = tokens_and_logprobs(pd.base_url)
        result = startup_check(check_context(pd, config, tmp_path / "pd-checks"))
        decode = wait_for_layout(pd, "decode", "transfers")
        pd_records = {"prefill": wait_for_layout(pd, "prefill", "nixl")}
    assert result.verdict == "pass", result.summary
    gates = {g.name: g for g in result.gates}
    assert gates["layout-nixl-grain-decode"].passed and gates["layout-tensor-grain-decode"].passed
    transfer = judge_transfers(pd_records["prefill"], decode, "cpu")
    assert [g.name for g in transfer.gates] == ["layout-pd-grain", "layout-transfer-ids"]
    assert transfer.failures == []
    nixl = decode["nixl"]
    assert (nixl["block_size"], nixl["physical_blocks_per_logical"]) == (32, 4)
    assert nixl["num_blocks"] == 4 * decode["num_blocks"]
    # the NIXL worker's own line names the split (the log evidence beside the probe)
    assert "does not match physical kernel block size (32)" in pd.servers["decode"].log_text()
    assert [t for t, _ in split] == [t for t, _ in control], "P/D at kernel grain differs from its control"


@pytest.mark.own_engines
def test_probe_changes_no_output(tmp_path: Path, engine_cells: Any, agg_deployment: Deployment) -> None:
    """The same cell with the probe off: greedy tokens and logprobs identical to the probed engine."""
    with engine_cells.start(tmp_path / "off", overrides=("checks.startup.layout_probe=false",)) as (_, plain):
        engine_cells.require_started(plain)
        assert plain.servers["aggregated"].layout() is None
        assert "CANARY_LAYOUT_DIR" not in (plain.servers["aggregated"].log_text().splitlines()[0])
        without = tokens_and_logprobs(plain.base_url)
    with_probe = tokens_and_logprobs(agg_deployment.base_url)
    assert agg_deployment.servers["aggregated"].layout() is not None
    assert with_probe == without
