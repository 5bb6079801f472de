"""Synthetic servers whose SLO capacity is known, for measuring how often the capacity search's interval
holds it (tests/unit/load/test_load_capacity.py asserts some; tests/bench/capacity_coverage.py prints all).

Not servers: each is a `measure(rate) -> RateResult` drawing a probe's request outcomes (met the SLO
or not) from a seeded generator, with the probe's design effect estimated from them as the real
measurement does (canary.load.capacity.design_effect), or set to 1 (`naive`: blind to correlation).

- binomial: independent requests, P(met) = the M/M/1 attainment curve 1 - exp(-(MU - rate) T).
- runs: the same curve, but misses come in runs: a two-state chain, 'bad' (every request misses) for
  `run` requests on average, in the stationary share 1 - attainment. Design effect ~2 run - 1.
- cliff: a server that holds the SLO up to a cliff and over-saturates just past it (the real bench's shape at
  a loose SLO): no logistic fit places a step, so only the conclusive interval answers.
- mmc: a stationary M/M/c queue (Poisson arrivals, c servers of rate mu each, FCFS); a request meets
  the SLO when it waits at most T for a server. P = 1 - ErlangC x exp(-(c mu - rate) T).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

from canary.load.capacity import CapacitySlo, RateResult, SearchSettings, design_effect, search_capacity

MU, T, TARGET = 10.0, 1.0, 0.9
CURVE_CAPACITY = MU + math.log(1 - TARGET) / T  # 7.70 req/s
Measure = Callable[[float], RateResult]


def attainment(rate: float) -> float:
    """The M/M/1 attainment curve: P(TTFT <= T) in steady state."""
    return 1 - math.exp(-(MU - rate) * T) if rate < MU else 0.0


def _result(rate: float, outcomes: list[bool], naive: bool) -> RateResult:
    n = len(outcomes)
    effect = 1.0 if naive else design_effect(outcomes)
    return RateResult(offered_rate=rate, requests=n, met=sum(outcomes), seconds=n / rate, design_effect=effect)


def _overload(rate: float) -> RateResult:
    return RateResult(offered_rate=rate, requests=40, met=0, seconds=1.0, saturated="overload")


def binomial(seed: int, *, seconds: float = 15.0, min_requests: int = 30, naive: bool = False) -> Measure:
    rng = random.Random(seed)

    def measure(rate: float) -> RateResult:
        if rate >= MU:
            return _overload(rate)
        n = max(min_requests, round(rate * seconds))
        return _result(rate, [rng.random() < attainment(rate) for _ in range(n)], naive)

    return measure


def runs(seed: int, *, run: float = 10.0, seconds: float = 60.0, naive: bool = False) -> Measure:
    rng = random.Random(seed)

    def measure(rate: float) -> RateResult:
        if rate >= MU:
            return _overload(rate)
        n, p = max(40, round(rate * seconds)), attainment(rate)
        leave = 1 / run
        enter = leave * (1 - p) / p
        bad, outcomes = rng.random() < 1 - p, []
        for _ in range(n):
            outcomes.append(not bad)
            bad = rng.random() >= leave if bad else rng.random() < enter
        return _result(rate, outcomes, naive)

    return measure


CLIFF = 111.0  # req/s: the cliff server's saturation rate (a real bench run's, at TTFT <= 1 s, TPOT <= 50 ms)


def cliff(seed: int, *, run: float = 20.0, seconds: float = 10.0) -> Measure:
    """A server that holds its SLO up to a cliff (a real bench run, 2026-12-03, 64/32 tokens, TTFT <= 1 s and TPOT
    <= 50 ms: every probe up to 110.5 req/s met it, probes at 111.0 scattered 0.69-1.0, 111.7 and up over-saturated):
    P(met) = 1 up to 0.99 CLIFF, then falling linearly to 0.5 at CLIFF, misses in runs of `run`; over-saturated
    from 1.005 CLIFF. Its capacity at the 0.9 target: 0.99 + 0.01 x 0.1 / 0.5 of CLIFF."""
    rng = random.Random(seed)

    def measure(rate: float) -> RateResult:
        if rate >= 1.005 * CLIFF:
            return RateResult(offered_rate=rate, requests=600, met=0, seconds=seconds, saturated="queueing grew")
        p = 1.0 if rate <= 0.99 * CLIFF else 1.0 - 0.5 * (rate / CLIFF - 0.99) / 0.01
        n, leave = max(40, min(600, round(rate * seconds))), 1 / run
        enter = leave * (1 - p) / p
        bad, outcomes = rng.random() < 1 - p, []
        for _ in range(n):
            outcomes.append(not bad)
            bad = rng.random() >= leave if bad else rng.random() < enter
        return _result(rate, outcomes, naive=False)

    return measure


CLIFF_CAPACITY = CLIFF * (0.99 + 0.01 * 0.1 / 0.5)


def erlang_c(c: int, load: float) -> float:
    """P(an arrival waits) in M/M/c with offered load `load` = rate / mu < c."""
    head = sum(load**k / math.factorial(k) for k in range(c))
    tail = load**c / math.factorial(c) * c / (c - load)
    return tail / (head + tail)


def mmc_capacity(c: int, mu: float, wait: float, target: float = TARGET) -> float:
    """The highest rate at which P(wait <= `wait`) >= target in M/M/c (bisection)."""
    lo, hi = 0.0, c * mu
    for _ in range(100):
        mid = (lo + hi) / 2
        met = 1 - erlang_c(c, mid / mu) * math.exp(-(c * mu - mid) * wait)
        lo, hi = (mid, hi) if met >= target else (lo, mid)
    return lo


def mmc(seed: int, *, c: int = 16, mu: float = 0.625, wait: float = 0.3, seconds: float = 60.0,
        warmup: int = 100, naive: bool = False) -> Measure:  # fmt: skip
    rng = random.Random(seed)

    def measure(rate: float) -> RateResult:
        if rate >= c * mu:
            return _overload(rate)
        n = max(40, round(rate * seconds))
        free, now, outcomes = [0.0] * c, 0.0, []
        for i in range(n + warmup):  # warm-up requests bring the queue near its steady state
            now += rng.expovariate(rate)
            start = max(now, heapq.heappop(free))
            heapq.heappush(free, start + rng.expovariate(mu))
            if i >= warmup:
                outcomes.append(start - now <= wait)
        return _result(rate, outcomes, naive)

    return measure


def coverage(
    measure: Callable[[int], Measure], truth: float, slo: CapacitySlo, settings: SearchSettings, runs: int = 200
) -> tuple[float, float, float]:
    """(share of seeded searches whose reported interval holds `truth`, their median half-width (inf: open),
    the share whose conclusive interval alone holds it)."""
    covered = conclusive = 0
    widths = []
    for seed in range(runs):
        found = search_capacity(measure(seed), slo, settings)
        covered += _holds(found.interval, truth)
        conclusive += _holds(found.conclusive_interval, truth)
        widths.append(found.half_width if found.half_width is not None else math.inf)
    return covered / runs, sorted(widths)[runs // 2], conclusive / runs


def _holds(interval: tuple[float | None, float | None], truth: float) -> bool:
    lower, upper = interval
    return (lower or 0.0) <= truth <= (upper if upper is not None else math.inf)
