"""`canary bisect RESULTS_DIR --cell CELL [--series FILE | --images GOOD ... BAD]`.

Exit codes: 0 found (the culprit is named), 3 not reproduced or inconclusive (no culprit named),
130 interrupted (the steps so far are in bisect.json), 2 bad input (one line: no such results
directory, a cell not in the run or not failing, no series, a target not supported yet).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from rich.console import Console

from canary.bisect.model import BISECT_JSON, BISECT_MD, headline
from canary.bisect.run import (
    check_supported,
    images_range,
    load_input,
    policy_of,
    run_bisection,
    series_range,
)
from canary.errors import warn_stderr

EXIT_FOUND, EXIT_NO_CULPRIT, EXIT_INTERRUPTED = 0, 3, 130


def add_parser(sub: Any) -> None:
    """The `bisect` subcommand."""
    p = sub.add_parser(
        "bisect",
        help="find the first patch of the candidate's series (or image of a range) that turns a failing cell red",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="the run's directory (or a results root: its latest)")
    p.add_argument("--cell", required=True, help="the failing cell's id (a unique prefix matches)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--series", help="series file to bisect (default: the cell image's images.<key>.patches)")
    what.add_argument(
        "--images",
        nargs="+",
        metavar="REF",
        help="an ordered image range: the known good image first, the known bad one last (container target)",
    )
    p.add_argument("--max-runs", type=int, help="cell runs in all (default: config bisect.max_runs)")
    p.add_argument("--max-minutes", type=float, help="wall time in all (default: config bisect.max_minutes)")
    p.add_argument("--retries", type=int, help="reruns of an invalid/error step (default: config bisect.retries)")
    p.add_argument("--confirm", type=int, help="agreeing runs each side of the boundary (default: bisect.confirm)")
    p.add_argument("--dry-run", action="store_true", help="print what would run (JSON), start nothing")


def cmd_bisect(args: argparse.Namespace, console: Console) -> int:
    """canary bisect."""
    from pathlib import Path

    from canary.errors import UsageError

    for flag in ("max_runs", "retries", "confirm"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "retries" else 1):
            raise UsageError(f"--{flag.replace('_', '-')} {value}: must be at least {0 if flag == 'retries' else 1}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise UsageError(f"--max-minutes {args.max_minutes}: must be positive")
    data = load_input(Path(args.results_dir), args.cell, warn_stderr)
    spec = images_range(args.images) if args.images else series_range(data, args.series)
    check_supported(data, spec)
    overrides = {"max_runs": args.max_runs, "retries": args.retries, "confirm": args.confirm}
    overrides["max_minutes"] = args.max_minutes
    policy = policy_of(data.config, overrides)
    n = len(spec.names) if spec.kind == "series" else len(spec.names) - 1
    if args.dry_run:
        fewest = 2 + max(1, math.ceil(math.log2(n))) if n > 1 else 2
        print(
            json.dumps(
                {
                    "run": data.run.run_id,
                    "cell": data.cell.cell.id,
                    "image": data.cell.cell.image,
                    "range": spec.kind,
                    "entries": spec.names,
                    "rerun_checks": data.failed_checks,
                    "target": data.config.target.kind,
                    "policy": policy.__dict__,
                    "cell_runs_when_every_step_is_clear": fewest + 2 * (policy.confirm - 1),
                },
                indent=2,
            )
        )
        return EXIT_FOUND
    report = run_bisection(data, spec, policy)
    console.print(headline(report))
    console.print(f"report: {data.run_dir / BISECT_JSON}, {data.run_dir / BISECT_MD}")
    if report.outcome == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FOUND if report.outcome == "found" else EXIT_NO_CULPRIT
