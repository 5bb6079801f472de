"""Open-loop arrival schedules (canary/load/schedule.py): their statistics, seeds and ramp; the plan's
use of them; the lateness rule that makes a schedule the client could not keep visible."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from canary.load.schedule import arrival_offsets, expected_count, ramp_time, schedule
from canary.load.stats import Sample, schedule_problems, summarize
from canary.load.workload import WorkloadSpec, build_plan

N = 20001


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_poisson_gaps_are_exponential_with_mean_one_over_rate() -> None:
    offsets = schedule(N, rate=8.0, shape=1.0, seed=3)
    gaps = _gaps(offsets)
    assert offsets[0] == 0.0 and all(g >= 0 for g in gaps)
    mean = statistics.fmean(gaps)
    # the sample mean of n exponential gaps has standard error (1/rate)/sqrt(n): 5 of them is ~3.5 %
    assert mean == pytest.approx(1 / 8.0, rel=5 / math.sqrt(N))
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, rel=0.05)
    # memoryless: P(gap > 1/rate) = e^-1
    assert sum(g > 1 / 8.0 for g in gaps) / len(gaps) == pytest.approx(math.exp(-1), abs=0.015)


@pytest.mark.parametrize("shape", [0.25, 0.5, 2.0, 4.0])
def test_gamma_gaps_have_cv_one_over_sqrt_shape(shape: float) -> None:
    gaps = _gaps(schedule(N, rate=20.0, shape=shape, seed=11))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 20.0, rel=0.05)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1 / math.sqrt(shape), rel=0.08)


def test_same_seed_same_schedule_and_rates_are_scaled_copies() -> None:
    assert schedule(500, 5.0, 0.5, seed=7) == schedule(500, 5.0, 0.5, seed=7)
    assert schedule(500, 5.0, 0.5, seed=7) != schedule(500, 5.0, 0.5, seed=8)
    slow, fast = schedule(300, 2.0, seed=1), schedule(300, 8.0, seed=1)
    assert fast == pytest.approx([t / 4 for t in slow], rel=1e-9, abs=1e-12)  # common random numbers


def test_arrival_offsets_validate_their_parameters() -> None:
    with pytest.raises(ValueError):
        arrival_offsets(3, 0.0, 1.0, random.Random(0))
    with pytest.raises(ValueError):
        arrival_offsets(3, 1.0, -1.0, random.Random(0))
    assert arrival_offsets(0, 1.0, 1.0, random.Random(0)) == []


def test_ramp_raises_the_rate_linearly_then_holds_it() -> None:
    ramp, rate = 20.0, 50.0
    offsets = schedule(N, rate=rate, seed=5, ramp_s=ramp)
    assert offsets == sorted(offsets)
    for t in (5.0, 10.0, 20.0, 60.0, 200.0):  # arrivals by t against Lambda(t)
        observed = sum(1 for x in offsets if x <= t)
        expected = expected_count(t, rate, ramp)
        assert observed == pytest.approx(expected, abs=4 * math.sqrt(expected) + 2), t
    # after the ramp the gaps are the stationary ones
    late = _gaps([x for x in offsets if x > ramp])
    assert statistics.fmean(late) == pytest.approx(1 / rate, rel=0.05)
    assert ramp_time(3.0, 0.0) == 3.0 and ramp_time(ramp / 2, ramp) == pytest.approx(ramp)  # continuous at the knee


def test_the_plan_takes_its_offsets_from_the_seeded_schedule() -> None:
    spec = WorkloadSpec(
        base_url="http://127.0.0.1:1", model="m", request_rate=4.0, burstiness=0.5, num_requests=30, seed=9
    )
    offsets = [p.offset_s for p in build_plan(spec)]
    assert offsets == schedule(30, 4.0, 0.5, seed=9)
    longer = spec.model_copy(update={"prompt_tokens": 300, "length_distribution": "uniform"})
    assert [p.offset_s for p in build_plan(longer)] == offsets  # lengths do not move the schedule
    closed = spec.model_copy(update={"request_rate": None})
    assert all(p.offset_s is None for p in build_plan(closed))


def test_open_loop_spec_needs_a_rate_and_one_process() -> None:
    with pytest.raises(ValueError, match="request_rate"):
        WorkloadSpec(base_url="http://x", model="m", open_loop=True)
    with pytest.raises(ValueError, match="one process"):
        WorkloadSpec(base_url="http://x", model="m", open_loop=True, request_rate=1.0, workers=2, concurrency=4)
    spec = WorkloadSpec(base_url="http://x", model="m")
    assert not spec.open_loop and spec.max_in_flight is None and spec.ramp_s == 0.0  # the default: closed loop


def _sample(i: float, late: float, slot: float = 0.0) -> Sample:
    return Sample(
        index=int(i), warmup=False, sent_at=i + slot + late, ended_at=i + slot + late + 1.0,
        expected_prompt_tokens=8, expected_output_tokens=4, intended_at=i, slot_wait_s=slot,
        ttft_s=0.1, itl_s=[0.01] * 3, e2e_s=1.0, output_tokens=4, prompt_tokens=8,
    )  # fmt: skip


def test_lateness_excludes_the_wait_for_a_slot_and_a_missed_schedule_is_reported() -> None:
    kept = [_sample(i, late=0.002, slot=0.5 if i % 2 else 0.0) for i in range(100)]
    assert schedule_problems(kept, 0.05) == []
    metrics = summarize(kept)
    assert metrics["send_lateness_p99_s"] == pytest.approx(0.002)
    assert metrics["slot_wait_p99_s"] == pytest.approx(0.5)
    assert metrics["queue_p99_s"] == pytest.approx(0.502)  # the slot wait is queueing, not lateness
    missed = [_sample(i, late=0.002 if i < 90 else 0.3) for i in range(100)]
    problems = schedule_problems(missed, 0.05)
    assert len(problems) == 1 and "did not keep its arrival schedule" in problems[0]
    paced = Sample(**{**_sample(0, late=9.0).to_json(), "slot_wait_s": None})  # the users' mode: no slot wait
    assert paced.lateness_s is None and schedule_problems([paced], 0.05) == []
