"""Unit tests of the load check's pure parts: statistics, workload plan, SSE parsing, verdict rules."""

from __future__ import annotations

import itertools
import json
import random
import statistics
import subprocess
import sys

import numpy as np
import pytest

from canary.checks.throughput.check import build_spec, combine, floor_gates, regression_gates, slo_of
from canary.config import SloConfig, ThroughputCheckConfig
from canary.load.launch import LoadResult, analyze
from canary.load.schedule import arrival_offsets
from canary.load.sse import StreamRecord
from canary.load.stats import (
    ClientHealth,
    Sample,
    Slo,
    client_problems,
    distribution,
    error_counts,
    median_metrics,
    percentile,
    relative_change,
    summarize,
    window_values,
)
from canary.load.workload import (
    WorkloadSpec,
    build_plan,
    sample_lengths,
    share_of_plan,
)
from canary.plan.cell import Cell
from canary.targets.base import Deployment
from tests.support.scripted_server import Script, prompt_length


def sample(
    index: int,
    *,
    sent: float,
    ttft: float | None = 0.1,
    itl: list[float] | None = None,
    out: int | None = 4,
    prompt: int | None = 8,
    error: str | None = None,
    warmup: bool = False,
    intended: float | None = None,
) -> Sample:
    gaps = [0.01] * 3 if itl is None else itl
    e2e = (ttft or 0.0) + sum(gaps)
    return Sample(
        index=index,
        warmup=warmup,
        sent_at=sent,
        ended_at=sent + e2e,
        expected_prompt_tokens=8,
        expected_output_tokens=4,
        intended_at=intended,
        ttft_s=None if error else ttft,
        itl_s=[] if error else gaps,
        e2e_s=e2e,
        prompt_tokens=None if error else prompt,
        output_tokens=None if error else out,
        error=error,
    )


# --------------------------------------------------------------------------- percentiles


@pytest.mark.parametrize("pct", [0, 1, 50, 90, 99, 99.9, 100])
def test_percentile_matches_numpy_linear(pct: float) -> None:
    rng = random.Random(3)
    values = [rng.expovariate(10.0) for _ in range(257)]
    assert percentile(values, pct) == pytest.approx(float(np.percentile(values, pct)), rel=1e-12)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_distribution_keys_and_units() -> None:
    out = distribution("ttft", [0.1, 0.2, 0.3])
    assert set(out) == {"ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s"}
    assert out["ttft_p50_s"] == pytest.approx(0.2)
    assert distribution("itl", []) == {}


# --------------------------------------------------------------------------- summarize


def test_summarize_rates_window_and_warmup() -> None:
    samples = [sample(0, sent=0.0, warmup=True, ttft=5.0)]  # a slow warm-up must not count
    samples += [sample(i + 1, sent=10.0 + i) for i in range(10)]  # 10 requests, sent 1 s apart
    m = summarize(samples)
    assert m["requests_total"] == 10
    # window: first send 10.0 -> last end 19.0 + 0.13
    assert m["duration_s"] == pytest.approx(9.13)
    assert m["requests_per_s"] == pytest.approx(10 / 9.13)
    assert m["output_tokens_per_s"] == pytest.approx(40 / 9.13)
    assert m["total_tokens_per_s"] == pytest.approx(120 / 9.13)
    assert m["ttft_p99_s"] == pytest.approx(0.1)  # the 5 s warm-up is not in it
    assert m["achieved_request_rate_per_s"] == pytest.approx(1.0)


def test_failed_requests_are_failures_not_fast_samples() -> None:
    ok = [sample(i, sent=float(i), ttft=0.5) for i in range(8)]
    failed = [sample(8, sent=8.0, error="http_500"), sample(9, sent=9.0, error="stream_incomplete")]
    m = summarize(ok + failed)
    assert m["requests_failed"] == 2
    assert m["error_rate"] == pytest.approx(0.2)
    assert m["requests_succeeded"] == 8
    # a failed request answered "fast" must not pull latency down
    assert m["ttft_p50_s"] == pytest.approx(0.5)
    assert m["ttft_mean_s"] == pytest.approx(0.5)
    assert error_counts(ok + failed) == {"http_500": 1, "stream_incomplete": 1}


