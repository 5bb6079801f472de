"""Judging a selftest's runs: a clean run's false alarms, and whether (and how fast) a fault's run
made its expected check fail."""

from __future__ import annotations

import time
from collections.abc import Callable

from canary.judge.results import FAILING_VERDICTS, CellResult, CheckResult, RunResult
from canary.selftest.model import FaultSpec


class ProgressClock:
    """Progress callback that forwards to a printer and remembers when each line was said."""

    def __init__(self, printer: Callable[[str], None]) -> None:
        self.printer = printer
        self.lines: list[tuple[float, str]] = []

    def __call__(self, message: str) -> None:
        self.lines.append((time.monotonic(), message))
        self.printer(message)

    def first(self, prefix: str) -> float | None:
        """Monotonic time of the first line starting with prefix."""
        return next((t for t, line in self.lines if line.startswith(prefix)), None)


def judge_clean(run: RunResult) -> tuple[list[str], dict[str, str]]:
    """False alarms of a clean run: every cell with a failing verdict; a run without a started
    cell is an alarm too (it proves nothing)."""
    alarms = [f"{c.cell.id}: {c.verdict} ({c.reason})" for c in run.cells if c.verdict in FAILING_VERDICTS]
    started = [c for c in run.cells if (s := c.check("startup")) is not None and s.verdict in ("pass", "ungated")]
    if not started:
        alarms.append("no cell started: the clean run proves nothing")
    if run.interrupted:
        alarms.append("interrupted")
    return alarms, {c.cell.id: c.verdict for c in run.cells}


def judge_fault(
    run: RunResult, fault: FaultSpec, fault_image: str, run_started: float, clock: ProgressClock | None = None
) -> tuple[bool, list[str], list[str], str, float | None]:
    """(detected, fired checks, errored checks, detail, time to verdict) of one fault's run."""
    cells = [c for c in run.cells if c.cell.image == fault_image]
    fired: list[str] = []
    errors: list[str] = []
    reasons: list[str] = []
    detected = False
    when: float | None = None
    for cell in cells:
        offset = (cell.started_at - run.started_at).total_seconds()
        for check in cell.checks:
            if check.verdict == "fail" and check.name not in fired:
                fired.append(check.name)
            if check.verdict == "error" and check.name not in errors:
                errors.append(check.name)
            if check.name != fault.expect_check or check.verdict != "fail":
                continue
            ok, why = _matches_expectation(check.evidence, [g.name for g in check.gates if not g.passed], fault)
            reasons.append(f"{cell.cell.id}: {why}")
            if ok and not detected:
                detected = True
                said = clock.first(f"  {cell.cell.id}: {check.name} -> ") if clock else None
                when = said - run_started if said is not None else offset + cell.duration_s
    if fault.expect_shift is not None:  # the number must move, whatever else fired
        detected, why = judge_shift(run, cells, fault)
        reasons = [why + (f"; {fault.expect_check} also failed" if fault.expect_check in fired else "")]
        when = max((c.started_at - run.started_at).total_seconds() + c.duration_s for c in cells) if detected else None
    masked = [c for c in cells if c.cell.expect is not None and c.verdict not in FAILING_VERDICTS]
    if detected and masked:  # the check fired, but the cell's verdict let the run say OK
        detected = False
        reasons.append("masked as the known bug: " + ", ".join(f"{c.cell.id} {c.verdict}" for c in masked))
    if not detected and not reasons:
        seen = ", ".join(f"{c.cell.id}: {c.verdict}" for c in cells) or "no cell of the faulty image ran"
        reasons.append(f"{fault.expect_check} did not fail ({seen})")
    return detected, fired, errors, "; ".join(reasons), round(when, 1) if when is not None else None


def judge_shift(run: RunResult, cells: list[CellResult], fault: FaultSpec) -> tuple[bool, str]:
    """Whether the fault moved its expect_shift metric against the same cell on the clean baseline image."""
    shift = fault.expect_shift
    assert shift is not None
    found: list[str] = []
    for cell in cells:
        want = {**cell.cell.axis_values(), "image": run.baseline_image}
        base = next((c for c in run.cells if c.cell.axis_values() == want), None)
        mine, theirs = cell.check(fault.expect_check), base.check(fault.expect_check) if base else None
        if mine is None or theirs is None:
            found.append(f"{cell.cell.id}: no {fault.expect_check} result on both images")
            continue

        def delta(key: str, a: CheckResult = mine, b: CheckResult = theirs) -> float | None:
            x, y = a.metrics.get(key), b.metrics.get(key)
            return None if x is None or y is None else x - y

        moved = delta(shift.metric)
        others = ", ".join(f"{k} {_signed(delta(k))}" for k in shift.compare)
        words = f"{shift.metric} {_signed(moved)} vs the clean image" + (f" ({others})" if others else "")
        if moved is not None and moved >= shift.min:
            return True, f"{cell.cell.id}: shown: {words}"
        found.append(f"{cell.cell.id}: not shown (needs +{shift.min:g}): {words}")
    return False, "; ".join(found) or "no cell of the faulty image ran"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4g}"


def _matches_expectation(evidence: dict[str, object], failed_gates: list[str], fault: FaultSpec) -> tuple[bool, str]:
    if fault.expect_failure_class is not None:
        observed = evidence.get("failure_class")
        if observed != fault.expect_failure_class:
            return False, f"failed, but classified {observed or 'unclassified'}, not {fault.expect_failure_class}"
    if fault.expect_gate is not None and not any(g.startswith(fault.expect_gate) for g in failed_gates):
        return False, f"failed, but no failing gate {fault.expect_gate}* (failing: {failed_gates or 'none'})"
    what = [f"class {evidence.get('failure_class')}"] if fault.expect_failure_class else []
    what += [f"gates {', '.join(failed_gates)}"] if failed_gates else []
    return True, "fired" + (f" ({'; '.join(what)})" if what else "")
