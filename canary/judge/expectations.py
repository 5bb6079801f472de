"""A cell's verdict from its checks and its expectation (a known bug: xfail semantics).

An expectation says a cell is known to fail (at startup, with a failure class, or in named checks).
A failure it covers is `expected-fail`; the absence of that failure is `unexpected-pass`; a failure
it does not cover is never masked.
"""

from __future__ import annotations

from canary.judge.results import CheckResult, Verdict, worst
from canary.plan.cell import Cell


def apply_expectation(cell: Cell, checks: list[CheckResult]) -> tuple[Verdict, str]:
    """The cell verdict from its checks and its expectation (xfail semantics)."""
    verdicts = [c.verdict for c in checks]
    raw = worst(verdicts)
    failed = [c for c in checks if c.verdict in ("fail", "error")]
    reason = "; ".join(f"{c.name}: {c.summary}" for c in failed) or "; ".join(
        f"{c.name}: {c.summary}" for c in checks if c.verdict == raw
    )
    expect = cell.expect
    if expect is None or expect.expect == "pass":
        return raw, reason
    startup = next((c for c in checks if c.name == "startup"), None)
    if expect.expect == "startup-fail":
        if startup is None or startup.verdict == "pass":
            return "unexpected-pass", f"expected startup failure did not happen ({expect.reason})"
        observed = str(startup.evidence.get("failure_class", ""))
        if expect.failure_class and observed != expect.failure_class:
            return "fail", f"startup failed as {observed or 'unclassified'}, expected {expect.failure_class}"
        return "expected-fail", f"{expect.reason} (classified {observed or 'unclassified'})"
    if startup is not None and startup.evidence.get("serving") is False:
        # check-fail means: it starts, serves, and a check fails; a crash at startup is another outcome
        return "fail", f"expected the cell to start and fail a check, but it did not start: {startup.summary}"
    if expect.failing_checks is None:
        if failed:
            return "expected-fail", f"{expect.reason} ({reason})"
        return "unexpected-pass", f"expected a check failure did not happen ({expect.reason})"
    expected = set(expect.failing_checks)
    others = [c for c in failed if c.name not in expected]
    if others:  # a failure the expectation does not cover is never masked
        return worst([c.verdict for c in others]), "; ".join(f"{c.name}: {c.summary}" for c in others)
    # Only a named check that ran and passed is evidence against the expectation. One that did not run
    # (disabled in this run, e.g. `--set checks.parity.enabled=false`) or could not judge (invalid,
    # skipped) is no evidence either way: turning a check off must not turn a known bug into a finding.
    by_name = {c.name: c.verdict for c in checks}
    passed = [name for name in expect.failing_checks if by_name.get(name) == "pass"]
    if passed:
        return "unexpected-pass", f"{', '.join(passed)} did not fail as expected ({expect.reason})"
    failed_names = {c.name for c in failed}
    unjudged = [f"{n} ({by_name.get(n, 'not run')})" for n in expect.failing_checks if n not in failed_names]
    if not failed:
        named = {by_name.get(name) for name in expect.failing_checks}
        none_judged: Verdict = "invalid" if "invalid" in named else "skipped"
        return none_judged, f"expectation not judged: {', '.join(unjudged)} ({expect.reason})"
    not_judged = f"; not judged: {', '.join(unjudged)}" if unjudged else ""
    return "expected-fail", f"{expect.reason} ({reason}{not_judged})"
