"""The run's outcome in one line, the same words in the terminal, summary.md and summary.html.

OK: every cell passed or failed as expected. FAILED: a cell has a definitive finding (fail,
unexpected-pass), named with its failing checks' summaries: "FAILED: 1 cell failed:
pd.cpu_attn.p32-d64.auto.v1.baseline parity: greedy tokens identical to the control for 80% of
prompts". INCONCLUSIVE: the only cells that did not pass could not be measured (invalid, error):
"INCONCLUSIVE: 1 cell could not be measured: client CPU-starved; rerun". The classes and which
verdict falls in which come from canary.judge.verdicts. The reports open with the same line and list
every cell that did not pass with its cause (`not_passing`).
"""

from __future__ import annotations

from canary.core.words import cut
from canary.judge.results import CAUSE_KEY, CellResult, CheckResult, RunResult
from canary.judge.verdicts import DEFINITIVE_FAILURES, INCONCLUSIVE_VERDICTS, OUTCOME_WORD

MAX_CAUSE_CHARS = 80
MAX_NAMED_CELLS = 1
"""The headline says why for this many failed cells and names the others (the reports list each
with why, below the headline)."""


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return cut(line, MAX_CAUSE_CHARS)


def cause(result: CellResult) -> str:
    """Why a cell could not be measured, in a few words: its inconclusive checks' causes (the
    check's evidence `cause`, else its summary's first line), else the cell's reason."""
    causes: list[str] = []
    for check in result.checks:
        if check.verdict not in INCONCLUSIVE_VERDICTS:
            continue
        given = check.evidence.get(CAUSE_KEY)
        text = given if isinstance(given, str) and given else f"{check.name}: {_short(check.summary)}"
        if text not in causes:
            causes.append(text)
    return ", ".join(causes) or _short(result.reason) or result.verdict


def finding(result: CellResult) -> str:
    """Why a cell failed, in a few words: per definitively failing check, the first gate that did
    not hold in its own words (its detail), else the check's summary (first line); with the failure
    class when a log signature classified it. Else the cell's reason (e.g. an unexpected pass)."""
    findings: list[str] = []
    for check in result.checks:
        if check.verdict not in DEFINITIVE_FAILURES:
            continue
        gate = next((g.detail for g in check.gates if not g.passed and g.detail.strip()), "")
        fclass = check.evidence.get("failure_class")
        klass = f" ({fclass})" if isinstance(fclass, str) and fclass else ""
        findings.append(f"{check.name}: {_short(gate or check.summary)}{klass}")
    return ", ".join(findings) or _short(result.reason) or result.verdict


def why(result: CellResult) -> str:
    """A cell's finding when it failed, its cause when it could not be measured, else its reason."""
    if result.verdict in DEFINITIVE_FAILURES:
        return finding(result)
    if result.verdict in INCONCLUSIVE_VERDICTS:
        return cause(result)
    return _short(result.reason)


def not_passing(run: RunResult) -> list[CellResult]:
    """The cells that keep the run from passing, definitive findings first (each group in plan order)."""
    failed = [c for c in run.cells if c.verdict in DEFINITIVE_FAILURES]
    return failed + [c for c in run.cells if c.verdict in INCONCLUSIVE_VERDICTS]


def status_word(run: RunResult) -> str:
    """OK, INCONCLUSIVE or FAILED."""
    return OUTCOME_WORD[run.outcome]


def headline(run: RunResult) -> str:
    """The run's outcome in one line (plain text)."""
    unmeasured = [c for c in run.cells if c.verdict in INCONCLUSIVE_VERDICTS]
    causes: list[str] = []
    for result in unmeasured:
        if (text := cause(result)) not in causes:
            causes.append(text)
    not_measured = f"{_cells(len(unmeasured))} could not be measured: {', '.join(causes)}"
    interrupted = " (interrupted)" if run.interrupted else ""
    if run.outcome == "failed":
        failed = [c for c in run.cells if c.verdict in DEFINITIVE_FAILURES]
        named = "; ".join(f"{c.cell.id} {finding(c)}" for c in failed[:MAX_NAMED_CELLS])
        others = [c.cell.id for c in failed[MAX_NAMED_CELLS:]]
        more = f"; and {len(others)} more: {', '.join(others)}" if others else ""
        extra = f"; {not_measured}" if unmeasured else ""
        return f"FAILED{interrupted}: {_cells(len(failed))} failed: {named}{more}{extra}"
    if run.outcome == "inconclusive":
        return f"INCONCLUSIVE{interrupted}: {not_measured}; rerun"
    return f"OK{interrupted}: {_cells(len(run.cells))}, each passed, failed as expected, or did not apply"


def attempts_line(check: CheckResult) -> str | None:
    """'attempts: 1 invalid (after 0.0 s), 2 pass (after 5.0 s)' for a check measured more than once."""
    attempts = check.evidence.get("attempts")
    if not isinstance(attempts, list) or len(attempts) < 2:
        return None
    parts = [f"{a.get('attempt')} {a.get('verdict')} (after {float(a.get('waited_s', 0.0)):.1f} s)" for a in attempts]
    return "attempts: " + ", ".join(parts)
