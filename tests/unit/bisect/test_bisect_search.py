"""canary.bisect.search with scripted judges (no engines): each judge is a function of the point and
of how many runs came before, standing in for real cell runs."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from canary.bisect.search import Judgement, Observation, Policy, SearchResult, Step, bisect

GOOD, BAD, UNKNOWN = Judgement("good", "pass"), Judgement("bad", "fail"), Judgement("unknown", "invalid")


class Scripted:
    """A judge from a rule (point, run number) -> observation; records the points it was asked."""

    def __init__(self, rule: Callable[[int, int], Observation]) -> None:
        self.rule = rule
        self.asked: list[int] = []

    def __call__(self, point: int) -> Judgement:
        self.asked.append(point)
        return Judgement(self.rule(point, len(self.asked)), f"scripted run {len(self.asked)}")


def deterministic(culprit: int) -> Scripted:
    return Scripted(lambda point, _run: "bad" if point >= culprit else "good")


def test_scripted_deterministic_fault_at_5_of_8_is_found_in_5_runs_with_both_ends_confirmed() -> None:
    judge = deterministic(5)
    result = bisect(8, judge)
    assert result.outcome == "found" and result.first_bad == 5
    assert judge.asked == [8, 0, 4, 6, 5]
    assert [s.phase for s in result.steps] == ["bad-end", "good-end", "search", "search", "search"]
    assert (result.good, result.bad) == (4, 5)
    assert result.counts(4) == (1, 0) and result.counts(5) == (0, 1)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 13])
def test_scripted_every_culprit_position_is_found_within_log2_plus_two_runs(n: int) -> None:
    for culprit in range(1, n + 1):
        judge = deterministic(culprit)
        result = bisect(n, judge)
        assert (result.outcome, result.first_bad) == ("found", culprit), (n, culprit, result.reason)
        assert len(judge.asked) <= 2 + max(1, (n - 1).bit_length())


def test_scripted_bad_end_that_passes_now_is_not_reproduced_and_names_no_patch() -> None:
    # The fault fired in the run being bisected, but not when the whole series runs again.
    result = bisect(8, Scripted(lambda _p, _r: "good"), Policy(prior_bad=1))
    assert result.outcome == "not-reproduced" and result.first_bad is None
    assert len(result.steps) == 1


def test_scripted_good_end_that_fails_is_inconclusive() -> None:
    result = bisect(8, Scripted(lambda _p, _r: "bad"))
    assert result.outcome == "inconclusive" and result.first_bad is None
    assert "good end" in result.reason and len(result.steps) == 2


def test_scripted_an_invalid_step_is_repeated_within_the_retry_budget() -> None:
    # The first run at point 4 is invalid (a CPU-starved client), the second measures it.
    rule_runs: dict[int, int] = {}

    def rule(point: int, _run: int) -> Observation:
        rule_runs[point] = rule_runs.get(point, 0) + 1
        if point == 4 and rule_runs[point] == 1:
            return "unknown"
        return "bad" if point >= 5 else "good"

    result = bisect(8, Scripted(rule), Policy(retries=2))
    assert (result.outcome, result.first_bad) == ("found", 5)
    assert [(s.point, s.observation) for s in result.steps if s.point == 4] == [(4, "unknown"), (4, "good")]


def test_scripted_a_point_that_stays_invalid_is_skipped_for_a_neighbour() -> None:
    judge = Scripted(lambda p, _r: "unknown" if p == 4 else ("bad" if p >= 6 else "good"))
    result = bisect(8, judge, Policy(retries=1))
    assert (result.outcome, result.first_bad) == ("found", 6)
    assert judge.asked.count(4) == 2


def test_scripted_the_culprit_next_to_an_unmeasurable_point_is_not_named() -> None:
    # Point 4 never measures and the boundary is at 4 or 5: no culprit can be told apart.
    judge = Scripted(lambda p, _r: "unknown" if p == 4 else ("bad" if p >= 5 else "good"))
    result = bisect(8, judge, Policy(retries=1))
    assert result.outcome == "inconclusive" and result.first_bad is None
    assert "could not be measured" in result.reason and (result.good, result.bad) == (3, 5)


def test_scripted_step_budget_stops_inconclusive_keeping_the_steps_and_the_interval() -> None:
    result = bisect(8, deterministic(5), Policy(max_runs=3))
    assert result.outcome == "inconclusive" and len(result.steps) == 3
    assert "step budget" in result.reason and (result.good, result.bad) == (4, 8)


def test_scripted_time_budget_stops_before_a_new_run() -> None:
    now = [0.0]

    def judge(point: int) -> Judgement:
        now[0] += 100.0
        return BAD if point >= 5 else GOOD

    result = bisect(8, judge, Policy(max_seconds=250), clock=lambda: now[0])
    assert result.outcome == "inconclusive" and "time budget" in result.reason
    assert len(result.steps) == 3


def test_scripted_ctrl_c_returns_the_steps_so_far_as_interrupted() -> None:
    seen: list[Step] = []

    def judge(point: int) -> Judgement:
        if len(seen) == 2:
            raise KeyboardInterrupt
        return BAD if point >= 5 else GOOD

    result = bisect(8, judge, on_step=seen.append)
    assert result.outcome == "interrupted" and result.first_bad is None
    assert [s.point for s in result.steps] == [8, 0] == [s.point for s in seen]


def test_scripted_confirm_2_reruns_each_side_of_the_boundary() -> None:
    judge = deterministic(5)
    result = bisect(8, judge, Policy(confirm=2, prior_bad=1))
    assert (result.outcome, result.first_bad) == ("found", 5)
    assert judge.asked == [8, 0, 4, 6, 5, 4, 5]
    assert "failed 2 of 2 runs" in result.reason and "passed 2 of 2" in result.reason


def test_scripted_prior_bad_counts_towards_the_bad_end_confirmation() -> None:
    judge = deterministic(8)
    result = bisect(8, judge, Policy(confirm=2, prior_bad=1))
    assert (result.outcome, result.first_bad) == ("found", 8)
    assert judge.asked.count(8) == 1  # the run's own failure + the re-confirmation


# --------------------------------------------------------------------------- flaky faults


def _flaky(culprit: int, fires: Callable[[int], bool]) -> Scripted:
    """A fault at `culprit` that fires on the runs where fires(run number) holds; harmless points pass."""
    return Scripted(lambda point, run: "bad" if point >= culprit and fires(run) else "good")


def _never_a_harmless_patch(result: SearchResult, culprit: int) -> None:
    assert result.outcome in ("found", "inconclusive", "not-reproduced"), result.reason
    if result.outcome == "found":
        assert result.first_bad == culprit, result.reason


def test_scripted_flaky_fault_missing_at_its_own_prefix_is_caught_by_confirmation() -> None:
    # Fires on every run except the one at point 5 during the search: with confirm 1 that miss would
    # make patch 6 (harmless) look guilty; confirm 2 reruns point 5, the fault fires, and the result
    # is inconclusive, never patch 6.
    misses = {5}
    judge = _flaky(5, lambda run: run not in misses)
    result = bisect(8, judge, Policy(confirm=2, prior_bad=1))
    assert judge.asked[:5] == [8, 0, 4, 6, 5]
    assert result.outcome == "inconclusive" and result.first_bad is None
    assert "point 5 passed 1 and failed 1" in result.reason


def test_scripted_flaky_fault_that_fires_in_the_run_only_is_not_reproduced() -> None:
    judge = _flaky(5, lambda _run: False)  # fired in the bisected run (prior_bad), never again
    result = bisect(8, judge, Policy(prior_bad=1))
    assert result.outcome == "not-reproduced" and result.first_bad is None and judge.asked == [8]


def test_scripted_flaky_fault_seen_to_miss_above_a_failure_is_inconclusive() -> None:
    # Fires at 8 and 6, misses at 7 during confirmation of ... a pass above a failure.
    def fires(run: int) -> bool:
        return run != 5

    judge = Scripted(lambda p, run: "bad" if (p >= 5 and fires(run)) else "good")
    result = bisect(8, judge, Policy(confirm=2, prior_bad=1))
    _never_a_harmless_patch(result, 5)


def _wrong_share(confirm: int, seeds: int = 400, rate: float = 0.6) -> tuple[float, dict[str, int]]:
    outcomes: dict[str, int] = {}
    wrong = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        result = bisect(8, _flaky(5, lambda _run, r=rng: r.random() < rate), Policy(confirm=confirm, prior_bad=1))
        outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
        if result.outcome == "found" and result.first_bad != 5:
            wrong += 1
        if result.outcome == "found":
            good, _ = result.counts(result.good)
            _, bad = result.counts(result.bad)
            assert good >= confirm and bad + (1 if result.bad == 8 else 0) >= confirm
    return wrong / seeds, outcomes


def test_scripted_random_flaky_fault_confirmation_makes_a_harmless_culprit_rare() -> None:
    # A fault that fires in 60% of runs (seeded, so the same every time). No finite number of runs can
    # prove a pass was not a miss (a miss streak at a harmless point looks exactly like a pass); what
    # confirmation buys is how rarely one survives: every `found` carries `confirm` agreeing runs on
    # each side, every disagreement ends inconclusive, and the whole series must fail `confirm` times
    # before the search starts. With confirm 1 (the fewest runs, for faults that fire every time) a
    # flaky fault gets a harmless patch named often; with confirm 4 almost never, and most searches
    # end not reproduced or inconclusive rather than guess.
    loose, _ = _wrong_share(confirm=1)
    strict, _ = _wrong_share(confirm=3)
    stricter, outcomes = _wrong_share(confirm=4)
    assert loose > 0.2
    assert strict < loose / 10 and stricter <= 0.01
    assert outcomes.get("found", 0) < outcomes.get("inconclusive", 0) + outcomes.get("not-reproduced", 0)


def test_scripted_non_monotone_range_is_inconclusive() -> None:
    # Patch 3 breaks, patch 6 fixes it, patch 8 breaks again: the search must not pick one silently
    # when it sees a pass above a failure.
    bad = {3, 4, 5, 8}
    judge = Scripted(lambda p, _r: "bad" if p in bad else "good")
    result = bisect(8, judge, Policy(confirm=2))
    assert result.outcome in ("inconclusive", "found")
    if result.outcome == "found":
        assert result.first_bad in (3, 8)
