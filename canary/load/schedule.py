"""Open-loop arrival schedules: when each request of a run is due, seeded and reproducible.

A schedule is a renewal process of mean rate `rate` (requests/s):
- Poisson (`shape` 1): exponential gaps, `random.expovariate(rate)`;
- gamma (`shape` k != 1): Gamma(k, 1/(rate*k)) gaps, mean 1/rate and coefficient of variation
  1/sqrt(k); k < 1 is burstier than Poisson (clumps and lulls), k > 1 more regular.
The first request is due at 0.

A ramp (`ramp_s` > 0) raises the rate linearly from 0 to `rate` over `ramp_s` seconds and keeps it
there, by a change of time: the stationary schedule's offset u maps to the t with
Lambda(t) = rate * u, where Lambda(t) = rate * t^2 / (2 ramp) during the ramp and
rate * (t - ramp / 2) after it. So the gaps keep their distribution in "expected arrivals" units,
the ramp only stretches the early ones.

`schedule(count, rate, shape, seed)` draws from its own generator (seeded by `seed` alone), so the
schedule does not depend on the lengths or prompts of the plan, and two rates with the same seed
get the same schedule scaled (gap_i(rate) = gap_i(1) / rate: common random numbers, so a capacity
search's rates differ by their rate, not by their luck).
"""

from __future__ import annotations

import math
import random


def ramp_time(u: float, ramp_s: float) -> float:
    """The time at which a stationary schedule's offset `u` falls under a linear ramp of `ramp_s`."""
    if ramp_s <= 0:
        return u
    if u < ramp_s / 2:
        return math.sqrt(2.0 * ramp_s * u)
    return u + ramp_s / 2


def arrival_offsets(count: int, rate: float, burstiness: float, rng: random.Random, ramp_s: float = 0.0) -> list[float]:
    """Send times (s from the start) of `count` requests: gamma gaps of shape `burstiness` (1:
    exponential, a Poisson process) and mean 1/rate, the first at 0, optionally ramped."""
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate and burstiness must be positive, got {rate}, {burstiness}")
    offsets: list[float] = []
    now = 0.0
    scale = 1.0 / (rate * burstiness)
    for i in range(count):
        if i:
            now += rng.expovariate(rate) if burstiness == 1.0 else rng.gammavariate(burstiness, scale)
        offsets.append(ramp_time(now, ramp_s))
    return offsets


def schedule(count: int, rate: float, shape: float = 1.0, seed: int = 0, ramp_s: float = 0.0) -> list[float]:
    """The seeded schedule of a run (its own generator: the same seed gives the same schedule)."""
    return arrival_offsets(count, rate, shape, random.Random(f"canary-arrivals-{seed}"), ramp_s)


def expected_count(t: float, rate: float, ramp_s: float = 0.0) -> float:
    """Expected arrivals by time t (the ramp's Lambda(t))."""
    if ramp_s <= 0 or t >= ramp_s:
        return rate * (t - ramp_s / 2 if ramp_s > 0 else t)
    return rate * t * t / (2.0 * ramp_s)
