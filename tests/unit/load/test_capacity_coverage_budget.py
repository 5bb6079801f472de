"""tests/bench/capacity_coverage.py --bench-budget: the capacity search at make bench-capacity's budget (issue 43),
on synthetic servers of known capacity (seconds, no server)."""

from __future__ import annotations

from canary.load.capacity import CapacitySlo, SearchSettings
from tests.bench import capacity_coverage as coverage
from tests.support import capacity_sims as sims

SLO = CapacitySlo(ttft_s=sims.T, itl_s=0.05, attainment=sims.TARGET, confidence=0.9)
BENCH = SearchSettings(
    start_rate=0.8 * sims.CURVE_CAPACITY, precision=0.2, half_width=0.1, budget_requests=10**6, budget_s=1e9,
    max_probes=9,
)  # fmt: skip


def test_independent_misses_reach_ten_percent_within_the_bench_budget_and_cover_the_capacity() -> None:
    got = coverage.budget_summary(lambda s: sims.binomial(s, seconds=60.0), sims.CURVE_CAPACITY, SLO, BENCH, 20)
    assert got["reached"] == 1.0 and got["coverage"] >= 0.9
    assert got["median"] <= got["p90"] <= 0.1


def test_burst_misses_like_the_real_servers_leave_many_searches_wider_than_ten_percent() -> None:
    """Misses in runs of 25 requests (design effect ~49, as the real probes measured): 9 probes of ~460 requests
    reach +-10% in about half the searches (48% of 200 seeds), and the p90 half-width is far wider."""
    measure = lambda s: sims.runs(s, run=25, seconds=60.0)  # noqa: E731
    got = coverage.budget_summary(measure, sims.CURVE_CAPACITY, SLO, BENCH, 40)
    assert 0.2 <= got["reached"] <= 0.8 and got["p90"] > 0.2
    assert got["coverage"] >= 0.85  # wide, not wrong
