"""`canary history ...` and `canary compare RUN_A RUN_B` (wired into canary/cli.py)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from canary.config import HistoryConfig
from canary.core.atomic import write_atomic
from canary.core.words import closest, listing
from canary.export.history.compare import compare_runs
from canary.export.history.findings import analyze, find_changes
from canary.export.history.importer import import_paths
from canary.export.history.plot import history_svg
from canary.export.history.store import HistoryError, HistoryStore, open_store, sqlite_path
from canary.export.history.tracked import TRACKED, TRACKED_CHECK
from canary.export.report.grid import marked, not_to_scale


def _store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results-dir", default="results", help="results root holding history.sqlite (default: results)"
    )
    parser.add_argument("--url", help="postgresql:// URL of a shared history instead of the SQLite file")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `history` (import, show, changes) and `compare` to the canary parser."""
    p_history = sub.add_parser("history", help="the run history: import runs, show a series, change points")
    hsub = p_history.add_subparsers(dest="history_command", required=True)
    p_import = hsub.add_parser("import", help="import recorded runs (results/*/results.json)")
    p_import.add_argument("paths", nargs="+", type=Path, help="results.json files, run dirs, or results roots")
    _store_args(p_import)
    p_show = hsub.add_parser("show", help="a cell's metric (or a metric across cells) as a table and an SVG plot")
    p_show.add_argument("--cell", help="cell id (prefix matches)")
    p_show.add_argument("--metric", default="output_tokens_per_s", help="metric key (default: output_tokens_per_s)")
    p_show.add_argument(
        "--check", default=TRACKED_CHECK, help=f"check the metric belongs to (default: {TRACKED_CHECK})"
    )
    p_show.add_argument("--plot", type=Path, help="write the series as SVG here (needs --cell)")
    _store_args(p_show)
    p_changes = hsub.add_parser("changes", help="change points of the tracked metrics (E-Divisive)")
    p_changes.add_argument("--cell", action="append", help="only these cell ids (repeatable)")
    p_changes.add_argument("--metric", action="append", help=f"only these metrics (default: {', '.join(TRACKED)})")
    _store_args(p_changes)
    p_compare = sub.add_parser("compare", help="what changed between two runs, verdict by verdict and metric by metric")
    p_compare.add_argument("run_a", help="run id (a unique prefix, 'previous' or 'latest')")
    p_compare.add_argument("run_b", help="run id (a unique prefix, 'previous' or 'latest')")
    p_compare.add_argument(
        "--min-change", type=float, default=0.05, help="least relative change of a metric to list (default: 0.05)"
    )
    _store_args(p_compare)


def _open(args: argparse.Namespace, create: bool = False) -> HistoryStore:
    return open_store(url=args.url, sqlite=sqlite_path(Path(args.results_dir)), create=create)


