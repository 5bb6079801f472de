"""The reports' view of the run history: per cell, the change against the previous run and the
last good run (verdict and key metrics), and the key metrics over the recent runs (sparklines).

Read from the history store (canary.export.history.store) that `canary run` wrote this run into before
the reports (canary.export.history.record); `canary compare` reads the same tables. The previous run of
a cell is the newest earlier run of the same config that holds the cell (a rotating matrix skips
cells); its last good run the newest earlier one where it did what the config expects (pass or
expected-fail), within the last `window` runs. Loading never fails a report: without a history
every cell says "no previous run", and a history that cannot be read is a note on the page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from canary.config import HistoryConfig
from canary.core.svg import Spark
from canary.export.history.compare import MetricChange
from canary.export.history.store import HistoryError, HistoryStore, open_store, sqlite_path
from canary.export.report.grid import ACCURACY, Column, check_verdicts, fmt, not_to_scale, number
from canary.judge.results import CellResult, RunResult

KEY_METRICS: tuple[Column, ...] = (
    Column("req/s", "throughput", "requests_per_s"),
    Column("TTFT p50", "throughput", "ttft_p50_s", "s"),
    Column("GSM8K", "accuracy", "accuracy", ACCURACY),
)
"""The numbers compared run to run and drawn as sparklines (GSM8K as a fraction, moves in points)."""
GOOD_VERDICTS = frozenset({"pass", "expected-fail"})
"""A cell's verdicts that make a run a good one for it: it did what the config expects."""
DEFAULT_WINDOW = 20
"""Earlier runs read (bounds the cost: three queries per run)."""
NO_PREVIOUS = "no previous run"


@dataclass(frozen=True)
class Seen:
    """A cell in an earlier run: its verdict and key metrics."""

    run_id: str
    verdict: str
    values: dict[Column, float]
    not_comparable: dict[Column, str] = field(default_factory=dict)
    """Why a value is not comparable (canary.export.report.grid.not_to_scale), where it is not."""


@dataclass(frozen=True)
class CellTrend:
    """One cell against its history."""

    previous: Seen | None = None
    last_good: Seen | None = None
    recent: dict[Column, list[Spark]] = field(default_factory=dict)
    """Key metric -> its values over the recent runs, oldest first, this run last."""


@dataclass(frozen=True)
class Trends:
    """Every cell of a run against its history (empty when there is none)."""

    cells: dict[str, CellTrend] = field(default_factory=dict)
    runs_read: int = 0
    note: str = ""
    """Why there is no history to compare with, when that is not simply a first run."""

    def of(self, cell_id: str) -> CellTrend:
        """The trend of a cell (an empty one when the history does not know it)."""
        return self.cells.get(cell_id, CellTrend())


def _tooltip(run_id: str, column: Column, value: float, why: str) -> str:
    text = f"{run_id}: {column.header} {fmt(value, column.unit)}"
    return f"{text} ({why}, not comparable)" if why else text


