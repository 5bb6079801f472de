"""Two runs side by side: what changed, verdict by verdict and metric by metric."""

from __future__ import annotations

import math
from dataclasses import dataclass

from canary.core import metric_keys as k
from canary.export.history.store import HistoryStore
from canary.judge.results import VERDICT_SEVERITY
from canary.load.stats import higher_is_better


@dataclass(frozen=True)
class VerdictChange:
    """A cell's (check is empty) or a check's verdict in run A and run B ('-' when absent)."""

    cell_id: str
    check: str
    before: str
    after: str
    image_before: str
    image_after: str

    @property
    def worse(self) -> bool:
        """The verdict got more severe (absent counts as neither)."""
        if "-" in (self.before, self.after):
            return False
        return VERDICT_SEVERITY[self.after] < VERDICT_SEVERITY[self.before]


HIGHER_IS_BETTER = (
    "goodput_ratio",
    "accuracy",
    "parity_match_rate",
    k.DISAGG_GAIN,
    k.DISAGG_GAIN_LOW,
    k.DISAGG_GAIN_HIGH,
)
"""Metrics without a _per_s unit that are better when higher (a _per_s rate always is)."""


@dataclass(frozen=True)
class MetricChange:
    """A number of a cell's check in run A and run B."""

    cell_id: str
    check: str
    metric: str
    before: float
    after: float

    @property
    def relative(self) -> float:
        """(after - before) / |before| (nan when before is 0)."""
        return (self.after - self.before) / abs(self.before) if self.before else math.nan

    @property
    def direction(self) -> str:
        """better / worse / changed (for metrics without a direction: counts, ratios of other kinds)."""
        if not math.isfinite(self.relative) or self.relative == 0:
            return "changed"
        if self.metric.endswith("_per_s") or self.metric in HIGHER_IS_BETTER:
            return "better" if self.relative > 0 else "worse"
        if self.metric.endswith("_s") and not higher_is_better(self.metric):
            return "worse" if self.relative > 0 else "better"
        return "changed"


@dataclass(frozen=True)
class Comparison:
    """Everything that differs between two runs."""

    run_a: str
    run_b: str
    verdicts: list[VerdictChange]
    metrics: list[MetricChange]


def compare_runs(store: HistoryStore, run_a: str, run_b: str, min_relative: float = 0.05) -> Comparison:
    """Verdict changes (cells and checks) and metric changes of at least `min_relative` (0: every change)."""
    cells_a, cells_b = store.cells_of(run_a), store.cells_of(run_b)
    verdicts: list[VerdictChange] = []
    for cell_id in sorted(set(cells_a) | set(cells_b)):
        va, ref_a, _ = cells_a.get(cell_id, ("-", "-", ""))
        vb, ref_b, _ = cells_b.get(cell_id, ("-", "-", ""))
        if va != vb or ref_a != ref_b:
            verdicts.append(VerdictChange(cell_id, "", va, vb, ref_a, ref_b))
    checks_a, checks_b = store.checks_of(run_a), store.checks_of(run_b)
    for key in sorted(set(checks_a) | set(checks_b)):
        va, vb = checks_a.get(key, "-"), checks_b.get(key, "-")
        if va != vb:
            image_a = cells_a.get(key[0], ("-", "-", ""))[1]
            image_b = cells_b.get(key[0], ("-", "-", ""))[1]
            verdicts.append(VerdictChange(key[0], key[1], va, vb, image_a, image_b))
    metrics_a, metrics_b = store.metrics_of(run_a), store.metrics_of(run_b)
    changes: list[MetricChange] = []
    for mkey in sorted(set(metrics_a) & set(metrics_b)):
        cell_id, check, metric = mkey
        change = MetricChange(cell_id, check, metric, before=metrics_a[mkey], after=metrics_b[mkey])
        if change.before == change.after:
            continue
        rel = change.relative
        if min_relative <= 0 or not math.isfinite(rel) or abs(rel) >= min_relative:
            changes.append(change)
    changes.sort(key=lambda c: (c.direction != "worse", -abs(c.relative) if math.isfinite(c.relative) else 0.0))
    return Comparison(run_a=run_a, run_b=run_b, verdicts=verdicts, metrics=changes)
