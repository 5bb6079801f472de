"""The verdicts, defined once: their order, severity, numeric code, outcome class, colours and glyphs.

Every consumer derives from ``TABLE`` below: the result model (``canary.judge.results``: a cell's
verdict is the most severe of its checks'), the run outcome and exit code (``canary.cli``), the
Prometheus codes and matchers (``canary.export.prometheus.schema``), the alert rules, the dashboards and every
report (``canary.export.report``). A test checks that none keeps a copy of its own.

Outcome classes
---------------
``failed``        a definitive finding about vLLM or the config: ``fail`` (a check's gate did not
                  hold) and ``unexpected-pass`` (a cell expected to fail passed: the expectation is
                  stale, usually because vLLM was fixed). Someone must act on vLLM or the config.
``inconclusive``  the canary could not measure: ``invalid`` (the measurement's own validity gates
                  failed, e.g. a CPU-starved client) and ``error`` (a check or the target crashed,
                  or the run was interrupted before the cell). Nothing is known about vLLM; rerun.
``ok``            ``pass``, ``expected-fail``, ``ungated``, ``unsupported``, ``skipped``.

``ungated`` is a check that ran and measured but had no gate that could have failed (accuracy with no
threshold and no control, parity on a reference cell with no baseline to drift from, throughput with
no baseline, floor or paired verdict, startup with live-config verification off). It is recorded and
shown, never called ``pass``: a pass needs a gate that could have failed on evidence that was there.

Severity (worst first: fail, unexpected-pass, error, invalid, expected-fail, pass, ungated, unsupported,
skipped): a definitive finding outranks an inconclusive one, so a cell whose accuracy failed and
whose throughput could not be measured is ``fail``, never hidden behind ``error``/``invalid``;
and a run is inconclusive only when no cell has a definitive finding. ``unexpected-pass`` is worse
than ``invalid`` (the two older tables disagreed): it is evidence that something changed, where
``invalid`` is no evidence at all. ``ungated``, ``unsupported`` and ``skipped`` rank below ``pass``: a cell
with one gated check that passed is ``pass``; a cell whose checks are all ungated is ``ungated``, not ``pass``.

Codes (Prometheus ``canary_*_status_code``, Grafana value mappings): ``pass`` is 0 and higher is
worse; among the verdicts that are not ``ok`` the codes follow the severity exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Verdict = Literal[
    "pass", "fail", "expected-fail", "unexpected-pass", "ungated", "unsupported", "skipped", "error", "invalid"
]
Outcome = Literal["ok", "inconclusive", "failed"]
"""A verdict's class, and a whole run's outcome (the worst class of its cells)."""


@dataclass(frozen=True)
class VerdictSpec:
    """One verdict and everything shown or computed from it."""

    name: Verdict
    code: int
    """Exported number: 0 for pass, higher is worse."""
    outcome: Outcome
    meaning: str
    symbol: str
    """Glyph in Markdown and the terminal."""
    color: str
    """HTML/SVG/Grafana colour."""
    rich_style: str
    """Terminal (rich) style."""


# Severity order, worst first (see the module doc for why this order).
TABLE: tuple[VerdictSpec, ...] = (
    VerdictSpec("fail", 8, "failed", "a check's gate did not hold", "❌", "#c62828", "bold red"),
    VerdictSpec("unexpected-pass", 7, "failed", "a cell expected to fail passed", "⚠️", "#ef6c00", "bold yellow"),
    VerdictSpec(
        "error", 6, "inconclusive", "a check or the target crashed: not measured", "💥", "#7f0000", "bold white on red"
    ),
    VerdictSpec(
        "invalid", 5, "inconclusive", "the measurement failed its own validity gates", "❓", "#6a1b9a", "magenta"
    ),
    VerdictSpec("expected-fail", 1, "ok", "failed exactly as the config expects", "☑️", "#1565c0", "blue"),
    VerdictSpec("pass", 0, "ok", "every gate held", "✅", "#2e7d32", "bold green"),
    VerdictSpec("ungated", 2, "ok", "measured, but no gate could have failed: not a pass", "➖", "#558b2f", "green"),
    VerdictSpec("unsupported", 4, "ok", "the platform cannot run the cell", "🚫", "#757575", "dim"),
    VerdictSpec("skipped", 3, "ok", "excluded by the config", "⏭️", "#9e9e9e", "dim"),
)

BY_NAME: dict[str, VerdictSpec] = {spec.name: spec for spec in TABLE}
SEVERITY_ORDER: tuple[Verdict, ...] = tuple(spec.name for spec in TABLE)
"""Every verdict, worst first."""
VERDICT_SEVERITY: dict[str, int] = {name: rank for rank, name in enumerate(SEVERITY_ORDER)}
"""Verdict -> rank (0 = worst)."""
VERDICT_CODES: dict[str, int] = {spec.name: spec.code for spec in sorted(TABLE, key=lambda s: s.code)}
"""Verdict -> exported code (0 pass, higher is worse), in code order."""
VERDICT_SYMBOL: dict[str, str] = {spec.name: spec.symbol for spec in TABLE}
VERDICT_COLOR: dict[str, str] = {spec.name: spec.color for spec in TABLE}
VERDICT_RICH_STYLE: dict[str, str] = {spec.name: spec.rich_style for spec in TABLE}

DEFINITIVE_FAILURES: frozenset[str] = frozenset(s.name for s in TABLE if s.outcome == "failed")
"""Verdicts that are a finding someone must act on (and page for)."""
INCONCLUSIVE_VERDICTS: frozenset[str] = frozenset(s.name for s in TABLE if s.outcome == "inconclusive")
"""Verdicts that say the canary could not measure (rerun)."""
FAILING_VERDICTS: frozenset[str] = DEFINITIVE_FAILURES | INCONCLUSIVE_VERDICTS
"""Verdicts that keep a run from passing (definitive or inconclusive)."""

OUTCOME_ORDER: tuple[Outcome, ...] = ("ok", "inconclusive", "failed")
"""Run outcomes, best first; the index is the exported run outcome code."""
OUTCOME_CODES: dict[str, int] = {outcome: code for code, outcome in enumerate(OUTCOME_ORDER)}
OUTCOME_WORD: dict[str, str] = {"ok": "OK", "inconclusive": "INCONCLUSIVE", "failed": "FAILED"}
OUTCOME_EXIT_CODE: dict[str, int] = {"ok": 0, "failed": 1, "inconclusive": 3}
"""`canary run`'s exit code per outcome (canary.cli's EXIT_CODES, results.json's exit_code)."""
INTERRUPTED_EXIT_CODE = 130
"""`canary run`'s exit code when Ctrl-C stopped it, whatever the outcome of the cells it ran."""
_OUTCOME_LOOK: dict[str, Verdict] = {"ok": "pass", "inconclusive": "invalid", "failed": "fail"}
"""Each outcome is shown in the colours of a verdict of its class."""
OUTCOME_COLOR: dict[str, str] = {o: BY_NAME[v].color for o, v in _OUTCOME_LOOK.items()}
OUTCOME_RICH_STYLE: dict[str, str] = {o: BY_NAME[v].rich_style for o, v in _OUTCOME_LOOK.items()}


