"""The paired build-vs-build throughput verdict: a ratio with a t interval, judged against a margin.

Baseline (A) and candidate (B) are measured interleaved, window after window, on the same seeded
workload: A B, B A, A B, ... (ABBA order: a linear drift of the machine cancels over two pairs).
Each adjacent A/B pair gives the log ratio log(B / A) of one throughput number. The estimate is
exp(mean log ratio), its interval a two-sided Student t interval of the mean, exponentiated; with
`trim` > 0 the mean is a trimmed mean and the interval Yuen's (trimmed_interval): the machine's
speed changes in steps, and a pair whose two windows straddle a step is an outlier a plain t interval
cannot absorb with a handful of pairs (measured: docs/methodology/throughput.md).

Deployment-level noise: on the 2-core CPU machine a deployment runs in one "mode" for its whole life
(docs/methodology/throughput.md), so the windows of one A deployment and one B deployment share a
deployment effect no number of windows averages away. With `rounds` > 1 both arms are deployed
again for every round and the interval is taken over the rounds' mean log ratios (df = rounds - 1):
the deployment effect is then part of the variance the interval sees. With one round the interval
is over the pairs (df = pairs - 1) and covers the window noise only.

A sequential check (`looks` > 1) reads the verdict after each batch of pairs and measures the next
batch only while it is inconclusive; each look's interval is at 1 - (1 - confidence) / looks
(Bonferroni), so a wrong pass or regress at any look stays within 1 - confidence overall.

Outcomes against a margin m (a tolerated loss): `pass` when the interval's low end >= 1 - m (the
candidate is no more than m slower, at the given confidence), `regress` when its high end < 1 - m
(significantly more than m slower), else `inconclusive`. A faster candidate is never a regression.

Stdlib only, like canary/core/stats.py: the t quantile comes from the regularized incomplete beta
function (a continued fraction), inverted by bisection; tests check it against scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from canary.core.stats import look_confidence

Outcome = Literal["pass", "regress", "inconclusive"]


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_two_sided(confidence: float, df: float) -> float:
    """The quantile q with P(|T| <= q) = confidence (Student's t, df degrees of freedom)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    target = 0.5 + confidence / 2.0
    low, high = 0.0, 1.0
    while t_cdf(high, df) < target:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < target:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class Window:
    """One measured window of one arm."""

    round: int
    pair: int
    arm: Literal["baseline", "candidate"]
    value: float
    """The throughput number compared (requests/s or output tokens/s)."""

    def to_json(self) -> dict[str, Any]:
        """For evidence."""
        return {"round": self.round, "pair": self.pair, "arm": self.arm, "value": self.value}


@dataclass(frozen=True)
class PairedVerdict:
    """The ratio candidate / baseline with its interval, and the outcome against the margin."""

    ratio: float
    low: float
    high: float
    margin: float
    confidence: float
    """The overall confidence; with looks > 1 each look's interval is at look_confidence."""
    outcome: Outcome
    pairs: int
    rounds: int
    degrees_of_freedom: int
    looks: int = 1
    """Planned looks of a sequential check (1: a single look)."""
    log_ratios: list[float] = field(default_factory=list)
    """Per pair, in order."""
    round_log_ratios: list[float] = field(default_factory=list)
    """Per round: the mean log ratio of its pairs (the units of the interval when rounds > 1)."""

    @property
    def look_confidence(self) -> float:
        """The confidence of this interval: `confidence` split over the planned looks (Bonferroni)."""
        return look_confidence(self.confidence, self.looks)

    def sentence(self) -> str:
        """The verdict in one line."""
        floor = 1.0 - self.margin
        over = f"{self.rounds} deployment rounds" if self.rounds > 1 else f"{self.pairs} window pairs"
        level = f"{self.confidence:.0%}"
        if self.looks > 1:
            level += f" over up to {self.looks} looks, {self.look_confidence:.1%} each"
        return (
            f"paired candidate/baseline {self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] "
            f"({level}, over {over}) vs floor {floor:.2f} (margin {self.margin:.0%}): {self.outcome}"
        )

    def to_json(self) -> dict[str, Any]:
        """For evidence."""
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "margin": self.margin,
            "confidence": self.confidence,
            "outcome": self.outcome,
            "pairs": self.pairs,
            "rounds": self.rounds,
            "degrees_of_freedom": self.degrees_of_freedom,
            "looks": self.looks,
            "look_confidence": self.look_confidence,
            "log_ratios": self.log_ratios,
            "round_log_ratios": self.round_log_ratios,
        }