def read_trends(store: HistoryStore, run: RunResult, *, window: int = DEFAULT_WINDOW) -> Trends:
    """The trends of a run's cells from a history (which may or may not hold the run itself)."""
    runs = store.runs(config_name=run.config_name)
    ids = [r.run_id for r in runs]
    if run.run_id in ids:
        earlier = runs[: ids.index(run.run_id)]
    else:
        started = run.started_at.isoformat()
        earlier = [r for r in runs if r.started_at < started]
    earlier = earlier[-window:]
    wanted = {c.cell.id for c in run.cells}
    previous: dict[str, Seen] = {}
    last_good: dict[str, Seen] = {}
    recent: dict[str, dict[Column, list[Spark]]] = {cell_id: {k: [] for k in KEY_METRICS} for cell_id in wanted}
    for info in earlier:  # oldest first: later runs overwrite
        then = store.cells_of(info.run_id)
        checks = store.checks_of(info.run_id)
        metrics = store.metrics_of(info.run_id)
        for cell_id in wanted & set(then):
            found = {k: metrics.get((cell_id, k.check, k.key)) for k in KEY_METRICS}
            values = {k: v for k, v in found.items() if v is not None}
            verdicts = {check: v for (cid, check), v in checks.items() if cid == cell_id}
            whys = {k: why for k in values if (why := not_to_scale(verdicts, k.check))}
            seen = Seen(info.run_id, then[cell_id][0], values, whys)
            previous[cell_id] = seen
            if seen.verdict in GOOD_VERDICTS:
                last_good[cell_id] = seen
            for column, value in values.items():
                why = whys.get(column, "")
                recent[cell_id][column].append(Spark(value, not why, _tooltip(info.run_id, column, value, why)))
    for result in run.cells:
        verdicts = check_verdicts(result)
        for column in KEY_METRICS:
            now = number(result, column.check, column.key)
            if now is not None and math.isfinite(now):
                why = not_to_scale(verdicts, column.check)
                tip = _tooltip(f"this run {run.run_id}", column, now, why)
                recent[result.cell.id][column].append(Spark(now, not why, tip))
    cells = {
        cell_id: CellTrend(
            previous=previous.get(cell_id),
            last_good=last_good.get(cell_id),
            recent={k: v for k, v in series.items() if len(v) > 1},
        )
        for cell_id, series in recent.items()
    }
    return Trends(cells=cells, runs_read=len(earlier))


def load_trends(run: RunResult, settings: HistoryConfig, results_dir: Path, *, window: int = DEFAULT_WINDOW) -> Trends:
    """The trends from the configured history (export.history); never raises: a history that is
    disabled, absent or unreadable gives empty trends with a note."""
    if not settings.enabled:
        return Trends(note="the run history is disabled (export.history.enabled: false)")
    try:
        with open_store(
            url=settings.url,
            sqlite=sqlite_path(results_dir, settings.path),
            create=False,
            password_env=settings.password_env,
        ) as store:
            return read_trends(store, run, window=window)
    except HistoryError as exc:
        return Trends(note=f"no run history to compare with: {exc}")


def _delta(column: Column, before: float, after: float, why: str = "") -> str:
    """'req/s 31 → 17.1 (-45%, worse)'; GSM8K moves in points: '0.57 → 0.12 (-0.45, worse)'; a
    value that is not comparable says why instead."""
    change = MetricChange("", column.check, column.key, before=before, after=after)
    text = f"{column.header} {fmt(before, column.unit)} → {fmt(after, column.unit)}"
    if why:
        return f"{text} (not comparable: {why})"
    if before == after:
        return f"{text} (same)"
    if column.unit == ACCURACY:
        moved = f"{after - before:+.2f}"
    elif math.isfinite(change.relative):
        moved = f"{change.relative:+.1%}" if abs(change.relative) < 0.01 else f"{change.relative:+.0%}"
    else:
        moved = "from 0"
    direction = f", {change.direction}" if change.direction != "changed" else ""
    return f"{text} ({moved}{direction})"


def changes(seen: Seen | None, now: CellResult) -> list[str]:
    """What differs between an earlier run of a cell and now: the verdict, then each key metric
    both runs measured; ['no previous run'] without an earlier run."""
    if seen is None:
        return [NO_PREVIOUS]
    verdict = f"verdict {seen.verdict} → {now.verdict}" if seen.verdict != now.verdict else f"verdict {now.verdict}"
    out = [verdict]
    verdicts = check_verdicts(now)
    for column in KEY_METRICS:
        after = number(now, column.check, column.key)
        before = seen.values.get(column)
        if after is not None and before is not None:
            why = not_to_scale(verdicts, column.check) or seen.not_comparable.get(column, "")
            out.append(_delta(column, before, after, why))
    return out


def same_run(trend: CellTrend) -> bool:
    """The cell's last good run is its previous run (the reports say so instead of repeating it)."""
    return None not in (trend.previous, trend.last_good) and trend.last_good == trend.previous


def verdict_changed(seen: Seen | None, now: CellResult) -> bool:
    """The cell's verdict differs from the earlier run's."""
    return seen is not None and seen.verdict != now.verdict