def _check_table() -> None:
    names = [spec.name for spec in TABLE]
    if sorted(names) != sorted(get_args(Verdict)):
        raise ValueError(f"verdict table lists {names}, the Verdict type {get_args(Verdict)}")
    if sorted(spec.code for spec in TABLE) != list(range(len(TABLE))):
        raise ValueError("verdict codes must be 0..n-1, each once")
    not_ok = [spec for spec in TABLE if spec.outcome != "ok"]
    if [s.code for s in not_ok] != sorted((s.code for s in not_ok), reverse=True):
        raise ValueError("codes of the verdicts that are not ok must follow the severity order")
    if BY_NAME["pass"].code != 0:
        raise ValueError("pass must have code 0")


_check_table()


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe verdict of a list; an empty list judged nothing, so it is ``ungated``, never ``pass``."""
    found = list(verdicts)
    return min(found, key=lambda v: VERDICT_SEVERITY[v]) if found else "ungated"


def outcome_of(verdicts: Iterable[str]) -> Outcome:
    """A run's outcome from its cells' verdicts: failed if any finding, else inconclusive if any
    cell could not be measured, else ok."""
    classes = {BY_NAME[v].outcome for v in verdicts}
    for outcome in reversed(OUTCOME_ORDER):
        if outcome in classes:
            return outcome
    return "ok"


def regex(verdicts: Iterable[str]) -> str:
    """A PromQL label regex matching exactly these verdicts (severity order)."""
    chosen = set(verdicts)
    return "|".join(name for name in SEVERITY_ORDER if name in chosen)
