"""Cost of the run history at 100k metric rows, on SQLite and on a real PostgreSQL server.

The history is seeded from synthesized runs (tests/support/synth.py: results models, real load
statistics): one run's rows are cloned into as many nightly runs as 100k metric rows need, values
jittered, the candidate of one cell 23% slower in the last 20 runs. Measured per store:
- write: every run in its own transaction (as `canary run` writes), runs/s and rows/s;
- series: one cell's metric over every run (`canary history show`), median and p95 of 50 queries;
- run metrics: every number of one run (`canary compare`, two per compare), median of 50;
- change points: every tracked metric of one cell (`canary history changes --cell`), the E-Divisive
  search over the last window_runs (60) judged runs, median of 5.
- the run hook: write one more run and find the change points of its cells (what `canary run` adds).

    python tests/bench/history_bench.py --rows 100000 --out results/bench
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "history"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.support

from pgserver import throwaway_server

from canary.config import HistoryConfig
from canary.export.history.findings import find_changes
from canary.export.history.record import annotate
from canary.export.history.rows import RunRows, flatten
from canary.export.history.store import HistoryStore, open_store
from tests.support.synth import DEFAULT_SLOW, synth_run


def clone_runs(template: RunRows, count: int, seed: int = 0) -> Iterator[RunRows]:
    """`count` runs from one run's rows: new ids a day apart, values jittered by 2%."""
    rng = random.Random(seed)
    for number in range(count):
        started = dt.datetime(2020, 1, 1, 2, tzinfo=dt.UTC) + dt.timedelta(days=number)
        run_id = f"{started.strftime('%Y%m%dT%H%M%SZ')}-bench"
        slow = number >= count - 20  # inside the change-point window (the last 60 runs)
        metrics = [
            replace(
                m,
                run_id=run_id,
                value=m.value
                * (1 + rng.gauss(0, 0.02))
                * (0.77 if slow and m.cell_id == DEFAULT_SLOW[0] and m.metric.endswith("_per_s") else 1.0),
            )
            for m in template.metrics
        ]
        yield RunRows(
            run=replace(template.run, run_id=run_id, started_at=started.isoformat()),
            cells=[replace(c, run_id=run_id) for c in template.cells],
            checks=[replace(c, run_id=run_id) for c in template.checks],
            metrics=metrics,
        )


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def bench_store(store: HistoryStore, template: RunRows, runs: int, work: Path) -> dict[str, float]:
    start = time.perf_counter()
    for rows in clone_runs(template, runs):
        store.write(rows)
    write_s = time.perf_counter() - start
    total_rows = store.count_rows()
    cell = DEFAULT_SLOW[0]
    last = store.runs()[-1].run_id
    series = timed(lambda: store.series(cell, "throughput", "output_tokens_per_s"), 50)
    run_metrics = timed(lambda: store.metrics_of(last), 50)
    settings = HistoryConfig()
    changes = timed(lambda: find_changes(store, settings, cells=[cell]), 5)
    found = find_changes(store, settings, cells=[cell])
    hook_run = synth_run(work / "hook", 1)
    later = dt.datetime(2099, 1, 1, 2, tzinfo=dt.UTC)
    hook_run = hook_run.model_copy(update={"run_id": "20990101T020000Z-bench", "started_at": later})
    start = time.perf_counter()
    store.write(flatten(hook_run))
    annotate(hook_run, store, settings)
    hook_s = time.perf_counter() - start
    return {
        "metric_rows": float(total_rows),
        "runs": float(runs),
        "write_total_s": write_s,
        "write_runs_per_s": runs / write_s,
        "write_rows_per_s": total_rows / write_s,
        "series_points": float(len(store.series(cell, "throughput", "output_tokens_per_s"))),
        "series_median_ms": statistics.median(series) * 1e3,
        "series_p95_ms": sorted(series)[int(0.95 * len(series)) - 1] * 1e3,
        "run_metrics_median_ms": statistics.median(run_metrics) * 1e3,
        "change_points_one_cell_median_s": statistics.median(changes),
        "change_points_found": float(len(found)),
        "run_hook_s": hook_s,
    }


@contextmanager
def _postgres() -> Iterator[str]:
    with throwaway_server() as url:
        yield f"{url}/postgres"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="metric rows to seed (default 100000)")
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="where the JSON goes")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="history-bench-") as tmp:
        work = Path(tmp)
        template = flatten(synth_run(work / "template", 1))
        runs = -(-args.rows // len(template.metrics))
        results: dict[str, dict[str, float]] = {}
        with open_store(sqlite=work / "history.sqlite") as store:
            results["sqlite"] = bench_store(store, template, runs, work)
        if not args.no_postgres:
            with _postgres() as url, open_store(url=url) as store:
                results["postgresql"] = bench_store(store, template, runs, work)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"history-bench-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(results, indent=2))
    keys = list(next(iter(results.values())))
    print(f"{'':34}" + "".join(f"{name:>14}" for name in results))
    for key in keys:
        print(f"{key:34}" + "".join(f"{results[name][key]:>14.4g}" for name in results))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
