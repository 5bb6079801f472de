"""How often the capacity search's interval holds the true capacity, on synthetic servers (seconds, no server).

    .venv/bin/python tests/bench/capacity_coverage.py [--runs 200] [--confidence 0.9] [--bench-budget]

One line per synthetic server of tests/support/capacity_sims.py: the share of seeded searches whose
reported interval (canary.load.capacity: fitted, else conclusive) holds the true capacity, and
their median half-width ((high - low) / (high + low)). docs/methodology/capacity.md quotes it.

--bench-budget: the search at `make bench-capacity`'s budget instead (issue 43): probes of ~460 requests (the
real server's 10 s probes at 30-50 req/s), 9 of them (what its 120 s bought) or 18 (~240 s), started at 0.8 of
the capacity (its closed-loop start), misses independent or in runs of 10-25 requests (the real probes' design
effects were 25-52); besides coverage, the p90 half-width and the share of searches that reach +-10%.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from canary.load.capacity import CapacitySlo, SearchSettings, search_capacity
from tests.support import capacity_sims as sims


def budget_summary(
    measure: Callable[[int], sims.Measure], truth: float, slo: CapacitySlo, settings: SearchSettings, runs: int
) -> dict[str, float]:
    """Over `runs` seeded searches: the share whose interval holds `truth`, the median and p90 half-width (inf:
    an open end) and the share whose interval is within +-settings.half_width."""
    covered, widths = 0, []
    for seed in range(runs):
        found = search_capacity(measure(seed), slo, settings)
        low, high = found.interval
        covered += (low or 0.0) <= truth <= (high if high is not None else math.inf)
        widths.append(found.half_width if found.half_width is not None else math.inf)
    widths.sort()
    return {
        "coverage": covered / runs,
        "median": widths[runs // 2],
        "p90": widths[min(runs - 1, int(runs * 0.9))],
        "reached": sum(w <= settings.half_width for w in widths) / runs,
    }


def bench_budget(runs: int, confidence: float) -> None:
    """The search at make bench-capacity's budget (see the module's docstring)."""
    slo = CapacitySlo(ttft_s=sims.T, itl_s=0.05, attainment=sims.TARGET, confidence=confidence)
    cap = sims.CURVE_CAPACITY
    print(f"nominal {confidence:.0%}, {runs} seeded searches each; probes of ~460 requests, started at 0.8 capacity")
    for probes in (9, 18):
        settings = SearchSettings(
            start_rate=0.8 * cap, precision=0.2, half_width=0.1, budget_requests=10**6, budget_s=1e9,
            max_probes=probes,
        )  # fmt: skip
        for run in (1, 10, 20, 25):
            measure: Callable[[int], sims.Measure] = (
                (lambda s: sims.binomial(s, seconds=60.0))
                if run == 1
                else (lambda s, r=run: sims.runs(s, run=r, seconds=60.0))
            )
            got = budget_summary(measure, cap, slo, settings, runs)
            name = "independent misses" if run == 1 else f"misses in runs of {run} requests"
            widths = f"half-width median {got['median']:6.1%}  p90 {got['p90']:6.1%}"
            reached = f"reached +-10% {got['reached']:6.1%}"
            print(f"{probes:2d} probes, {name:<32} coverage {got['coverage']:6.1%}  {widths}  {reached}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--bench-budget", action="store_true", help="the search at make bench-capacity's budget")
    args = parser.parse_args(argv)
    if args.bench_budget:
        bench_budget(args.runs, args.confidence)
        return 0
    curve = CapacitySlo(ttft_s=sims.T, itl_s=0.05, attainment=sims.TARGET, confidence=args.confidence)
    queue = CapacitySlo(ttft_s=0.3, itl_s=0.05, attainment=sims.TARGET, confidence=args.confidence)
    short = SearchSettings(start_rate=1.0, precision=0.05, budget_requests=1500)
    long = SearchSettings(start_rate=1.0, precision=0.2, budget_requests=8000, budget_s=1e9)
    mm16, mm1 = sims.mmc_capacity(16, 0.625, 0.3), sims.mmc_capacity(1, 10.0, 0.3)
    cap = sims.CURVE_CAPACITY
    cases: list[tuple[str, Callable[[int], sims.Measure], float, CapacitySlo, SearchSettings]] = [
        ("binomial, 15 s probes (30-150 requests), 1500-request budget", sims.binomial, cap, curve, short),
        ("misses in runs of 5 requests, 60 s probes, 8000 requests", lambda s: sims.runs(s, run=5), cap, curve, long),
        ("misses in runs of 10 requests, same", sims.runs, cap, curve, long),
        ("the same, design effect ignored (1)", lambda s: sims.runs(s, naive=True), cap, curve, long),
        ("misses in runs of 20 requests, same", lambda s: sims.runs(s, run=20), cap, curve, long),
        ("a cliff (every probe passes, then over-saturates), 10 s probes", sims.cliff, sims.CLIFF_CAPACITY, queue,
         SearchSettings(start_rate=40.0, precision=0.2, budget_requests=10**6, budget_s=120.0)),
        ("M/M/16 queue (wait <= 0.3 s), same", sims.mmc, mm16, queue, long),
        ("M/M/1 queue (wait <= 0.3 s), same", lambda s: sims.mmc(s, c=1, mu=10.0), mm1, queue, long),
    ]  # fmt: skip
    print(f"nominal {args.confidence:.0%}, {args.runs} seeded searches each")
    for name, measure, truth, slo, settings in cases:
        share, width, conclusive = sims.coverage(measure, truth, slo, settings, args.runs)
        print(f"{name:<66} coverage {share:6.1%}  median half-width {width:6.1%}  conclusive alone {conclusive:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