def test_tpot_itl_and_e2e() -> None:
    s = sample(0, sent=0.0, ttft=0.2, itl=[0.01, 0.03, 0.02], out=4)
    assert s.tpot_s == pytest.approx(0.06 / 3)
    m = summarize([s])
    assert m["itl_p50_s"] == pytest.approx(0.02)
    assert m["itl_mean_s"] == pytest.approx(0.02)
    assert m["e2e_p50_s"] == pytest.approx(0.26)
    assert sample(1, sent=0.0, itl=[], out=1).tpot_s is None


def test_goodput_against_slos() -> None:
    fast = [sample(i, sent=float(i), ttft=0.05) for i in range(6)]
    slow = [sample(6 + i, sent=6.0 + i, ttft=0.5) for i in range(3)]
    failed = [sample(9, sent=9.0, error="timeout")]
    m = summarize(fast + slow + failed, slo=Slo(ttft_s=0.1))
    assert m["goodput_ratio"] == pytest.approx(0.6)
    assert m["goodput_requests_per_s"] == pytest.approx(6 / m["duration_s"])
    tight_tpot = summarize(fast, slo=Slo(tpot_s=0.001))
    assert tight_tpot["goodput_ratio"] == 0.0
    assert summarize(fast)["goodput_ratio"] == 1.0  # no SLO: every success is good


def test_queueing_and_intended_rate() -> None:
    samples = [sample(i, sent=i * 0.5 + (0.2 if i == 3 else 0.0), intended=i * 0.5) for i in range(6)]
    m = summarize(samples, intended_rate=2.0)
    assert m["intended_request_rate_per_s"] == 2.0
    assert m["queue_p99_s"] == pytest.approx(percentile([0, 0, 0, 0.2, 0, 0], 99))
    assert m["queue_mean_s"] == pytest.approx(0.2 / 6)


def test_sample_json_roundtrip() -> None:
    s = sample(3, sent=1.0, intended=0.9)
    assert Sample.from_json(json.loads(json.dumps(s.to_json()))) == s


# --------------------------------------------------------------------------- client health


def test_client_problems_flag_cpu_and_lag() -> None:
    calm = ClientHealth(cpu_s=2.0, wall_s=10.0, lag_s=[0.001] * 100)
    assert client_problems(calm, 0.9, 0.02) == []
    busy = ClientHealth(cpu_s=9.8, wall_s=10.0, lag_s=[0.001] * 100)
    assert any("CPU" in p for p in client_problems(busy, 0.9, 0.02))
    laggy = ClientHealth(cpu_s=1.0, wall_s=10.0, lag_s=[0.001] * 90 + [0.2] * 10)
    assert any("lag" in p for p in client_problems(laggy, 0.9, 0.02))
    assert summarize([sample(0, sent=0.0)], health=busy)["client_cpu_ratio"] == pytest.approx(0.98)


def test_health_merge_keeps_the_busiest_worker() -> None:
    merged = ClientHealth.merge(
        [ClientHealth(cpu_s=1.0, wall_s=10.0, lag_s=[0.1]), ClientHealth(cpu_s=8.0, wall_s=10.0, lag_s=[0.2])]
    )
    assert merged.cpu_ratio == pytest.approx(0.8)
    assert sorted(merged.lag_s) == [0.1, 0.2]
    assert merged.processes == 2


# --------------------------------------------------------------------------- repeats and regressions


def test_median_and_relative_change() -> None:
    runs = [
        {"requests_per_s": 10.0, "ttft_p50_s": 0.1},
        {"requests_per_s": 30.0, "ttft_p50_s": 0.3},
        {"requests_per_s": 20.0, "ttft_p50_s": 0.2},
    ]
    assert median_metrics(runs) == {"requests_per_s": 20.0, "ttft_p50_s": 0.2}
    assert relative_change(8.0, 10.0, "requests_per_s") == pytest.approx(0.2)  # dropped 20 %: worse
    assert relative_change(12.0, 10.0, "requests_per_s") == pytest.approx(-0.2)
    assert relative_change(0.12, 0.1, "ttft_p50_s") == pytest.approx(0.2)  # rose 20 %: worse
    assert relative_change(0.08, 0.1, "ttft_p50_s") == pytest.approx(-0.2)


