"""canary.core.paired: the t quantile (against scipy), the outcome rule, the ABBA order, and the
design question on simulated data: with deployment-level modes (the 2-core machine's: a deployment
holds one speed for its life) an interval over one deployment's windows raises false alarms, an
interval over redeploy rounds does not, and both still see a 25% loss."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as scipy_stats
from scipy.stats import mstats

from canary.core.paired import (
    Window,
    abba_order,
    outcome_of,
    paired_verdict,
    t_cdf,
    t_two_sided,
    trimmed_interval,
)

MARGIN = 0.15


@pytest.mark.parametrize("df", [1, 2, 3, 5, 7, 15, 40])
@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_the_t_quantile_matches_scipy(df: int, confidence: float) -> None:
    assert t_two_sided(confidence, df) == pytest.approx(scipy_stats.t.ppf(0.5 + confidence / 2, df), rel=1e-7)


@pytest.mark.parametrize("t", [-6.0, -1.3, -0.2, 0.0, 0.7, 2.5, 9.0])
def test_the_t_cdf_matches_scipy(t: float) -> None:
    for df in (1, 3, 11):
        assert t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), abs=1e-10)


def test_outcomes_against_the_margin() -> None:
    assert outcome_of(0.86, 1.2, 0.15) == "pass"
    assert outcome_of(0.60, 0.84, 0.15) == "regress"
    assert outcome_of(0.80, 1.05, 0.15) == "inconclusive"
    assert outcome_of(1.3, 1.5, 0.15) == "pass"  # a faster candidate is never a regression


def test_abba_order_alternates_which_arm_goes_first() -> None:
    assert abba_order(3) == [
        (0, "baseline"), (0, "candidate"), (1, "candidate"), (1, "baseline"), (2, "baseline"), (2, "candidate"),
    ]  # fmt: skip


def _windows(ratios_by_round: list[list[float]], base: float = 10.0) -> list[Window]:
    out: list[Window] = []
    for rnd, ratios in enumerate(ratios_by_round):
        for pair, ratio in enumerate(ratios):
            out.append(Window(rnd, pair, "baseline", base))
            out.append(Window(rnd, pair, "candidate", base * ratio))
    return out


def test_one_round_takes_the_interval_over_its_pairs() -> None:
    verdict = paired_verdict(_windows([[0.98, 1.02, 1.0, 0.99]]), margin=MARGIN, confidence=0.95)
    logs = [math.log(r) for r in (0.98, 1.02, 1.0, 0.99)]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 3)
    half = scipy_stats.t.ppf(0.975, 3) * sd / 2
    assert verdict.ratio == pytest.approx(math.exp(mean))
    assert (verdict.low, verdict.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert verdict.outcome == "pass" and verdict.rounds == 1 and verdict.pairs == 4 and verdict.degrees_of_freedom == 3


def test_rounds_take_the_interval_over_round_means() -> None:
    verdict = paired_verdict(_windows([[0.7, 0.72], [0.69, 0.71], [0.73, 0.7]]), margin=MARGIN, confidence=0.95)
    assert verdict.rounds == 3 and verdict.degrees_of_freedom == 2 and len(verdict.round_log_ratios) == 3
    assert verdict.outcome == "regress" and verdict.high < 0.85


def test_too_few_pairs_is_an_error_not_a_verdict() -> None:
    with pytest.raises(ValueError, match="at least 2 units"):
        paired_verdict(_windows([[1.0]]), margin=MARGIN, confidence=0.95)
    incomplete = [Window(0, 0, "baseline", 10.0), Window(0, 1, "candidate", 10.0)]
    with pytest.raises(ValueError, match="0 complete pairs"):
        paired_verdict(incomplete, margin=MARGIN, confidence=0.95)


def _simulate(rng: random.Random, loss: float, rounds: int, pairs: int, sd_deploy: float, sd_window: float) -> str:
    """One paired run: each round deploys both arms (a log-normal deployment mode each), then windows."""
    windows: list[Window] = []
    for rnd in range(rounds):
        mode_a, mode_b = rng.gauss(0, sd_deploy), rng.gauss(0, sd_deploy)
        for pair in range(pairs):
            drift = rng.gauss(0, 0.1)  # the machine's drift hits both arms of a pair alike
            windows.append(Window(rnd, pair, "baseline", 10 * math.exp(mode_a + drift + rng.gauss(0, sd_window))))
            cand = 10 * (1 - loss) * math.exp(mode_b + drift + rng.gauss(0, sd_window))
            windows.append(Window(rnd, pair, "candidate", cand))
    return paired_verdict(windows, margin=MARGIN, confidence=0.95).outcome


# Window noise of log-sd 0.08 (24-request windows of the tiny model). Deployment modes of log-sd 0.2
# per arm (the 1.5-2x spread between deployments of one image, were it all per deployment; measured
# since: about 0.10 for the log ratio of a pair of deployments, docs/methodology/throughput.md), or
# none (were it all the machine's drift over time, which pairs cancel).
SD_WINDOW = 0.08
SD_DEPLOY = 0.2


def test_one_deployment_per_arm_false_alarms_under_deployment_modes() -> None:
    rng = random.Random(1)
    outcomes = [_simulate(rng, 0.0, 1, 8, SD_DEPLOY, SD_WINDOW) for _ in range(400)]
    # the windows cannot see a deployment's mode: a clean candidate often comes out "regress"
    assert outcomes.count("regress") / len(outcomes) > 0.1


def test_redeploy_rounds_keep_clean_runs_quiet_under_deployment_modes() -> None:
    rng = random.Random(2)
    clean = [_simulate(rng, 0.0, 4, 3, SD_DEPLOY, SD_WINDOW) for _ in range(400)]
    assert clean.count("regress") / len(clean) <= 0.025
    lossy = [_simulate(rng, 0.25, 4, 3, SD_DEPLOY, SD_WINDOW) for _ in range(400)]
    assert lossy.count("pass") / len(lossy) <= 0.025  # a 25% loss is never called fine ...
    assert lossy.count("regress") > 0  # ... but four rounds see it only sometimes: modes cost power


def test_without_deployment_modes_one_round_is_quiet_and_powerful() -> None:
    rng = random.Random(3)
    clean = [_simulate(rng, 0.0, 1, 8, 0.0, SD_WINDOW) for _ in range(400)]
    assert clean.count("regress") / len(clean) <= 0.01
    assert clean.count("pass") / len(clean) >= 0.85
    lossy = [_simulate(rng, 0.25, 1, 8, 0.0, SD_WINDOW) for _ in range(400)]
    assert lossy.count("regress") / len(lossy) >= 0.6 and lossy.count("pass") == 0


@pytest.mark.parametrize("n", [6, 8, 10, 13])
def test_the_trimmed_interval_is_yuens_as_scipy_computes_it(n: int) -> None:
    rng = random.Random(n)
    units = [rng.gauss(0, 0.1) for _ in range(n)]
    center, half, df = trimmed_interval(units, 0.95, 0.2)
    g = math.floor(0.2 * n)
    low, high = mstats.trimmed_mean_ci(units, limits=(g / n, g / n), alpha=0.05)
    assert df == n - 2 * g - 1
    assert (center - half, center + half) == pytest.approx((low, high), rel=1e-9)


def test_trimming_absorbs_a_pair_that_straddles_a_change_of_speed() -> None:
    # measured (a clean run of configs/paired.yaml, 2026-12-03): the machine went from ~14 to ~9 req/s
    # between the two windows of pair 2; every other pair agrees within 17%
    logs = [-0.005, 0.166, -0.616, -0.073, -0.022, 0.027]
    windows = _windows([[math.exp(v) for v in logs]])
    assert paired_verdict(windows, margin=MARGIN, confidence=0.95).outcome == "inconclusive"
    trimmed = paired_verdict(windows, margin=MARGIN, confidence=0.95, trim=0.2)
    assert trimmed.outcome == "pass" and trimmed.degrees_of_freedom == 3
    slower = _windows([[0.7 * math.exp(v) for v in logs]])  # the same run 30% slower is still seen
    assert paired_verdict(slower, margin=MARGIN, confidence=0.95, trim=0.2).outcome == "regress"


def test_a_planned_look_splits_the_confidence() -> None:
    windows = _windows([[0.93, 1.01, 0.97, 0.9, 1.04, 0.95]])
    split = paired_verdict(windows, margin=MARGIN, confidence=0.95, looks=2)
    alone = paired_verdict(windows, margin=MARGIN, confidence=0.975)
    assert (split.low, split.high) == pytest.approx((alone.low, alone.high))
    assert split.looks == 2 and split.confidence == 0.95 and split.look_confidence == pytest.approx(0.975)
    assert split.to_json()["look_confidence"] == pytest.approx(0.975)
    assert "over up to 2 looks, 97.5% each" in split.sentence()


def _sequential(rng: random.Random, ratio: float, pairs: int, looks: int, per_look: float) -> str:
    """A sequential run at the true `ratio`: a look after each `pairs`, the next only while inconclusive."""
    windows: list[Window] = []
    outcome = "inconclusive"
    for look in range(looks):
        for pair in range(look * pairs, (look + 1) * pairs):
            windows.append(Window(0, pair, "baseline", 10.0))
            windows.append(Window(0, pair, "candidate", 10.0 * ratio * math.exp(rng.gauss(0, 0.2))))
        outcome = paired_verdict(windows, margin=MARGIN, confidence=per_look, trim=0.2).outcome
        if outcome != "inconclusive":
            break
    return outcome


def test_looking_again_while_inconclusive_keeps_false_passes_within_the_confidence() -> None:
    # A candidate exactly at the floor (0.85): a pass is wrong. Reading a 95% interval after every 16 pairs
    # and going on while inconclusive passes it more often than 2.5% (one side of 95%); the Bonferroni
    # split over the planned looks does not.
    floor = 1.0 - MARGIN
    rng = random.Random(7)
    naive = [_sequential(rng, floor, 16, 4, 0.95) for _ in range(600)]
    split = [_sequential(rng, floor, 16, 4, 1 - 0.05 / 4) for _ in range(600)]
    assert naive.count("pass") / 600 > 0.045  # 0.063 with this seed
    assert split.count("pass") / 600 <= 0.03  # 0.023
