"""Capacity under an SLO: the highest open-loop request rate a server carries while the SLO holds.

The method (docs/methodology/capacity.md has the reasoning):

- SLO: a request *meets* it when it succeeded, its TTFT <= `ttft_s` and the p99 of its own
  inter-token gaps (or their mean, its TPOT: `itl_statistic`) <= `itl_s`; a failed request, or
  one cut by the deadline, misses it. The SLO *holds* at a rate when the share of requests meeting
  it (the attainment) is >= `attainment`.
- A probe is one open-loop run at one rate (`measure(rate) -> RateResult`): its attainment is a
  binomial proportion (k of n requests), so it carries a Wilson score interval, taken on the
  effective sample size n / design effect: requests that queue together succeed and fail
  together, and a batch-means estimate of that correlation widens the interval (`design_effect`).
- A probe *over-saturates* the server (and counts as a failure whatever its attainment) when the
  sender had to stop (too many in flight), when completions per second fell below
  `min_throughput_ratio` x the rate requests were sent at, or when queueing grew during the run (the median TTFT
  of the last third of requests > `queue_growth` x that of the first third, and above half the TTFT
  limit). A short run that starts on an empty server shows good latencies for a while even at
  a rate it cannot sustain; these rules keep that transient from passing.
- Search: from `start_rate`, multiply by `growth` while the SLO holds (divide while it fails), then
  bisect (geometric midpoint) between the highest passing rate below the lowest failing one, until
  they are within `precision` of each other, or the budget (requests, seconds, probes) is spent. A
  probe that is invalid (the client, not the server, limited it) is measured again
  (`retry_invalid`); a rate still invalid passes nothing and bounds the bracket from above like a
  failure, but never an interval (nothing is known there), and the result notes it.
- Refine: then probe `half_width` below or above the fitted crossing (below), on the side with fewer
  fitted probes, until the fitted interval is within +-`half_width` or a budget is spent; without a
  fit (a cliff), narrow the bracket to +-5%, then probe either side of it until the conclusive
  interval is within +-`half_width` and ends at an over-saturated probe. An interval still
  open on a side then gets up to 3 more probes on that side, sqrt(growth) apart, outward.
- Result: `estimate` is the fitted crossing (`canary/load/crossing.py`): a quasi-binomial logistic
  fit of attainment against log(rate) through the valid, not over-saturated probes within
  `fit_window` of the boundary, each weighted by its effective sample size, the dispersion between
  them estimated from their residuals; `interval` is its Fieller interval (Student's t, points - 2
  degrees of freedom) when the fit bounds it on both sides within the fitted probes' rates. Without
  such a fit, the estimate is the geometric midpoint of the bracket (highest passing rate below the
  lowest failing one, that failing rate; `estimate_basis` says which rule gave it) and
  the interval the conclusive one (`conclusive_interval`): probes pooled under monotonicity, [highest
  rate whose probes up to the lowest point failure confidently pass together, lowest rate above every
  point pass that over-saturated or whose probes from there confidently fail together], a share-based
  end at least `RESOLUTION` from the decision it contradicts; either end may be missing (None).
- The curve keeps every probe: offered and achieved rate, throughput, p50/p99 TTFT and ITL,
  attainment with its interval, why it over-saturated.

`search_capacity` is pure (any `measure`: a unit test's synthetic queue or a real server).
`LoadMeasure` is the real one: an open-loop run of `canary.load.launch.run_load` per probe.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from canary.core.stats import wilson_interval
from canary.load.crossing import Crossing, Point, crossing
from canary.load.launch import LoadError, run_load
from canary.load.stats import Sample, percentile
from canary.load.workload import WorkloadSpec


@dataclass(frozen=True)
class CapacitySlo:
    """Per-request latency limits (seconds) and the share of requests that must meet both."""

    ttft_s: float = 1.0
    itl_s: float = 0.1
    attainment: float = 0.9
    confidence: float = 0.95
    itl_statistic: Literal["p99", "mean"] = "p99"  # of the request's own gaps; mean: its TPOT

    def __post_init__(self) -> None:
        if self.ttft_s <= 0 or self.itl_s <= 0:
            raise ValueError("SLO limits must be positive")
        if not 0.0 < self.attainment < 1.0:
            raise ValueError(f"attainment must lie strictly between 0 and 1, got {self.attainment}")
        if self.itl_statistic not in ("p99", "mean"):
            raise ValueError(f"itl_statistic must be p99 or mean, got {self.itl_statistic!r}")

    def met(self, sample: Sample) -> bool:
        """Whether one request met the SLO (a failed request never does)."""
        if not sample.ok or sample.ttft_s is None or sample.ttft_s > self.ttft_s:
            return False
        if not sample.itl_s:
            return True
        gap = statistics.fmean(sample.itl_s) if self.itl_statistic == "mean" else percentile(sample.itl_s, 99)
        return gap <= self.itl_s


@dataclass(frozen=True)
class SaturationRules:
    """When a probe over-saturated the server (docs/methodology/capacity.md)."""

    min_throughput_ratio: float = 0.7
    queue_growth: float = 2.0
    min_requests_for_trend: int = 12


@dataclass
class RateResult:
    """One probe: a run at one offered rate."""

    offered_rate: float
    requests: int  # sent (those cut by the deadline included: they count as misses)
    met: int
    seconds: float  # wall time the probe took
    achieved_rate: float | None = None  # sends per second
    throughput: float | None = None  # successful completions per second
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    failed: int = 0
    not_sent: int = 0
    saturated: str | None = None  # why this rate over-saturated the server; None: it did not
    invalid: str | None = None  # why the client's numbers are not the server's; None: valid
    design_effect: float = 1.0  # variance inflation of the attainment by correlated requests (>= 1)

    @property
    def attainment(self) -> float:
        """Share of requests that met the SLO (0 with no request)."""
        return self.met / self.requests if self.requests else 0.0

    def interval(self, confidence: float) -> tuple[float, float]:
        """Wilson score interval of the attainment, on the effective sample size requests / design effect."""
        return _pooled_interval([self], self.design_effect, confidence)

    def passes(self, slo: CapacitySlo) -> bool:
        """Point decision: valid, not over-saturated, attainment >= target."""
        return (
            self.invalid is None and self.saturated is None and self.requests > 0 and self.attainment >= slo.attainment
        )

    def to_json(self, slo: CapacitySlo) -> dict[str, Any]:
        """A JSON-ready row of the latency-vs-rate curve."""
        low, high = self.interval(slo.confidence)
        return {
            **asdict(self),
            "attainment": self.attainment,
            "attainment_low": low,
            "attainment_high": high,
            "passes": self.passes(slo),
        }


def rate_result(
    offered_rate: float,
    samples: Sequence[Sample],
    slo: CapacitySlo,
    *,
    seconds: float,
    cut: int = 0,
    not_sent: int = 0,
    stop_reason: str = "complete",
    client_problems: Sequence[str] = (),
    rules: SaturationRules = SaturationRules(),
) -> RateResult:
    """A probe's result from its per-request samples (warm-up ones left out)."""
    measured = sorted((s for s in samples if not s.warmup), key=lambda s: s.sent_at)
    ok = [s for s in measured if s.ok]
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    itl = [gap for s in ok for gap in s.itl_s]
    result = RateResult(
        offered_rate=offered_rate,
        requests=len(measured) + cut,
        met=sum(1 for s in measured if slo.met(s)),
        seconds=seconds,
        failed=len(measured) - len(ok),
        not_sent=not_sent,
        ttft_p50_s=percentile(ttft, 50) if ttft else None,
        ttft_p99_s=percentile(ttft, 99) if ttft else None,
        itl_p50_s=percentile(itl, 50) if itl else None,
        itl_p99_s=percentile(itl, 99) if itl else None,
        invalid="; ".join(client_problems) or None,
        design_effect=design_effect([slo.met(s) for s in measured]),
    )
    if len(measured) > 1:
        begin, end = measured[0].sent_at, max(s.ended_at for s in measured)
        last_send = measured[-1].sent_at
        if last_send > begin:
            result.achieved_rate = (len(measured) - 1) / (last_send - begin)
        result.throughput = len(ok) / max(end - begin, 1e-9)
    result.saturated = saturation(result, measured, slo, stop_reason, rules)
    return result


