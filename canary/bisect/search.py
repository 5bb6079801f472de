"""The search of `canary bisect`: a pure function over a judge, so scripted verdicts can test it.

The range is the points 0..n of an ordered list: the prefixes of a patch series (0 = no patch,
n = the whole series) or a list of images (0 = the known good one, n = the known bad one).
`judge(point)` runs the cell there once and returns a Judgement: good, bad, or unknown (the run
could not measure: an invalid or errored check). The first bad point c is the answer: point c-1 is
good and point c is bad; for a series, patch c is the culprit.

How the search treats noise:

- An unknown run is repeated, up to `Policy.retries` more times at that point; a point that stays
  unknown is skipped (the search measures the nearest other point of the interval) and, if it
  cannot be avoided, leaves the result inconclusive with the interval it narrowed to.
- The endpoints are re-confirmed first: the bad end must fail now, `confirm` times counting the
  run being bisected (else "not-reproduced": the fault does not reproduce, so no patch is named;
  or inconclusive once a run disagrees), and the good end must pass (else inconclusive: the failure
  is not caused by the range).
- The boundary is confirmed on both sides: point c-1 needs `Policy.confirm` good runs and point c
  `Policy.confirm` bad runs before c is reported. The runs the search already made there count
  (with confirm 1, both sides have always been observed directly, never inferred).
- Every observation is kept and checked against every other: a point seen both good and bad, or a
  good point above a bad one, is a fault that fires on some runs only (or a range that is not
  monotone); the search stops there as inconclusive, naming the runs that disagree, and never
  reports a patch past them.

A fault that fires on some runs only and missed every run at a point can still make that point look
good; no number of runs rules that out, only makes it less likely. `confirm` buys that: with
confirm k a culprit is only reported after k agreeing runs on each side of it, and any run that
fires where an earlier one did not ends the search as inconclusive.

The budget (`Policy.max_runs`, `Policy.max_seconds`) ends the search as inconclusive with the
steps so far and the interval narrowed to; Ctrl-C ends it as interrupted, likewise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from canary.judge.bisection import OUTCOME_CODES, Observation, Outcome, Phase

__all__ = ["OUTCOME_CODES", "Judgement", "Observation", "Outcome", "Phase", "Policy", "SearchResult", "Step", "bisect"]


@dataclass(frozen=True)
class Judgement:
    """What one run at a point said."""

    observation: Observation
    detail: str = ""
    """One line: the cell's verdict and why."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """What the run measured (check verdicts, failing gates, where its files are)."""


@dataclass(frozen=True)
class Step:
    """One run of the search."""

    number: int
    point: int
    phase: Phase
    observation: Observation
    detail: str
    evidence: dict[str, Any]
    duration_s: float


@dataclass(frozen=True)
class Policy:
    """How many runs the search may spend, and how sure it must be."""

    retries: int = 2
    """More runs of a point whose run was unknown (invalid, error) before it is skipped."""
    confirm: int = 1
    """Agreeing runs each side of the boundary needs (the search's own runs there count)."""
    max_runs: int = 12
    """Cell runs in all (the search stops as inconclusive when they are spent)."""
    max_seconds: float | None = None
    """Wall time in all; no new run starts after it."""
    prior_bad: int = 0
    """Bad runs of the whole range already known (the run being bisected): they count towards the
    confirmation of the bad end, never instead of re-running it."""


@dataclass
class SearchResult:
    """The answer and how it was reached."""

    outcome: Outcome
    reason: str
    n: int
    first_bad: int | None = None
    """The culprit (found only): the first bad point."""
    good: int = 0
    """Highest point known good (the interval narrowed to is good+1..bad)."""
    bad: int = 0
    """Lowest point known bad."""
    steps: list[Step] = field(default_factory=list)
    duration_s: float = 0.0

    def counts(self, point: int) -> tuple[int, int]:
        """(good runs, bad runs) at a point."""
        obs = [s.observation for s in self.steps if s.point == point]
        return obs.count("good"), obs.count("bad")


Judge = Callable[[int], Judgement]


