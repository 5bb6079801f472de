"""How often the capacity search's interval holds the true capacity, on synthetic servers (seconds, no server).

    .venv/bin/python tests/bench/capacity_coverage.py [--runs 200] [--confidence 0.9]

One line per synthetic server of tests/support/capacity_sims.py: the share of seeded searches whose
reported interval (canary.load.capacity: fitted, else conclusive) holds the true capacity, and
their median half-width ((high - low) / (high + low)). docs/methodology/capacity.md quotes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from canary.load.capacity import CapacitySlo, SearchSettings
from tests.support import capacity_sims as sims


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--confidence", type=float, default=0.9)
    args = parser.parse_args(argv)
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