BATCHES = 10
MIN_BATCH = 5


def design_effect(outcomes: Sequence[bool]) -> float:
    """How much correlation between consecutive requests inflates the attainment's variance (batch means).

    The outcomes (in send order) are cut into `BATCHES` consecutive batches; the variance of the batch
    proportions over the binomial variance p(1 - p) / batch size is the design effect. Requests that
    queue behind each other succeed and fail together, so it exceeds 1 near saturation; it is
    clipped at 1 (never narrower than Wilson), and 1 with fewer than `MIN_BATCH` requests per batch
    or an attainment of 0 or 1 (no variance to compare)."""
    size = len(outcomes) // BATCHES
    if size < MIN_BATCH:
        return 1.0
    used = outcomes[: size * BATCHES]
    p = sum(used) / len(used)
    if p in (0.0, 1.0):
        return 1.0
    shares = [sum(used[i * size : (i + 1) * size]) / size for i in range(BATCHES)]
    return max(1.0, statistics.variance(shares) / (p * (1.0 - p) / size))


def _pooled_interval(probes: Sequence[RateResult], pooled_effect: float, confidence: float) -> tuple[float, float]:
    """Wilson interval of the probes' pooled attainment, each probe counted with its effective sample size
    (requests / its own design effect, or `pooled_effect` when it has none: no miss or no hit)."""
    met = size = 0.0
    for p in probes:
        effect = p.design_effect if 0 < p.met < p.requests else max(1.0, pooled_effect)
        size += p.requests / effect
        met += p.met / effect
    if size <= 0:
        return wilson_interval(0, 0, confidence)
    n = max(1, round(size))
    return wilson_interval(min(n, round(met / size * n)), n, confidence)


