"""The run's outcome in one line, the same words in the terminal, summary.md and summary.html.

OK: every cell passed or failed as expected. FAILED: a cell has a definitive finding (fail,
unexpected-pass). INCONCLUSIVE: the only cells that did not pass could not be measured (invalid,
error): "INCONCLUSIVE: 1 cell could not be measured: client CPU-starved; rerun". The classes and
which verdict falls in which come from canary.verdicts.
"""

from __future__ import annotations

from canary.results import CAUSE_KEY, CellResult, CheckResult, RunResult
from canary.verdicts import DEFINITIVE_FAILURES, INCONCLUSIVE_VERDICTS, OUTCOME_WORD

MAX_CAUSE_CHARS = 80


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= MAX_CAUSE_CHARS else line[: MAX_CAUSE_CHARS - 1].rstrip() + "…"


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
        extra = f"; {not_measured}" if unmeasured else ""
        return f"FAILED{interrupted}: {_cells(len(failed))} failed ({', '.join(c.cell.id for c in failed)}){extra}"
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
