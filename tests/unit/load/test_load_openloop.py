"""The open-loop sender (canary/load/openloop.py) against a STAND-IN for vLLM on 127.0.0.1.

The stand-in is tests/support/scripted_server.py: a real HTTP server answering OpenAI-style
streaming completions after a scripted TTFT and inter-token gap, and recording when each request
reached the host (the kernel's receive stamp, on the same monotonic clock as the client). Each test
runs the real load subprocess (`python -m canary.load.process`) against it: a few seconds each.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.load.capacity import CapacitySlo, LoadMeasure
from canary.load.launch import LoadResult, run_load
from canary.load.schedule import schedule
from canary.load.workload import WorkloadSpec
from tests.support.scripted_server import ScriptedServer

TTFT_S, ITL_S, TOKENS = 0.4, 0.02, 16  # one request takes ~0.7 s


@pytest.fixture(scope="module")
def standin() -> Iterator[ScriptedServer]:
    """A stand-in for vLLM (not vLLM): scripted timing, records of what arrived when."""
    with ScriptedServer(ttft_s=TTFT_S, itl_s=ITL_S) as server:
        yield server


def _spec(server: ScriptedServer, **changes: object) -> WorkloadSpec:
    base: dict[str, object] = {
        "base_url": server.url,
        "model": server.model,
        "prompt_tokens": 8,
        "output_tokens": TOKENS,
        "open_loop": True,
        "request_rate": 25.0,
        "num_requests": 50,
        "concurrency": 1,  # unused by the open loop: one in flight would be a closed loop's pace
        "max_duration_s": 60.0,
        "token_pool": list(range(100, 140)),
        "seed": 4,
        # the machine is shared with a long test run: these tests are about the schedule, not the lag
        "max_client_lag_p99_s": 1.0,
        "max_client_cpu_ratio": 1.0,
    }
    base.update(changes)
    return WorkloadSpec.model_validate(base)


def _run(server: ScriptedServer, tmp_path: Path, **changes: object) -> LoadResult:
    server.reset()
    return run_load(_spec(server, **changes), tmp_path)


def test_requests_go_out_on_schedule_whatever_is_in_flight(standin: ScriptedServer, tmp_path: Path) -> None:
    result = _run(standin, tmp_path)
    assert result.errors == {} and result.not_sent == 0 and result.stop_reason == "complete"
    samples = sorted(result.samples, key=lambda s: s.index)
    assert len(samples) == 50
    # every request carries its scheduled and its actual send time; the schedule is the seeded one
    t0 = samples[0].intended_at
    assert t0 is not None
    offsets = [(s.intended_at or 0.0) - t0 for s in samples]
    assert offsets == pytest.approx(schedule(50, 25.0, seed=4), abs=1e-6)
    lateness = [s.lateness_s or 0.0 for s in samples]
    assert statistics.median(lateness) <= 0.03 and result.metrics["send_lateness_p99_s"] <= 0.25
    # open: at 25 req/s x 0.7 s about 17 are in flight, although `concurrency` is 1
    assert result.metrics["max_in_flight_seen"] >= 8
    # the server's own clock agrees: arrivals follow the schedule's gaps
    records = {r.request_id: r for r in standin.records()}
    arrived = [records[str(s.request_id)].received_at for s in samples]
    errors = [abs((a - arrived[0]) - o) for a, o in zip(arrived, offsets, strict=True)]
    assert statistics.median(errors) <= 0.05, errors
    assert result.metrics["achieved_request_rate_per_s"] == pytest.approx(25.0, rel=0.5)  # 50 Poisson gaps
    assert result.metrics["ttft_p50_s"] == pytest.approx(TTFT_S, abs=0.1)


def test_a_cap_on_in_flight_is_queueing_not_lateness(standin: ScriptedServer, tmp_path: Path) -> None:
    result = _run(standin, tmp_path, max_in_flight=3, num_requests=24)
    assert result.errors == {} and result.not_sent == 0
    assert result.metrics["max_in_flight_seen"] <= 3
    # 25 req/s offered, 3 x (1 / 0.7 s) served: requests wait for a slot, and that wait is recorded
    assert result.metrics["slot_wait_p99_s"] > 0.5
    assert result.metrics["queue_p99_s"] >= result.metrics["slot_wait_p99_s"] - 1e-6
    assert result.metrics["send_lateness_p50_s"] <= 0.03  # the client itself kept up
    assert result.valid, result.client_problems


def test_over_saturation_stops_the_sending(standin: ScriptedServer, tmp_path: Path) -> None:
    result = _run(standin, tmp_path, request_rate=60.0, num_requests=120, abort_in_flight=10)
    assert result.stop_reason.startswith("over-saturated")
    assert result.not_sent > 0 and len(result.samples) == 120 - result.not_sent
    assert result.metrics["max_in_flight_seen"] == 10
    assert result.metrics["requests_not_sent"] == result.not_sent


def test_the_real_capacity_measure_probes_one_rate(standin: ScriptedServer, tmp_path: Path) -> None:
    """LoadMeasure end to end: an open-loop run of the client at one rate, judged into a RateResult."""
    standin.reset()
    slo = CapacitySlo(ttft_s=5.0, itl_s=1.0)  # loose: the plumbing is tested here, not the stand-in's timing under load
    measure = LoadMeasure(base=_spec(standin), work_dir=tmp_path, slo=slo, seconds_per_probe=2.0, min_requests=30)
    probe = measure(15.0)
    assert probe.requests == 30 and probe.met == 30 and probe.passes(slo), probe
    assert probe.saturated is None and probe.invalid is None
    assert probe.ttft_p50_s is not None and probe.ttft_p50_s == pytest.approx(TTFT_S, abs=0.1)
    assert measure.runs[0]["rate"] == 15.0 and (tmp_path / "probe-00-15.json").exists()
    assert len(standin.records()) == 30