def _load_result(metrics: dict[str, float], valid: bool = True) -> LoadResult:
    spec = WorkloadSpec(base_url="http://x", model="m")
    health = ClientHealth(cpu_s=0.1, wall_s=1.0, lag_s=[])
    return LoadResult(
        spec=spec,
        samples=[],
        health=health,
        stop_reason="complete",
        not_sent=0,
        cut=0,
        processes=1,
        metrics=metrics,
        client_problems=[] if valid else ["client CPU"],
    )


def test_combine_repeats_uses_medians_and_sums_failures() -> None:
    base = {
        "requests_total": 10.0,
        "requests_succeeded": 10.0,
        "requests_failed": 0.0,
        "requests_not_sent": 0.0,
        "requests_cut_by_deadline": 0.0,
        "error_rate": 0.0,
        "client_cpu_ratio": 0.2,
    }
    runs = [
        _load_result({**base, "requests_per_s": 10.0}),
        _load_result(
            {
                **base,
                "requests_per_s": 50.0,
                "requests_succeeded": 9.0,
                "requests_failed": 1.0,
                "error_rate": 0.1,
                "client_cpu_ratio": 0.5,
            }
        ),
        _load_result({**base, "requests_per_s": 12.0}),
    ]
    m = combine(runs)
    assert m["requests_per_s"] == 12.0  # a single noisy run cannot move the verdict
    assert m["requests_failed"] == 1.0
    assert m["error_rate"] == pytest.approx(1 / 30)  # every failure of every repeat counts
    assert m["client_cpu_ratio"] == 0.5
    assert m["repeats"] == 3.0
    assert m["client_valid"] == 1.0
    assert combine([*runs, _load_result(base, valid=False)])["client_valid"] == 0.0


def test_floor_and_regression_gates() -> None:
    cfg = ThroughputCheckConfig(min_requests_per_s=5.0, min_output_tokens_per_s=500.0, regression_tolerance=0.2)
    gates = {g.name: g for g in floor_gates(cfg, {"requests_per_s": 6.0, "output_tokens_per_s": 100.0})}
    assert gates["min-requests-per-s"].passed
    assert not gates["min-output-tokens-per-s"].passed
    baseline = {"requests_per_s": 10.0, "output_tokens_per_s": 100.0, "ttft_p50_s": 0.1, "tpot_p50_s": 0.01}
    candidate = {"requests_per_s": 7.9, "output_tokens_per_s": 95.0, "ttft_p50_s": 0.115, "tpot_p50_s": 0.02}
    reg = {g.name: g for g in regression_gates(cfg, candidate, baseline, "agg.b32.baseline")}
    assert not reg["regression-requests_per_s"].passed  # dropped 21 %
    assert reg["regression-output_tokens_per_s"].passed  # dropped 5 %
    assert reg["regression-ttft_p50_s"].passed  # rose 15 %
    assert not reg["regression-tpot_p50_s"].passed  # doubled
    assert "agg.b32.baseline" in reg["regression-tpot_p50_s"].detail


def test_spec_from_config() -> None:
    cfg = ThroughputCheckConfig(
        prompt_tokens=100,
        output_tokens=20,
        concurrency=8,
        num_requests=50,
        seed=7,
        max_client_lag_p99_ms=30.0,
        slo=SloConfig(ttft_ms=200.0, tpot_ms=None, e2e_ms=1000.0),
    )
    cell = Cell.model_construct(id="agg.b32")
    spec = build_spec(cfg, Deployment(cell=cell, base_url="http://router:1", served_model="tiny"), repeat=2)
    assert (spec.base_url, spec.model, spec.seed) == ("http://router:1", "tiny", 9)
    assert spec.max_client_lag_p99_s == pytest.approx(0.03)
    assert (spec.prompt_tokens, spec.output_tokens, spec.concurrency, spec.num_requests) == (100, 20, 8, 50)
    assert slo_of(cfg) == Slo(ttft_s=0.2, tpot_s=None, e2e_s=1.0)