def saturation(
    result: RateResult, measured: Sequence[Sample], slo: CapacitySlo, stop_reason: str, rules: SaturationRules
) -> str | None:
    """Why a probe over-saturated the server, or None (`measured` in send order)."""
    if stop_reason.startswith("over-saturated"):
        return stop_reason
    sent = result.achieved_rate or result.offered_rate  # what was sent, not what the schedule's luck promised
    if result.throughput is not None and result.throughput < rules.min_throughput_ratio * sent:
        return (
            f"throughput {result.throughput:.3g} req/s < {rules.min_throughput_ratio:.0%} of the {sent:.3g} req/s sent"
        )
    ttft = [s.ttft_s for s in measured if s.ok and s.ttft_s is not None]
    if len(ttft) >= rules.min_requests_for_trend:
        third = len(ttft) // 3
        first, last = statistics.median(ttft[:third]), statistics.median(ttft[-third:])
        if last > rules.queue_growth * first and last > slo.ttft_s / 2:
            return (
                f"queueing grew: median TTFT {first * 1e3:.0f} ms in the first third, {last * 1e3:.0f} ms in the last"
            )
    return None


CLOSING_PROBES = 3
MIN_SPREAD = 0.05  # refining probes stay at least 5% from the fitted crossing (they measure its slope)
RESOLUTION = 0.05  # a share-based end of the conclusive interval keeps this far from a contradicting point decision
PROBE_OVERHEAD_S = 3.0  # starting the load subprocess (locust's import) and its last requests' tail


@dataclass(frozen=True)
class SearchSettings:
    """Where the search starts, how it moves and what it may spend."""

    start_rate: float = 1.0
    growth: float = 2.0
    min_rate: float = 0.05
    max_rate: float = 1000.0
    precision: float = 0.1  # stop bisecting when lowest fail / highest pass - 1 <= precision
    half_width: float = 0.1  # then refine until the interval's (high - low) / (high + low) <= this
    fit_window: float = 2.0  # probes within this factor of the boundary enter the crossing's fit
    budget_requests: int = 3000
    budget_s: float = 900.0
    max_probes: int = 16
    retry_invalid: int = 1  # measurements of a rate while the client was the bottleneck, beyond the first

    def __post_init__(self) -> None:
        if self.growth <= 1.0:
            raise ValueError(f"growth must be > 1, got {self.growth}")
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate:
            raise ValueError("need 0 < min_rate <= start_rate <= max_rate")
        if self.half_width <= 0:
            raise ValueError(f"half_width must be > 0, got {self.half_width}")
        if self.fit_window <= 1.0:
            raise ValueError(f"fit_window must be > 1, got {self.fit_window}")


