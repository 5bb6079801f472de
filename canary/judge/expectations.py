"""A cell's verdict from its checks and its expectation (a known bug: xfail semantics).

An expectation says a cell is known to fail (at startup, with a failure class, or in named checks).
A failure it covers is `expected-fail`; the absence of that failure is `unexpected-pass`; a failure
it does not cover is never masked.

Evidence first: only a `fail` (a gate that held evidence and did not hold) can meet an expectation.
A check that crashed (`error`) measured nothing, so it is never the known bug; an engine that died
while the cell was checked (the runner's `engines` result) is a finding of its own that only an
expectation naming the crash (`engine_dies: true`) covers.
"""

from __future__ import annotations

from canary.judge.results import CheckResult, Verdict, worst
from canary.plan.cell import Cell

ENGINES_CHECK = "engines"
"""The runner's result for the cell's engine processes, present when one died while its cell was checked."""


def _lines(checks: list[CheckResult]) -> str:
    return "; ".join(f"{c.name}: {c.summary}" for c in checks)


def apply_expectation(cell: Cell, checks: list[CheckResult]) -> tuple[Verdict, str]:
    """The cell verdict from its checks and its expectation (xfail semantics)."""
    if not checks:
        return "error", "no check ran on this cell: nothing was judged"
    raw = worst([c.verdict for c in checks])
    failed = [c for c in checks if c.verdict == "fail"]
    errors = [c for c in checks if c.verdict == "error"]
    reason = _lines(failed + errors) or _lines([c for c in checks if c.verdict == raw])
    expect = cell.expect
    if expect is None or expect.expect == "pass":
        return raw, reason
    startup = next((c for c in checks if c.name == "startup"), None)
    if expect.expect == "startup-fail":
        return _startup_fail(cell, checks, startup)
    if startup is not None and startup.evidence.get("serving") is False:
        # check-fail means: it starts, serves, and a check fails; a crash at startup is another outcome
        return "fail", f"expected the cell to start and fail a check, but it did not start: {startup.summary}"
    return _check_fail(cell, checks, failed, errors)


def _startup_fail(cell: Cell, checks: list[CheckResult], startup: CheckResult | None) -> tuple[Verdict, str]:
    assert cell.expect is not None
    expect = cell.expect
    if startup is None or startup.verdict in ("error", "invalid"):
        # The target raised before the startup check, or the check could not judge: nothing says
        # whether the engine failed to start as expected. Never unexpected-pass ("vLLM got fixed").
        why = _lines(checks) if startup is None else f"startup: {startup.summary}"
        verdict: Verdict = "invalid" if startup is not None and startup.verdict == "invalid" else "error"
        return verdict, f"expected startup failure not judged: {why} ({expect.reason})"
    if startup.verdict == "pass":
        return "unexpected-pass", f"expected startup failure did not happen ({expect.reason})"
    observed = str(startup.evidence.get("failure_class", ""))
    if expect.failure_class and observed != expect.failure_class:
        return "fail", f"startup failed as {observed or 'unclassified'}, expected {expect.failure_class}"
    return "expected-fail", f"{expect.reason} (classified {observed or 'unclassified'})"


def _check_fail(
    cell: Cell, checks: list[CheckResult], failed: list[CheckResult], errors: list[CheckResult]
) -> tuple[Verdict, str]:
    assert cell.expect is not None
    expect = cell.expect
    died = next((c for c in failed if c.name == ENGINES_CHECK), None)
    if died is not None and not expect.engine_dies:
        return "fail", f"{died.summary} (not the expected failure: {expect.reason})"
    covered = [c for c in failed if c.name != ENGINES_CHECK]
    if expect.failing_checks is not None:
        expected = set(expect.failing_checks)
        others = [c for c in covered if c.name not in expected]
        if others:  # a failure the expectation does not cover is never masked
            return "fail", _lines(others)
    if died is not None:  # the crash the expectation names; checks that errored met the dying server
        return "expected-fail", f"{expect.reason} ({died.summary})"
    if errors:  # a crashed check measured nothing: it is never the known bug, and the run must say so
        return "error", f"{_lines(errors)} (expected failure not judged: {expect.reason})"
    if expect.failing_checks is None:
        if covered:
            return "expected-fail", f"{expect.reason} ({_lines(covered)})"
        return _none_judged_or_passed(checks, [c.name for c in checks if c.name != ENGINES_CHECK], expect.reason)
    # Only a named check that ran and passed is evidence against the expectation. One that did not run
    # (disabled in this run, e.g. `--set checks.parity.enabled=false`) or could not judge (invalid,
    # ungated, skipped) is no evidence either way: turning a check off must not turn a known bug into a finding.
    by_name = {c.name: c.verdict for c in checks}
    passed = [name for name in expect.failing_checks if by_name.get(name) == "pass"]
    if passed:
        return "unexpected-pass", f"{', '.join(passed)} did not fail as expected ({expect.reason})"
    failed_names = {c.name for c in covered}
    unjudged = [f"{n} ({by_name.get(n, 'not run')})" for n in expect.failing_checks if n not in failed_names]
    if not covered:
        named = {by_name.get(name) for name in expect.failing_checks}
        none_judged: Verdict = "invalid" if "invalid" in named else "skipped"
        return none_judged, f"expectation not judged: {', '.join(unjudged)} ({expect.reason})"
    not_judged = f"; not judged: {', '.join(unjudged)}" if unjudged else ""
    return "expected-fail", f"{expect.reason} ({_lines(covered)}{not_judged})"


def _none_judged_or_passed(checks: list[CheckResult], names: list[str], why: str) -> tuple[Verdict, str]:
    """An expectation of any failing check where none failed: unexpected-pass if one passed, else not judged."""
    by_name = {c.name: c.verdict for c in checks}
    if any(by_name.get(n) == "pass" for n in names if n != "startup") or all(by_name.get(n) == "pass" for n in names):
        return "unexpected-pass", f"expected a check failure did not happen ({why})"
    verdict: Verdict = "invalid" if "invalid" in by_name.values() else "skipped"
    return verdict, f"expectation not judged: {', '.join(f'{n} ({by_name[n]})' for n in names)} ({why})"
