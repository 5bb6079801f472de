"""How often a paired check ends inconclusive, and how many pairs it spends, per window policy (simulated).

    .venv/bin/python tests/bench/paired_policies.py [--ratio 0.97] [--pair-sd 0.19] [--runs 1000]

Each simulated run draws its true ratio around `--ratio` (log-sd `--run-sd`: what one deployment adds),
then per pair a log ratio with Student-t(5) tails scaled to `--pair-sd` (measured on 2 cores: 0.18-0.19
per pair of 16-request windows with the helpers off decode's core, 0.15-0.31 without), and judges them
with canary.core.paired exactly as the check does (trim 0.2, 95%), one look or sequential (pairs,
max_pairs). It prints, per policy and margin, the share of runs that end inconclusive (a false
`inconclusive` when the candidate is as good as the ratio says), that end in regress, the mean pairs
measured and the share that needed more than the first look. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from canary.core.paired import Window, paired_verdict

POLICIES: list[tuple[int, int, float]] = [
    (16, 16, 0.25),
    (16, 16, 0.15),
    (32, 32, 0.15),
    (16, 32, 0.15),
    (24, 48, 0.15),
    (20, 40, 0.15),
    (32, 64, 0.15),
    (16, 32, 0.20),
]
"""(pairs, max_pairs, margin): cpu-default ran 16 at 25% before this table, then 16 then 32 at 20%, and since
2026-12-04 24 then 48 at 15% (its baseline pair kept frozen from its own cell, canary/run/held.py)."""


def _pair_log_ratio(rng: random.Random, mean: float, sd: float) -> float:
    """A Student-t(5) draw scaled to standard deviation `sd` (heavier tails than a normal: window stalls)."""
    chi2 = sum(rng.gauss(0, 1) ** 2 for _ in range(5)) / 5
    return mean + sd * math.sqrt(3 / 5) * rng.gauss(0, 1) / math.sqrt(chi2)


def simulate(
    rng: random.Random, pairs: int, max_pairs: int, margin: float, ratio: float, run_sd: float, pair_sd: float
) -> tuple[str, int]:
    """One paired check: (outcome, pairs measured)."""
    looks = -(-max_pairs // pairs)
    mean = rng.gauss(math.log(ratio), run_sd)
    windows: list[Window] = []
    measured = 0
    outcome = "inconclusive"
    for _ in range(looks):
        for pair in range(measured, min(measured + pairs, max_pairs)):
            windows.append(Window(0, pair, "baseline", 10.0))
            windows.append(Window(0, pair, "candidate", 10.0 * math.exp(_pair_log_ratio(rng, mean, pair_sd))))
        measured = min(measured + pairs, max_pairs)
        outcome = paired_verdict(windows, margin=margin, confidence=0.95, trim=0.2, looks=looks).outcome
        if outcome != "inconclusive":
            break
    return outcome, measured


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--ratio", type=float, default=0.97, help="true candidate/baseline ratio (center)")
    parser.add_argument("--run-sd", type=float, default=0.03, help="log-sd of the true ratio between runs")
    parser.add_argument("--pair-sd", type=float, default=0.19, help="log-sd of one pair's ratio")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"true ratio ~{args.ratio} (run log-sd {args.run_sd}), pair log-sd {args.pair_sd}, {args.runs} runs each")
    print("pairs  max  margin  inconclusive  regress  mean pairs  more than one look")
    for pairs, max_pairs, margin in POLICIES:
        results = [
            simulate(rng, pairs, max_pairs, margin, args.ratio, args.run_sd, args.pair_sd) for _ in range(args.runs)
        ]
        share = {o: sum(r[0] == o for r in results) / args.runs for o in ("inconclusive", "regress")}
        mean_pairs = sum(r[1] for r in results) / args.runs
        longer = sum(r[1] > pairs for r in results) / args.runs
        print(
            f"{pairs:5d} {max_pairs:4d} {margin:7.0%} {share['inconclusive']:13.1%} {share['regress']:8.1%} "
            f"{mean_pairs:11.1f} {longer:19.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