def test_analyze_raw_output() -> None:
    spec = WorkloadSpec(base_url="http://x", model="m", max_client_cpu_ratio=0.5)
    raw = {
        "samples": [sample(0, sent=0.0).to_json(), sample(1, sent=0.1, error="http_503").to_json()],
        "health": ClientHealth(cpu_s=0.9, wall_s=1.0, lag_s=[0.0]).to_json(),
        "not_sent": 0,
        "cut": 0,
        "stop_reason": "complete",
        "processes": 1,
    }
    result = analyze(spec, raw)
    assert not result.valid and result.errors == {"http_503": 1}
    assert result.metrics["error_rate"] == 0.5


# --------------------------------------------------------------------------- workload


def test_poisson_and_bursty_arrivals() -> None:
    rng = random.Random(1)
    offsets = arrival_offsets(20001, rate=50.0, burstiness=1.0, rng=rng)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert offsets[0] == 0.0
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.03)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    bursty = arrival_offsets(20001, rate=50.0, burstiness=0.25, rng=random.Random(2))
    bgaps = [b - a for a, b in itertools.pairwise(bursty)]
    assert statistics.fmean(bgaps) == pytest.approx(1 / 50, rel=0.05)
    assert statistics.pstdev(bgaps) / statistics.fmean(bgaps) == pytest.approx(2.0, rel=0.1)  # CV 1/sqrt(0.25)


def test_length_distributions() -> None:
    rng = random.Random(0)
    assert sample_lengths(64, "fixed", 0.25, 5, rng) == [64] * 5
    uniform = sample_lengths(100, "uniform", 0.25, 5000, rng)
    assert min(uniform) >= 75 and max(uniform) <= 125
    assert statistics.fmean(uniform) == pytest.approx(100, rel=0.02)
    normal = sample_lengths(100, "normal", 0.1, 5000, rng)
    assert statistics.pstdev(normal) == pytest.approx(10, rel=0.1)
    assert min(sample_lengths(2, "normal", 0.9, 1000, rng)) >= 1


def test_plan_token_prompts_are_exact_and_bodies_stream() -> None:
    spec = WorkloadSpec(
        base_url="http://x",
        model="tiny",
        prompt_tokens=33,
        output_tokens=7,
        num_requests=10,
        warmup_requests=2,
        token_pool=[5, 6, 7],
    )
    plan = build_plan(spec)
    assert [p.warmup for p in plan] == [True, True] + [False] * 10
    body = json.loads(plan[0].body)
    assert len(body["prompt"]) == 33 and set(body["prompt"]) <= {5, 6, 7}
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert build_plan(spec) == plan  # seeded: every worker builds the same plan
    assert build_plan(spec.model_copy(update={"seed": 1})) != plan
    assert all(p.offset_s is None for p in plan)


def test_plan_chat_and_open_loop() -> None:
    spec = WorkloadSpec(
        base_url="http://x",
        model="tiny",
        endpoint="chat",
        prompt_tokens=20,
        request_rate=4.0,
        num_requests=5,
        words_per_token=0.5,
    )
    plan = build_plan(spec)
    body = json.loads(plan[0].body)
    assert spec.path == "/v1/chat/completions"
    assert len(body["messages"][0]["content"].split()) == 10
    offsets = [p.offset_s for p in plan]
    assert offsets[0] == 0.0 and all(b is not None and a is not None and b >= a for a, b in itertools.pairwise(offsets))


def test_shares_partition_the_plan() -> None:
    plan = build_plan(WorkloadSpec(base_url="http://x", model="m", num_requests=11, token_pool=[1]))
    shares = [share_of_plan(plan, i, 3) for i in range(3)]
    assert sorted(p.index for s in shares for p in s) == list(range(11))
    with pytest.raises(ValueError):
        share_of_plan(plan, 3, 3)


def test_spec_rejects_more_workers_than_users() -> None:
    with pytest.raises(ValueError, match="workers"):
        WorkloadSpec(base_url="http://x", model="m", concurrency=1, workers=2)


# --------------------------------------------------------------------------- SSE


