"""Change points of the tracked metrics, as sentences and as exported numbers.

Each series is searched over its last `export.history.window_runs` judged runs (default 60, two
months of nightly runs): older regimes no longer matter for an alert, and the permutation test
costs O(n^2) per permutation.

"output_tokens_per_s of cell X dropped 23% at run R (image Y -> Z)". A series holds the runs whose
check judged its numbers (verdict pass or fail): invalid, error and skipped results are left out,
so a starved load client never looks like a regression or hides one.
"""

from __future__ import annotations

from dataclasses import dataclass

from canary.config import HistoryConfig
from canary.export.history.changepoints import e_divisive, worse_fraction
from canary.export.history.store import HistoryStore, Point
from canary.export.history.tracked import TRACKED, TRACKED_CHECK

JUDGED = frozenset({"pass", "fail"})


@dataclass(frozen=True)
class Finding:
    """One change point of one cell's metric."""

    cell_id: str
    check: str
    metric: str
    run_id: str
    index: int
    runs_total: int
    worse: float
    relative_change: float
    mean_before: float
    mean_after: float
    p_value: float
    image_before: str
    image_after: str

    @property
    def runs_ago(self) -> int:
        """0: the change point is the latest run; 1: the one before..."""
        return self.runs_total - 1 - self.index

    def sentence(self) -> str:
        """The finding for people."""
        up = self.relative_change > 0
        verb = "rose" if up else "dropped"
        quality = "worse" if self.worse > 0 else "better"
        images = (
            f"image {self.image_before} -> {self.image_after}"
            if self.image_before != self.image_after
            else f"image {self.image_after} unchanged"
        )
        return (
            f"{self.metric} of cell {self.cell_id} {verb} {abs(self.relative_change):.0%} at run {self.run_id} "
            f"({images}; {self.mean_before:.4g} -> {self.mean_after:.4g}, {quality}, p={self.p_value:.3f})"
        )


def judged(points: list[Point]) -> list[Point]:
    """The points whose check judged its numbers."""
    return [p for p in points if p.check_verdict in JUDGED]


def analyze(cell_id: str, check: str, metric: str, points: list[Point], settings: HistoryConfig) -> list[Finding]:
    """Reported change points of one series (large enough and significant), oldest first."""
    series = judged(points)[-settings.window_runs :]
    changes = e_divisive(
        [p.value for p in series],
        alpha=settings.alpha,
        permutations=settings.permutations,
        min_size=settings.min_size,
        seed=0,
    )
    out: list[Finding] = []
    for change in changes:
        if abs(change.relative_change) < settings.min_relative_change:
            continue
        out.append(
            Finding(
                cell_id=cell_id,
                check=check,
                metric=metric,
                run_id=series[change.index].run_id,
                index=change.index,
                runs_total=len(series),
                worse=worse_fraction(change, metric),
                relative_change=change.relative_change,
                mean_before=change.mean_before,
                mean_after=change.mean_after,
                p_value=change.p_value,
                image_before=series[change.index - 1].image_ref,
                image_after=series[change.index].image_ref,
            )
        )
    return out


def find_changes(
    store: HistoryStore,
    settings: HistoryConfig,
    *,
    cells: list[str] | None = None,
    metrics: list[str] | None = None,
    config_name: str | None = None,
) -> list[Finding]:
    """Change points of the tracked (or given) throughput metrics of the given (or every) cell."""
    out: list[Finding] = []
    for cell_id in cells if cells is not None else store.cell_ids():
        for metric in metrics or list(TRACKED):
            points = store.series(cell_id, TRACKED_CHECK, metric, config_name)
            out.extend(analyze(cell_id, TRACKED_CHECK, metric, points, settings))
    return out


def recent_worse(findings: list[Finding], recent_runs: int) -> dict[tuple[str, str], Finding]:
    """(cell, metric) -> the latest change point, if it made the metric worse within the last runs."""
    latest: dict[tuple[str, str], Finding] = {}
    for finding in findings:
        key = (finding.cell_id, finding.metric)
        if key not in latest or finding.index > latest[key].index:
            latest[key] = finding
    return {k: f for k, f in latest.items() if f.worse > 0 and f.runs_ago < recent_runs}