def pair_log_ratios(windows: Sequence[Window]) -> dict[tuple[int, int], float]:
    """log(candidate / baseline) of each (round, pair) that has both arms with positive values."""
    by_pair: dict[tuple[int, int], dict[str, float]] = {}
    for window in windows:
        by_pair.setdefault((window.round, window.pair), {})[window.arm] = window.value
    out: dict[tuple[int, int], float] = {}
    for key, arms in sorted(by_pair.items()):
        base, cand = arms.get("baseline"), arms.get("candidate")
        if base is not None and cand is not None and base > 0 and cand > 0:
            out[key] = math.log(cand / base)
    return out


def outcome_of(low: float, high: float, margin: float) -> Outcome:
    """pass: low >= 1 - margin; regress: high < 1 - margin; else inconclusive."""
    floor = 1.0 - margin
    if low >= floor:
        return "pass"
    if high < floor:
        return "regress"
    return "inconclusive"


def trimmed_interval(units: Sequence[float], confidence: float, trim: float) -> tuple[float, float, int]:
    """(center, half-width, degrees of freedom) of the mean of `units`: Yuen's trimmed-mean t interval.

    g = floor(trim x n) units are cut at each end; the center is the mean of the rest, its standard
    error the winsorized standard deviation / ((1 - 2g/n) sqrt(n)), df = n - 2g - 1. trim 0: the plain
    t interval of the mean. One unit far off the others (a pair whose two windows straddle the
    machine's change of speed) moves a trimmed interval little and a plain one a lot."""
    n = len(units)
    g = math.floor(trim * n)
    if n - 2 * g < 2:
        raise ValueError(f"a paired interval needs at least 2 units after trimming {g} at each end, got {n}")
    ordered = sorted(units)
    kept = ordered[g : n - g]
    center = _mean(kept)
    winsorized = [ordered[g]] * g + kept + [ordered[n - g - 1]] * g
    w_mean = _mean(winsorized)
    sd_w = math.sqrt(sum((w - w_mean) ** 2 for w in winsorized) / (n - 1))
    se = sd_w / ((1.0 - 2.0 * g / n) * math.sqrt(n))
    df = n - 2 * g - 1
    return center, t_two_sided(confidence, df) * se, df


def paired_verdict(
    windows: Sequence[Window], *, margin: float, confidence: float, trim: float = 0.0, looks: int = 1
) -> PairedVerdict:
    """The paired verdict of interleaved windows (see the module docstring); `trim`: trimmed_interval's.

    `looks`: the planned looks of a sequential check (more pairs measured only while inconclusive); the
    interval is then at look_confidence(confidence, looks), so that over every look the chance of a wrong
    pass or regress stays within 1 - confidence.

    Raises ValueError when there are too few units for an interval: at least 2 pairs (after trimming)
    with one round, at least 2 rounds otherwise."""
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must lie strictly between 0 and 1, got {margin}")
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must lie in [0, 0.5), got {trim}")
    ratios = pair_log_ratios(windows)
    rounds = sorted({r for r, _ in ratios})
    per_round = [_mean([v for (r, _), v in ratios.items() if r == rnd]) for rnd in rounds]
    units = per_round if len(rounds) > 1 else list(ratios.values())
    if len(units) < 2:
        raise ValueError(f"a paired interval needs at least 2 units, got {len(units)} ({len(ratios)} complete pairs)")
    center, half, df = trimmed_interval(units, look_confidence(confidence, looks), trim)
    low, high = math.exp(center - half), math.exp(center + half)
    return PairedVerdict(
        ratio=math.exp(center),
        low=low,
        high=high,
        margin=margin,
        confidence=confidence,
        outcome=outcome_of(low, high, margin),
        pairs=len(ratios),
        rounds=len(rounds),
        degrees_of_freedom=df,
        looks=looks,
        log_ratios=list(ratios.values()),
        round_log_ratios=per_round if len(rounds) > 1 else [],
    )


def abba_order(stop: int, start: int = 0) -> list[tuple[int, Literal["baseline", "candidate"]]]:
    """The window order of pairs start..stop-1: (pair, arm), an even pair baseline first, an odd one candidate
    first (a sequential check's later pairs go on in the same order)."""
    order: list[tuple[int, Literal["baseline", "candidate"]]] = []
    for pair in range(start, stop):
        first: Literal["baseline", "candidate"] = "baseline" if pair % 2 == 0 else "candidate"
        second: Literal["baseline", "candidate"] = "candidate" if first == "baseline" else "baseline"
        order += [(pair, first), (pair, second)]
    return order


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
