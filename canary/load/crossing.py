"""Where the attainment curve crosses the target: a local logistic fit, inverted with Fieller's interval.

The capacity search's probes near the boundary each pass or fail their point decision, but one
next to the boundary is rarely *conclusive* on its own (its attainment is near the target and its
misses come in bursts). Together they say more: the attainment falls with the rate, so a
quasi-binomial logistic fit of attainment against log(rate) through them, each probe weighted by its
effective sample size (requests / design effect), puts the crossing between probes, and inverting
the fitted logit at the target gives an interval for the crossing rate (docs/methodology/capacity.md,
"The answer").

- Model: logit(attainment) = a + b (log rate - c), c the mean log rate of the points (for stability),
  fitted by maximum (quasi-)likelihood: Newton's method on the binomial log-likelihood with the
  effective sample sizes as counts. No fit (None) when it does not converge (a step the data
  cannot place: every point 0 or 1 on its side), with fewer than 2 distinct rates, or when the
  fitted slope is not negative.
- Dispersion: the Pearson statistic over the points' residuals / (points - 2), at least 1, scales the
  covariance: a curve that is not logistic across the points widens the interval, never narrows it.
- Fieller: the crossing is every log rate x whose fitted logit is within `quantile` standard errors
  of logit(target): {x : (a + b x - L)^2 <= q^2 Var(a + b x)}, a quadratic inequality, q Student's t
  quantile with points - 2 degrees of freedom (those of the dispersion): no interval from 2 points. Bounded only
  when the slope is significantly negative (b^2 > q^2 Var(b)); otherwise an end is open (None).

Stdlib only: the fit has two parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from canary.core.paired import t_two_sided

MAX_ITERATIONS = 60
MAX_SPAN = 20.0  # |log(crossing / the points' geometric mean)| beyond this: no fit
MAX_SLOPE = 500.0  # |d logit / d log rate| beyond this: a step the data cannot place (separation)


@dataclass(frozen=True)
class Point:
    """One probe: its rate, its attainment and its effective sample size (requests / design effect)."""

    rate: float
    share: float
    weight: float


@dataclass(frozen=True)
class Crossing:
    """The fitted crossing rate and its Fieller interval (an end None: not bounded by the fit)."""

    rate: float
    low: float | None
    high: float | None
    slope: float  # d logit(attainment) / d log(rate) at the fit
    dispersion: float  # Pearson statistic / (points - 2), at least 1
    points: int


def _fit(points: Sequence[Point], center: float) -> tuple[float, float, float, float, float] | None:
    """(a, b, Var a, Cov ab, Var b) of the weighted logistic fit, or None when it does not converge."""
    a, b = 0.0, 0.0
    mean = sum(p.share * p.weight for p in points) / sum(p.weight for p in points)
    mean = min(max(mean, 1e-3), 1 - 1e-3)
    a = math.log(mean / (1 - mean))
    for _ in range(MAX_ITERATIONS):
        g0 = g1 = h00 = h01 = h11 = 0.0
        for p in points:
            x = math.log(p.rate) - center
            fitted = _logistic(a + b * x)
            info = p.weight * fitted * (1 - fitted)
            g0 += p.weight * (p.share - fitted)
            g1 += p.weight * (p.share - fitted) * x
            h00, h01, h11 = h00 + info, h01 + info * x, h11 + info * x * x
        det = h00 * h11 - h01 * h01
        if det <= 1e-12 * max(1.0, h00 * h11):
            return None
        da, db = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        a, b = a + da, b + db
        if abs(b) > MAX_SLOPE or abs(a) > MAX_SLOPE:
            return None
        if abs(da) < 1e-9 and abs(db) < 1e-9:
            return a, b, h11 / det, -h01 / det, h00 / det
    return None


def _logistic(eta: float) -> float:
    if eta >= 0:
        return 1.0 / (1.0 + math.exp(-eta))
    e = math.exp(eta)
    return e / (1.0 + e)


def crossing(points: Sequence[Point], target: float, confidence: float) -> Crossing | None:
    """The rate where the fitted attainment equals `target`, with its Fieller interval at `confidence`
    (Student's t quantile with points - 2 degrees of freedom, those of the dispersion; no interval from
    2 points); None without a fit (see the module docstring)."""
    if len({p.rate for p in points}) < 2 or not 0 < target < 1:
        return None
    center = sum(math.log(p.rate) for p in points) / len(points)
    fitted = _fit(points, center)
    if fitted is None:
        return None
    a, b, vaa, vab, vbb = fitted
    if b >= 0:
        return None
    dispersion = 1.0
    if len(points) > 2:
        pearson = 0.0
        for p in points:
            f = _logistic(a + b * (math.log(p.rate) - center))
            pearson += p.weight * (p.share - f) ** 2 / max(f * (1 - f), 1e-12)
        dispersion = max(1.0, pearson / (len(points) - 2))
    vaa, vab, vbb = vaa * dispersion, vab * dispersion, vbb * dispersion
    level = math.log(target / (1 - target)) - a  # solve b x = level
    estimate = level / b
    if abs(estimate) > MAX_SPAN:  # a crossing orders of magnitude away from every point: no fit
        return None
    low = high = None
    if len(points) > 2:
        q2 = t_two_sided(confidence, len(points) - 2) ** 2
        a2 = b * b - q2 * vbb  # (b x - level)^2 - q^2 (vaa + 2 vab x + vbb x^2) <= 0
        a1 = -2 * (level * b + q2 * vab)
        a0 = level * level - q2 * vaa
        if a2 > 0:
            root = math.sqrt(max(0.0, a1 * a1 - 4 * a2 * a0))
            x1, x2 = (-a1 - root) / (2 * a2), (-a1 + root) / (2 * a2)
            if max(abs(x1), abs(x2)) <= MAX_SPAN:
                low, high = math.exp(center + x1), math.exp(center + x2)
    return Crossing(
        rate=math.exp(center + estimate),
        low=low,
        high=high,
        slope=b,
        dispersion=dispersion,
        points=len(points),
    )