class _Stop(Exception):
    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class _Search:
    def __init__(
        self,
        n: int,
        judge: Judge,
        policy: Policy,
        clock: Callable[[], float],
        on_step: Callable[[Step], None] | None,
        name: Callable[[int], str],
    ) -> None:
        self.n, self.judge, self.policy, self.clock, self.on_step = n, judge, policy, clock, on_step
        self.name = name
        self.started = clock()
        self.result = SearchResult(outcome="inconclusive", reason="", n=n, good=0, bad=n)

    # ------------------------------------------------------------------ runs

    def _budget_left(self) -> str | None:
        if len(self.result.steps) >= self.policy.max_runs:
            return f"the step budget of {self.policy.max_runs} cell runs is spent"
        if self.policy.max_seconds is not None and self.clock() - self.started >= self.policy.max_seconds:
            return f"the time budget of {self.policy.max_seconds:.0f}s is spent"
        return None

    def run(self, point: int, phase: Phase) -> Observation:
        """Run the point once (a budget check first), record the step, check consistency."""
        spent = self._budget_left()
        if spent is not None:
            raise _Stop("inconclusive", f"{spent}; {self._narrowed()}")
        started = self.clock()
        judgement = self.judge(point)
        step = Step(
            number=len(self.result.steps) + 1,
            point=point,
            phase=phase,
            observation=judgement.observation,
            detail=judgement.detail,
            evidence=dict(judgement.evidence),
            duration_s=round(self.clock() - started, 3),
        )
        self.result.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        self._check_consistent()
        return judgement.observation

    def observe(self, point: int, phase: Phase) -> Observation:
        """Run the point until it is good or bad, at most 1 + retries times; else unknown."""
        for _ in range(1 + self.policy.retries):
            observation = self.run(point, phase)
            if observation != "unknown":
                return observation
        return "unknown"

    def _check_consistent(self) -> None:
        goods = {s.point for s in self.result.steps if s.observation == "good"}
        bads = {s.point for s in self.result.steps if s.observation == "bad"}
        both = sorted(goods & bads)
        if both:
            g, b = self.result.counts(both[0])
            raise _Stop(
                "inconclusive",
                f"{self.name(both[0])} passed {g} and failed {b} of its runs: the failure fires on some runs only "
                "(flaky), so no culprit is named",
            )
        above = sorted(g for g in goods if bads and g > min(bads))
        if above:
            raise _Stop(
                "inconclusive",
                f"{self.name(above[-1])} passed but {self.name(min(bads))} below it failed: the failure fires on "
                "some runs only, or the range is not monotone; no culprit is named",
            )

    def _narrowed(self) -> str:
        good, bad = self.result.good, self.result.bad
        if bad - good == 1:
            return f"the boundary is between {self.name(good)} and {self.name(bad)}"
        return f"the culprit is one of positions {good + 1}..{bad}"

    # ------------------------------------------------------------------ phases

    def search(self) -> SearchResult:
        n, tries = self.n, 1 + self.policy.retries
        if n < 1:
            raise _Stop("inconclusive", "an empty range: nothing to search")
        bad_end = self.observe(n, "bad-end")
        if bad_end == "good":
            raise _Stop("not-reproduced", f"the bad end ({self.name(n)}) passed when run again: it did not reproduce")
        if bad_end == "unknown":
            raise _Stop("inconclusive", f"the bad end ({self.name(n)}) could not be measured in {tries} runs")
        self._confirm(n, "bad")  # a fault that does not fire `confirm` times in a row is not searched
        good_end = self.observe(0, "good-end")
        if good_end == "bad":
            raise _Stop(
                "inconclusive", f"the good end ({self.name(0)}) fails too: the failure is not caused by the range"
            )
        if good_end == "unknown":
            raise _Stop("inconclusive", f"the good end ({self.name(0)}) could not be measured in {tries} runs")
        unmeasurable: set[int] = set()
        while self.result.bad - self.result.good > 1:
            point = self._next_point(unmeasurable)
            if point is None:
                skipped = ", ".join(self.name(p) for p in sorted(unmeasurable))
                raise _Stop("inconclusive", f"{skipped} could not be measured; {self._narrowed()}")
            observation = self.observe(point, "search")
            if observation == "good":
                self.result.good = point
            elif observation == "bad":
                self.result.bad = point
            else:
                unmeasurable.add(point)
        self._confirm(self.result.good, "good")
        self._confirm(self.result.bad, "bad")
        self.result.first_bad = self.result.bad
        self.result.outcome = "found"
        g, _ = self.result.counts(self.result.good)
        _, b = self.result.counts(self.result.bad)
        if self.result.bad == n:
            b += self.policy.prior_bad
        self.result.reason = (
            f"first bad: {self.name(self.result.bad)} (failed {b} of {b} runs); "
            f"last good: {self.name(self.result.good)} (passed {g} of {g})"
        )
        return self.result

    def _next_point(self, unmeasurable: set[int]) -> int | None:
        good, bad = self.result.good, self.result.bad
        middle = (good + bad) // 2
        candidates = [p for p in range(good + 1, bad) if p not in unmeasurable]
        return min(candidates, key=lambda p: (abs(p - middle), p)) if candidates else None

    def _confirm(self, point: int, want: Observation) -> None:
        while True:
            g, b = self.result.counts(point)
            have = g if want == "good" else b + (self.policy.prior_bad if point == self.n else 0)
            if have >= self.policy.confirm:
                return
            if self.observe(point, "confirm") == "unknown":
                raise _Stop(
                    "inconclusive", f"{self.name(point)} could not be measured again to confirm; {self._narrowed()}"
                )


def bisect(
    n: int,
    judge: Judge,
    policy: Policy | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_step: Callable[[Step], None] | None = None,
    name: Callable[[int], str] = lambda point: f"point {point}",
) -> SearchResult:
    """Find the first bad point of 0..n (see the module doc). `on_step` sees every step as it ends
    (to persist it); `name` says what a point is in the reasons (`patches 01..04`); Ctrl-C returns
    the result so far as interrupted."""
    search = _Search(n, judge, policy or Policy(), clock, on_step, name)
    try:
        result = search.search()
    except _Stop as stop:
        result = search.result
        result.outcome, result.reason, result.first_bad = stop.outcome, stop.reason, None
    except KeyboardInterrupt:
        result = search.result
        result.outcome, result.first_bad = "interrupted", None
        result.reason = f"interrupted (Ctrl-C) after {len(result.steps)} runs; {search._narrowed()}"
    result.duration_s = round(clock() - search.started, 3)
    return result