def _lines(events: list[dict[str, object] | str]) -> list[bytes]:
    out: list[bytes] = []
    for event in events:
        payload = event if isinstance(event, str) else json.dumps(event)
        out += [f"data: {payload}\n".encode(), b"\n"]
    return out


def test_sse_completions_stream() -> None:
    events: list[dict[str, object] | str] = [
        {"id": "cmpl-1", "choices": [{"index": 0, "text": " a", "finish_reason": None}], "usage": None},
        {"id": "cmpl-1", "choices": [{"index": 0, "text": " b", "finish_reason": None}], "usage": None},
        {"id": "cmpl-1", "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": None},
        {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}},
        "[DONE]",
    ]
    record = StreamRecord(sent_at=0.0)
    times = iter([0.5, 0.5, 0.6, 0.6, 0.65, 0.65, 0.9, 0.9, 1.0, 1.0])
    for line in _lines(events):
        record.feed(line, next(times))
    record.feed(b": ping\n", 1.1)
    assert record.first_token_at == 0.5 and record.last_token_at == 0.65
    assert record.gaps == pytest.approx([0.1, 0.05])
    assert record.token_events == 3
    assert (record.prompt_tokens, record.output_tokens) == (5, 3)
    assert record.done and record.stream_error is None and record.finish_reason == "length"
    assert record.response_id == "cmpl-1"


def test_sse_chat_role_chunk_is_not_a_token() -> None:
    events: list[dict[str, object] | str] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
        {"choices": [{"index": 0, "delta": {"content": " there"}}]},
    ]
    record = StreamRecord(sent_at=0.0)
    for t, line in zip([0.2, 0.2, 0.3, 0.3, 0.4, 0.4], _lines(events), strict=True):
        record.feed(line, t)
    assert record.first_token_at == 0.3 and record.token_events == 2 and not record.done


def test_sse_error_event() -> None:
    record = StreamRecord(sent_at=0.0)
    record.feed(b'data: {"error": {"message": "engine dead", "code": 500}}\n', 0.1)
    assert record.stream_error == "engine dead"
    broken = StreamRecord(sent_at=0.0)
    broken.feed(b"data: {not json\n", 0.1)
    assert broken.stream_error is not None


# --------------------------------------------------------------------------- the stand-in server's rules


def test_scripted_prompt_length_and_script_update() -> None:
    assert prompt_length({"prompt": [1, 2, 3]}) == 3
    assert prompt_length({"prompt": "a b c d"}) == 4
    assert prompt_length({"messages": [{"role": "user", "content": "x y"}]}) == 2
    script = Script()
    script.update({"ttft_s": 0.2, "fail_every": 3})
    assert (script.ttft_s, script.fail_every) == (0.2, 3)
    with pytest.raises(ValueError, match="unknown"):
        script.update({"ttft": 1})