def _resolve_cell(store: HistoryStore, ref: str) -> str:
    ids = store.cell_ids()
    if ref in ids:
        return ref
    matches = [c for c in ids if c.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise HistoryError(f"{store.where}: no cell {ref!r} in the history")
    raise HistoryError(f"{store.where}: cell {ref!r} is ambiguous: {', '.join(matches[:5])}")


def _check_metric(store: HistoryStore, check: str, metric: str) -> None:
    """HistoryError (exit 2) for a check or metric the history holds no value of, listing those it holds."""
    held = store.metric_names()
    if check not in held:
        checks = listing(held) or "none (record runs with `canary run`, or `canary history import`)"
        raise HistoryError(
            f"{store.where}: no metrics of check {check!r} in the history; checks with metrics: {checks}"
        )
    if metric not in held[check]:
        near = closest(metric, held[check], n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise HistoryError(
            f"{store.where}: no metric {metric!r} of check {check} in the history; {hint}"
            f"its metrics: {listing(held[check])}"
        )


def _fmt(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.4g}"


def _value(value: float, why: str) -> str:
    """A value as the tables print it: marked `(not comparable)` where the check could not measure in that
    run (or a corrupting check failed: canary.export.report.grid.not_to_scale), as in summary.md."""
    return marked(_fmt(value), why)


def _why(store: HistoryStore, run_id: str, cell_id: str, check: str) -> str:
    """Why a cell's numbers of a check in one run are not comparable ('' when they are)."""
    return not_to_scale({c: v for (cell, c), v in store.checks_of(run_id).items() if cell == cell_id}, check)


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    """canary history import|show|changes."""
    settings = HistoryConfig()
    with _open(args, create=args.history_command == "import") as store:
        if args.history_command == "import":
            imported = import_paths(store, args.paths)
            console.print(f"imported {len(imported)} runs into {store.where} ({store.count_rows()} metric rows)")
            return 0
        if args.history_command == "changes":
            for metric in args.metric or []:
                _check_metric(store, TRACKED_CHECK, metric)
            cells = [_resolve_cell(store, c) for c in args.cell] if args.cell else None
            findings = find_changes(store, settings, cells=cells, metrics=args.metric)
            for finding in findings:
                console.print(finding.sentence(), soft_wrap=True)
            if not findings:
                console.print(f"no change points in {len(store.runs())} runs")
            return 0
        _check_metric(store, args.check, args.metric)
        if args.cell:
            return _show_cell(store, _resolve_cell(store, args.cell), args, settings, console)
        return _show_metric(store, args, console)


def _show_cell(
    store: HistoryStore, cell_id: str, args: argparse.Namespace, settings: HistoryConfig, console: Console
) -> int:
    points = store.series(cell_id, args.check, args.metric)
    if not points:
        raise HistoryError(f"{store.where}: no {args.check}.{args.metric} for cell {cell_id}")
    findings = analyze(cell_id, args.check, args.metric, points, settings)
    change_runs = {f.run_id for f in findings}
    table = Table(title=f"{cell_id}: {args.check}.{args.metric} over {len(points)} runs")
    for column in ("#", "run", "image", "verdict", args.metric, "change"):
        table.add_column(column, overflow="fold")
    previous: float | None = None
    for index, point in enumerate(points, start=1):
        change = "" if previous is None or previous == 0 else f"{(point.value - previous) / abs(previous):+.1%}"
        mark = " change point" if point.run_id in change_runs else ""
        value = _value(point.value, _why(store, point.run_id, cell_id, args.check))
        table.add_row(str(index), point.run_id, point.image_ref, point.check_verdict, value, change + mark)
        if point.check_verdict in ("pass", "fail"):
            previous = point.value
    console.print(table)
    for finding in findings:
        console.print(finding.sentence(), soft_wrap=True)
    if args.plot:
        write_atomic(args.plot, history_svg(f"{cell_id}: {args.metric}", points, findings))
        console.print(f"plot: {args.plot}")
    return 0


def _show_metric(store: HistoryStore, args: argparse.Namespace, console: Console) -> int:
    if args.plot:
        raise HistoryError("--plot needs --cell (one series per plot)")
    runs = store.runs()[-8:]
    table = Table(title=f"{args.check}.{args.metric}: last {len(runs)} runs, every cell")
    table.add_column("cell", overflow="fold")
    for index in range(1, len(runs) + 1):
        table.add_column(f"{index}", justify="right")
    values = {run.run_id: store.metrics_of(run.run_id) for run in runs}
    checks = {run.run_id: store.checks_of(run.run_id) for run in runs}
    for cell_id in store.cell_ids():
        row = [
            _value(
                values[r.run_id].get((cell_id, args.check, args.metric), math.nan),
                not_to_scale({c: v for (cell, c), v in checks[r.run_id].items() if cell == cell_id}, args.check),
            )
            for r in runs
        ]
        if any(v != "-" for v in row):
            table.add_row(cell_id, *row)
    console.print(table)
    for index, run in enumerate(runs, start=1):
        console.print(f"{index}: {run.run_id}")
    return 0


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    """canary compare RUN_A RUN_B."""
    with _open(args) as store:
        run_a, run_b = store.resolve_run(args.run_a), store.resolve_run(args.run_b)
        result = compare_runs(store, run_a, run_b, args.min_change)
    console.print(f"{run_a} -> {run_b}")
    verdicts = Table(title=f"verdicts that changed ({len(result.verdicts)})")
    for column in ("cell", "check", "before", "after", "image before", "image after"):
        verdicts.add_column(column, overflow="fold")
    for v in result.verdicts:
        style = "red" if v.worse else ""
        verdicts.add_row(v.cell_id, v.check or "(cell)", v.before, v.after, v.image_before, v.image_after, style=style)
    console.print(verdicts)
    metrics = Table(title=f"metrics that changed by >= {args.min_change:.0%} ({len(result.metrics)})")
    for column in ("cell", "check", "metric", "before", "after", "change", ""):
        metrics.add_column(column, overflow="fold")
    for m in result.metrics:
        change = f"{m.relative:+.1%}" if math.isfinite(m.relative) else "new"
        metrics.add_row(
            m.cell_id,
            m.check,
            m.metric,
            _fmt(m.before),
            _fmt(m.after),
            change,
            m.direction,
            style="red" if m.direction == "worse" else "",
        )
    console.print(metrics)
    return 0