@dataclass
class CapacityResult:
    """The capacity estimate, its interval, every probe and what the search spent."""

    slo: CapacitySlo
    settings: SearchSettings
    probes: list[RateResult] = field(default_factory=list)
    stop_reason: str = ""
    notes: list[str] = field(default_factory=list)  # rates the client could not measure
    _fit_cache: tuple[int, list[RateResult], Crossing | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def _best(self) -> tuple[float | None, float | None]:
        """(highest passing rate below the lowest failing one, that lowest failing rate). A rate the
        client could not measure (invalid, never valid on a retry) bounds it too: nothing is known there."""
        valid = {p.offered_rate for p in self.probes if p.invalid is None}
        fails = [
            p.offered_rate
            for p in self.probes
            if not p.passes(self.slo) and (p.invalid is None or p.offered_rate not in valid)
        ]
        hi = min(fails) if fails else None
        passes = [p.offered_rate for p in self.probes if p.passes(self.slo) and (hi is None or p.offered_rate < hi)]
        return (max(passes) if passes else None), hi

    @property
    def bracket(self) -> tuple[float | None, float | None]:
        """(highest passing rate below the lowest failing one, that lowest failing rate): where the point
        decisions put the boundary."""
        return self._best()

    def fit_probes(self) -> list[RateResult]:
        """The probes the crossing is fitted through: valid, not over-saturated, within a factor
        `fit_window` of the boundary (the logistic is a local model: the attainment curve bends, and
        ever more sharply towards saturation). The boundary is the bracket's geometric midpoint, then
        the crossing fitted around it (once)."""
        return self._fitted()[0]

    @property
    def crossing(self) -> Crossing | None:
        """The logistic fit's crossing of the target share, with its Fieller interval (canary/load/crossing.py);
        None when there is no bracket or no fit."""
        return self._fitted()[1]

    def _fitted(self) -> tuple[list[RateResult], Crossing | None]:
        """(fitted probes, crossing), computed once per number of probes (the search only appends)."""
        if self._fit_cache is not None and self._fit_cache[0] == len(self.probes):
            return self._fit_cache[1], self._fit_cache[2]
        probes: list[RateResult] = []
        fit: Crossing | None = None
        lo, hi = self.bracket
        if lo is not None and hi is not None:
            usable = [p for p in self.probes if p.invalid is None and p.saturated is None and p.requests > 0]
            window = self.settings.fit_window

            def near(center: float) -> list[RateResult]:
                return [p for p in usable if center / window <= p.offered_rate <= center * window]

            center = math.sqrt(lo * hi)
            probes = near(center)
            fit = self._fit(probes)
            if fit is not None and center / window <= fit.rate <= center * window:
                probes = near(fit.rate)
                fit = self._fit(probes)
        self._fit_cache = (len(self.probes), probes, fit)
        return probes, fit

    def _fit(self, probes: Sequence[RateResult]) -> Crossing | None:
        # One design effect for every fitted probe: the mean of those that have one (both hits and misses).
        # A probe's own estimate goes with its luck (a probe that happened to see few bursts has few
        # misses and a small design effect), so weighting each probe by its own would favour the lucky
        # ones and bias the crossing up (+2.3 % with 10 probes at fixed rates, misses in runs of 10).
        known = [p.design_effect for p in probes if 0 < p.met < p.requests]
        pooled = statistics.fmean(known) if known else 1.0
        points = [Point(p.offered_rate, p.attainment, p.requests / pooled) for p in probes]
        return crossing(points, self.slo.attainment, self.slo.confidence) if points else None

    @property
    def conclusive_interval(self) -> tuple[float | None, float | None]:
        """(lower, upper): the rates where the SLO confidently holds and confidently fails, from the probes
        pooled under monotonicity (attainment never rises with the rate); None: no such rate.

        - lower: the highest probed rate r whose pooled probes at rates in [r, lowest point failure)
          confidently pass (Wilson lower bound >= the target): the attainment at r is at least that of any
          higher rate, so their pooled share bounds it from below. Only rates below every point failure
          qualify: noisy probes pass above a failure, and the interval must hold the point estimate (a
          bench run passed 60.6 req/s after failing 56.8).
        - upper: the lowest probed rate r above `lower` and above every point pass whose pooled probes at
          rates in (highest point pass, r] confidently fail (Wilson upper bound < the target), or that
          over-saturated: the mirror rule (a run failed 110.99 req/s confidently between passes at 110.98
          and 111.0, and an interval of +-0.01% is no answer).
        - Resolution: a share-based end stays `RESOLUTION` (5%) away from the point decision it would
          contradict (below the lowest point failure, above the highest point pass). Probes at nearly one
          rate scatter more than each one's own interval says (slow drifts, stalls longer than a batch):
          a run had 7 probes within 0.3% of 111 req/s at attainments 0.69-1.0, and their labels' order
          alone would have made an interval of +-0.02%. An over-saturated probe is exempt.
        - Each probe's share counts with its effective sample size, requests / design effect; a probe
          with no miss (or no hit) has no design effect of its own (batch means need both) and takes the
          pooled one of the probes near the boundary that have both (`pooled_design_effect`): a 10 s probe
          that happened to see no burst is not 600 independent passes."""
        valid = [p for p in self.probes if p.invalid is None and p.requests > 0]
        effect = self.pooled_design_effect()
        point_fails = [p.offered_rate for p in valid if not p.passes(self.slo)]
        point_passes = [p.offered_rate for p in valid if p.passes(self.slo)]
        ceiling = min(point_fails) if point_fails else math.inf
        floor = max(point_passes) if point_passes else 0.0
        saturated = [p.offered_rate for p in valid if p.saturated is not None]
        missed = [p.offered_rate for p in valid if p.saturated is None and not p.passes(self.slo)]
        # A share-based end keeps RESOLUTION away from a contradicting point decision; an over-saturated probe
        # (queueing grew, throughput fell behind: no share luck) bounds the interval where it stands.
        highest_lower = min(min(saturated, default=math.inf), min(missed, default=math.inf) / (1 + RESOLUTION))
        confidence = self.slo.confidence
        lower = None
        for rate in sorted(
            {p.offered_rate for p in valid if p.offered_rate <= highest_lower and p.offered_rate < ceiling},
            reverse=True,
        ):
            pool = [p for p in valid if rate <= p.offered_rate < ceiling]
            if _pooled_interval(pool, effect, confidence)[0] >= self.slo.attainment:
                lower = rate
                break
        upper = None
        for rate in sorted({p.offered_rate for p in valid if p.offered_rate > max(floor, lower or 0.0)}):
            if rate in saturated:
                upper = rate
                break
            pool = [p for p in valid if floor < p.offered_rate <= rate and p.saturated is None]
            if rate >= floor * (1 + RESOLUTION) and _pooled_interval(pool, effect, confidence)[1] < self.slo.attainment:
                upper = rate
                break
        return lower, upper

    def pooled_design_effect(self) -> float:
        """The mean design effect of the valid, not over-saturated probes near the boundary (within
        `fit_window` of the bracket's midpoint, else all) that have both hits and misses; 1 when none
        has (the crossing's fit weighs its probes by the same number)."""
        lo, hi = self.bracket
        probes = [p for p in self.probes if p.invalid is None and p.saturated is None and 0 < p.met < p.requests]
        if lo is not None and hi is not None:
            center, window = math.sqrt(lo * hi), self.settings.fit_window
            near = [p for p in probes if center / window <= p.offered_rate <= center * window]
            probes = near or probes
        return statistics.fmean(p.design_effect for p in probes) if probes else 1.0

    @property
    def fitted_interval(self) -> tuple[float, float] | None:
        """The crossing's Fieller interval when the fit bounds it on both sides within the fitted probes'
        rates (it interpolates, never extrapolates); None otherwise."""
        fit = self.crossing
        if fit is None or fit.low is None or fit.high is None:
            return None
        rates = [p.offered_rate for p in self.fit_probes()]
        if fit.low < min(rates) or fit.high > max(rates):
            return None
        return fit.low, fit.high

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """The reported interval: the fitted one when there is one, else the conclusive one."""
        fitted = self.fitted_interval
        return fitted if fitted is not None else self.conclusive_interval

    @property
    def estimate(self) -> float | None:
        """The capacity: the fitted crossing rate when the fit bounds an interval, else the geometric midpoint
        of the bracket (the point decisions put the crossing between its ends; its lower end alone sat on the
        interval's lower bound: a bench run answered 167 [167, 283]), else the highest rate at which the SLO
        held when what bounds it above is a rate the client could not measure; None: none held."""
        return self._estimate()[0]

    @property
    def estimate_basis(self) -> str:
        """How `estimate` was reached, in words (the report says it beside the interval)."""
        return self._estimate()[1]

    def _estimate(self) -> tuple[float | None, str]:
        fit = self.crossing
        if fit is not None and self.fitted_interval is not None:
            return fit.rate, "fitted crossing"
        lo, hi = self._best()
        if lo is None:
            return None, "none: the SLO held at no rate probed"
        measured = {p.offered_rate for p in self.probes if p.invalid is None}
        if hi is None or hi not in measured:
            why = "nothing failed above it" if hi is None else f"the client could not measure {hi:.3g} req/s"
            return lo, f"highest passing rate, a lower bound ({why})"
        return math.sqrt(lo * hi), "no fitted crossing: the bracket's geometric midpoint"

    @property
    def half_width(self) -> float | None:
        """(high - low) / (high + low) of the interval; None with an open end."""
        low, high = self.interval
        if low is None or high is None:
            return None
        return (high - low) / (high + low)

    @property
    def requests_used(self) -> int:
        """Requests sent over every probe."""
        return sum(p.requests for p in self.probes)

    @property
    def seconds_used(self) -> float:
        """Wall seconds of every probe."""
        return sum(p.seconds for p in self.probes)

    def curve(self) -> list[dict[str, Any]]:
        """Every probe as a row, by offered rate."""
        return [p.to_json(self.slo) for p in sorted(self.probes, key=lambda p: p.offered_rate)]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary with the curve."""
        lower, upper = self.interval
        fit = self.crossing
        return {
            "estimate_rate": self.estimate,
            "estimate_basis": self.estimate_basis,
            "bracket": list(self.bracket),
            "interval": [lower, upper],
            "conclusive_interval": list(self.conclusive_interval),
            "crossing": asdict(fit) if fit is not None else None,
            "requests_used": self.requests_used,
            "seconds_used": self.seconds_used,
            "probes": len(self.probes),
            "stop_reason": self.stop_reason,
            "notes": self.notes,
            "slo": asdict(self.slo),
            "settings": asdict(self.settings),
            "curve": self.curve(),
        }


def search_capacity(
    measure: Callable[[float], RateResult],
    slo: CapacitySlo,
    settings: SearchSettings = SearchSettings(),
    expected_seconds: Callable[[float], float] | None = None,
) -> CapacityResult:
    """Exponential growth (or shrinking) then bisection on the rate; see the module docstring.

    With `expected_seconds(rate)` (what a probe at that rate will take), a probe that would end past
    the time budget is not started (after the first): at low rates one probe can take minutes."""
    result = CapacityResult(slo=slo, settings=settings)

    def spent(rate: float) -> str | None:
        if expected_seconds is not None and result.probes:
            cost = expected_seconds(rate)
            if result.seconds_used + cost > settings.budget_s:
                return (
                    f"time budget would be exceeded ({result.seconds_used:.0f} s used, a probe at {rate:.4g} req/s "
                    f"takes ~{cost:.0f} s of {settings.budget_s:.0f} s)"
                )
        if len(result.probes) >= settings.max_probes:
            return f"probe budget spent ({settings.max_probes} probes)"
        if result.requests_used >= settings.budget_requests:
            return f"request budget spent ({result.requests_used} of {settings.budget_requests})"
        if result.seconds_used >= settings.budget_s:
            return f"time budget spent ({result.seconds_used:.0f} of {settings.budget_s:.0f} s)"
        return None

    def probe(rate: float) -> RateResult | None:
        """Measure one rate (again while invalid, `retry_invalid` times); None (and a stop reason) when the
        budget is spent. A rate still invalid is returned as such: it passes nothing and bounds the bracket."""
        for _ in range(1 + settings.retry_invalid):
            if (why := spent(rate)) is not None:
                result.stop_reason = why
                return None
            outcome = measure(rate)
            result.probes.append(outcome)
            if outcome.invalid is None:
                return outcome
        result.notes.append(f"the client could not measure {rate:.4g} req/s: {outcome.invalid}")
        return outcome

    _search(result, probe)
    if result.notes:
        result.stop_reason = f"{result.stop_reason}; {len(result.notes)} rate(s) not measurable by the client"
    return result


def _search(result: CapacityResult, probe: Callable[[float], RateResult | None]) -> None:
    settings, slo = result.settings, result.slo
    rate = settings.start_rate
    first = probe(rate)
    if first is None:
        return
    if first.passes(slo):  # grow until the SLO fails
        while True:
            if rate >= settings.max_rate:
                result.stop_reason = f"the SLO held up to max_rate {settings.max_rate:.4g} req/s"
                return
            rate = min(rate * settings.growth, settings.max_rate)
            outcome = probe(rate)
            if outcome is None:
                return
            if not outcome.passes(slo):  # a failure, or a rate the client could not measure
                break
    else:  # shrink until it holds
        while True:
            if rate <= settings.min_rate:
                result.stop_reason = f"the SLO failed down to min_rate {settings.min_rate:.4g} req/s"
                return
            rate = max(rate / settings.growth, settings.min_rate)
            outcome = probe(rate)
            if outcome is None:
                return
            if outcome.passes(slo):
                break
    while True:  # bisect
        lo, hi = result.bracket
        if lo is None or hi is None:  # a later probe contradicted every earlier pass
            result.stop_reason = "no passing rate below the lowest failing one"
            return
        if hi / lo - 1.0 <= settings.precision:
            result.stop_reason = f"bracket within {settings.precision:.0%}"
            _refine(result, probe)
            _close_interval(result, probe)
            return
        if probe(math.sqrt(lo * hi)) is None:
            return


def _refine(result: CapacityResult, probe: Callable[[float], RateResult | None]) -> None:
    """After the bracket converged: probe around the fitted crossing, or either side of the bracket without
    a fit (`_next_rate` says where), until `_narrow_enough` or a budget is spent."""
    converged, settings = result.stop_reason, result.settings
    while True:
        if _narrow_enough(result):
            result.stop_reason = f"{converged}; interval within +-{settings.half_width:.0%}"
            return
        rate = _next_rate(result)
        if rate is None:
            return
        if probe(rate) is None:
            result.stop_reason = f"{converged} ({result.stop_reason} while refining the interval)"
            return


def _narrow_enough(result: CapacityResult) -> bool:
    """Whether the refinement may stop: the fitted interval within +-`half_width`; or, with no fit (a cliff),
    the conclusive one, when its upper end is an over-saturated probe. A share-based conclusive end rests
    on each probe's design effect, which correlations longer than a probe's batches understate: stopping
    on any conclusive interval dropped the M/M/16 simulation's coverage from 92.5% to 83%."""
    width = result.settings.half_width
    fitted = result.fitted_interval
    if fitted is not None:
        return (fitted[1] - fitted[0]) / (fitted[1] + fitted[0]) <= width
    if result.crossing is not None:
        return False
    lower, upper = result.conclusive_interval
    if lower is None or upper is None or (upper - lower) / (upper + lower) > width:
        return False
    return any(p.offered_rate == upper and p.saturated is not None for p in result.probes)


def _next_rate(result: CapacityResult) -> float | None:
    """The next refining probe: `half_width` below or above the fitted crossing, on the side with fewer
    fitted probes (a spread that keeps the slope measured, placed on the fit rather than on the
    bracket, whose ends are the luckiest point decisions). Without a fit (a cliff: every probe below
    passes, the next one up fails or over-saturates; or too few mixed probes): the bracket's geometric
    midpoint while the bracket is wider than +-5%, then 3/4 of `half_width` below or above that
    midpoint, on the side whose conclusive end is missing or farther (bisecting on would pile probes
    onto one rate: a run put 8 of its 16 probes within 0.1% of 111 req/s). Never at or above a rate
    the client could not measure. None without a bracket."""
    lo, hi = result.bracket
    if lo is None or hi is None:
        return None
    fit = result.crossing
    settings = result.settings
    if fit is None:
        center, spread = math.sqrt(lo * hi), max(0.75 * settings.half_width, MIN_SPREAD)
        if hi / lo > (1 + MIN_SPREAD) ** 2:  # the bracket is still wider than the spread: narrow it first
            return center
        lower, upper = result.conclusive_interval
        below = math.inf if lower is None else center / lower - 1
        above = math.inf if upper is None else upper / center - 1
        middle, upward = center, below < above
    else:
        spread = max(settings.half_width, MIN_SPREAD)
        probes = result.fit_probes()
        below_fit = sum(1 for p in probes if p.offered_rate < fit.rate)
        middle, upward = fit.rate, below_fit > len(probes) - below_fit
    measurable = {p.offered_rate for p in result.probes if p.invalid is None}
    unmeasurable = min((p.offered_rate for p in result.probes if p.offered_rate not in measurable), default=math.inf)
    rate = middle * (1 + spread) if upward else middle / (1 + spread)
    if rate >= unmeasurable:  # the client could not measure there: stay below it
        rate = middle / (1 + spread)
    saturated = min((p.offered_rate for p in result.probes if p.saturated is not None), default=math.inf)
    if fit is not None and rate >= saturated:
        rate = _below_saturation(middle, saturated, spread)
    return min(max(rate, settings.min_rate), settings.max_rate)


def _below_saturation(crossing: float, saturated: float, spread: float) -> float:
    """A refining probe at or above an over-saturated rate never enters the fit (a bench run spent 4 of its 9
    probes at one over-saturated 45 req/s, the fit's lower end stayed at 33 of 41): go halfway (geometric)
    between the crossing and that rate when that is at least MIN_SPREAD / 2 above the crossing, else below."""
    between = math.sqrt(crossing * saturated)
    return between if between >= crossing * (1 + MIN_SPREAD / 2) else crossing / (1 + spread)


def _close_interval(result: CapacityResult, probe: Callable[[float], RateResult | None]) -> None:
    """After the bracket converged: probe further out while an end of the confident interval is open
    (no conclusive probe on that side), `CLOSING_PROBES` at most per side, by sqrt(growth) steps."""
    step = math.sqrt(result.settings.growth)
    converged = result.stop_reason
    if all(end is not None for end in result.interval):
        return
    _close_side(result, probe, step, upward=True)
    _close_side(result, probe, step, upward=False)
    if result.stop_reason != converged:  # a budget ran out on the way: the bracket had converged all the same
        result.stop_reason = f"{converged} ({result.stop_reason} while closing the interval)"


def _close_side(
    result: CapacityResult, probe: Callable[[float], RateResult | None], step: float, *, upward: bool
) -> None:
    """Probe outward on one side while that end of the confident interval is open."""
    settings = result.settings
    for _ in range(CLOSING_PROBES):
        lower, upper = result.interval
        if (upper if upward else lower) is not None:
            return
        rates = [p.offered_rate for p in result.probes]
        edge = max(rates) if upward else min(rates)
        if all(p.invalid is not None for p in result.probes if p.offered_rate == edge):
            return  # the client could not measure there: further out is hopeless
        if (edge >= settings.max_rate) if upward else (edge <= settings.min_rate):
            return
        rate = min(edge * step, settings.max_rate) if upward else max(edge / step, settings.min_rate)
        if probe(rate) is None:
            return


@dataclass
class LoadMeasure:
    """The real `measure`: one open-loop run of the canary's client per probe.

    `base` is the workload (server, model, lengths, token pool, client limits); each probe gets
    `rate * seconds_per_probe` requests (clamped to [min_requests, max_requests]) and a fresh seed for
    its prompts (vLLM's prefix cache never serves a probe with an earlier probe's prompts) and its
    arrivals (probes are independent samples: the crossing's fit estimates the variance between
    them, which a schedule shared by every probe would hide). The sender stops
    (over-saturation) once more requests are in flight than `abort_factor` x the rate x the longest
    latency a request meeting the SLO can have, plus `abort_slack` (Little's law).
    """

    base: WorkloadSpec
    work_dir: Path
    slo: CapacitySlo
    seconds_per_probe: float = 20.0
    min_requests: int = 40  # fewer: even k = n cannot put the 95 % Wilson lower bound above 0.9
    max_requests: int = 600
    abort_factor: float = 4.0
    abort_slack: int = 8
    rules: SaturationRules = field(default_factory=SaturationRules)
    runs: list[dict[str, Any]] = field(default_factory=list)

    def expected_seconds(self, rate: float) -> float:
        """What a probe at `rate` takes when the server keeps up: its schedule, plus the load process's start."""
        return self.spec_for(rate).num_requests / rate + PROBE_OVERHEAD_S

    def spec_for(self, rate: float) -> WorkloadSpec:
        """The workload of the probe at `rate`."""
        index = len(self.runs)
        requests = max(self.min_requests, min(self.max_requests, round(rate * self.seconds_per_probe)))
        e2e_limit = self.slo.ttft_s + self.slo.itl_s * max(0, self.base.output_tokens - 1)
        abort = math.ceil(self.abort_factor * rate * e2e_limit) + self.abort_slack
        return self.base.model_copy(
            update={
                "open_loop": True,
                "request_rate": rate,
                "num_requests": requests,
                "warmup_requests": 0,
                "seed": self.base.seed + 1000 * (index + 1),
                "arrival_seed": None,  # its own schedule: probes independent (the crossing's fit needs it)
                "abort_in_flight": abort,
                "max_duration_s": requests / rate * 1.5 + 4 * e2e_limit + 10.0,
            }
        )

    def __call__(self, rate: float) -> RateResult:
        spec = self.spec_for(rate)
        name = f"probe-{len(self.runs):02d}-{rate:.4g}"
        started = time.monotonic()
        try:
            load = run_load(spec, self.work_dir, name=name)
        except LoadError as exc:
            self.runs.append({"rate": rate, "error": str(exc).splitlines()[0]})
            return RateResult(
                offered_rate=rate,
                requests=0,
                met=0,
                seconds=time.monotonic() - started,
                invalid=f"load run failed: {exc}",
            )
        outcome = rate_result(
            rate,
            load.samples,
            self.slo,
            seconds=time.monotonic() - started,
            cut=load.cut,
            not_sent=load.not_sent,
            stop_reason=load.stop_reason,
            client_problems=load.client_problems,
            rules=self.rules,
        )
        self.runs.append({"rate": rate, "name": name, **load.summary()})
        return outcome