def test_canary_never_imports_locust() -> None:
    """locust monkey-patches the importing process: the canary side must not import it."""
    code = (
        "import sys, canary.checks, canary.load.launch, canary.load.rxstamp, canary.run.cells;"
        "import canary.checks.throughput.check;"
        "bad = [m for m in ('locust', 'gevent', 'canary.load.user', 'canary.load.locust_driver') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_rejects_bad_throughput_settings() -> None:
    with pytest.raises(ValueError, match="workers"):
        ThroughputCheckConfig(workers=8, concurrency=4)
    with pytest.raises(ValueError, match="unknown metrics"):
        ThroughputCheckConfig(regression_metrics=["ttft_p95_s"])
    assert ThroughputCheckConfig(regression_metrics=["itl_p99_s", "goodput_requests_per_s"]).regression_metrics


# --------------------------------------------------------------------------- the runs' own spread


def _closed_loop(seed: int, slowdown: float, requests: int = 40, users: int = 4, jitter: float = 0.35) -> list[Sample]:
    """A closed-loop run: `users` users, each sending its next request when the last one ends; e2e
    times lognormal around 0.25 s x slowdown (`jitter`: sigma), TTFT a fifth of it."""
    rng = random.Random(seed)
    free_at = [0.0] * users
    samples = []
    for index in range(requests):
        user = min(range(users), key=lambda u: free_at[u])
        e2e = 0.25 * slowdown * rng.lognormvariate(0.0, jitter)
        sent = free_at[user]
        free_at[user] = sent + e2e
        samples.append(
            Sample(
                index=index,
                warmup=False,
                sent_at=sent,
                ended_at=sent + e2e,
                expected_prompt_tokens=64,
                expected_output_tokens=32,
                ttft_s=e2e / 5,
                e2e_s=e2e,
                output_tokens=32,
                prompt_tokens=64,
            )
        )
    return samples


def _medians(runs: list[list[Sample]]) -> dict[str, float]:
    return median_metrics([summarize(run) for run in runs])


def test_window_values_split_a_run_by_completion() -> None:
    run = _closed_loop(1, 1.0)
    rates = window_values(run, "requests_per_s", 4)
    assert len(rates) == 4 and all(4.0 < r < 40.0 for r in rates)
    # the windows' requests over their spans add up to the whole run's requests over its span
    assert sum(10 / r for r in rates) == pytest.approx(max(s.ended_at for s in run) - min(s.sent_at for s in run))
    ttft = window_values(run, "ttft_p50_s", 4)
    assert len(ttft) == 4 and min(ttft) <= statistics.median(s.ttft_s or 0 for s in run) <= max(ttft)
    assert window_values(run, "requests_per_s", 10) == []  # 4 requests a window: too few to say anything
    assert window_values(run, "goodput_ratio", 4) == []  # no per-window form
    assert window_values(run, "requests_per_s", 0) == []


def test_a_change_within_the_runs_own_spread_is_not_a_regression() -> None:
    """The same server measured twice (seeds differ): one 40-request run's median moves by 20-30%
    on its own. Beyond the 20% tolerance but inside the spread: passes, and the detail says why."""
    cfg = ThroughputCheckConfig(regression_tolerance=0.2, regression_metrics=["requests_per_s"])
    noisy = [
        (seed_a, seed_b)
        for seed_a in range(40)
        for seed_b in range(40, 60)
        if relative_change(
            _medians([_closed_loop(seed_b, 1.0)])["requests_per_s"],
            _medians([_closed_loop(seed_a, 1.0)])["requests_per_s"],
            "requests_per_s",
        )
        > 0.2
    ]
    assert noisy, "the simulated noise should reach the tolerance"
    seed_a, seed_b = noisy[0]
    base, cand = [_closed_loop(seed_a, 1.0)], [_closed_loop(seed_b, 1.0)]
    plain = regression_gates(cfg, _medians(cand), _medians(base), "agg.base")[0]
    assert not plain.passed  # the tolerance alone calls it a regression
    gate = regression_gates(cfg, _medians(cand), _medians(base), "agg.base", (cand, base))[0]
    assert gate.passed and "within the runs' own spread" in gate.detail
    off = cfg.model_copy(update={"regression_windows": 0})
    assert not regression_gates(off, _medians(cand), _medians(base), "agg.base", (cand, base))[0].passed


@pytest.mark.parametrize("metric", ["requests_per_s", "output_tokens_per_s", "ttft_p50_s", "e2e_p50_s"])
def test_a_real_slowdown_is_beyond_the_spread(metric: str) -> None:
    """A 2x slower candidate (seeded fault 04 is 3x) fails on every seed pair tried, rates and latencies."""
    cfg = ThroughputCheckConfig(regression_tolerance=0.3, regression_metrics=[metric])
    for seed in range(10):
        base, cand = [_closed_loop(seed, 1.0)], [_closed_loop(100 + seed, 2.0)]
        gate = regression_gates(cfg, _medians(cand), _medians(base), "agg.base", (cand, base))[0]
        assert not gate.passed and "beyond the runs' own spread" in gate.detail, (seed, gate.detail)


def test_missing_baseline_samples_leave_the_tolerance_to_decide() -> None:
    cfg = ThroughputCheckConfig(regression_tolerance=0.2, regression_metrics=["requests_per_s"])
    cand = [_closed_loop(7, 1.5)]
    gate = regression_gates(cfg, {"requests_per_s": 7.0}, {"requests_per_s": 10.0}, "agg.base", (cand, []))[0]
    assert not gate.passed and "window" not in gate.detail
