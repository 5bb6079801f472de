"""`python -m canary.selftest` (`make selftest`): prove the canary catches the seeded faults.

Runs the clean case and every seeded fault (canary.selftest.run), writes OUT/selftest.json and
prints the detection table (canary.selftest.table). Exit 0 when every fault was detected and no
clean run raised an alarm, 1 otherwise, 2 on configuration errors, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from canary.errors import CanaryError
from canary.judge.results import utc_now
from canary.selftest.model import DEFAULT_CLEAN_RUNS, DEFAULT_CONFIG, FAULTS_FILE
from canary.selftest.run import run_selftest
from canary.selftest.table import render_table


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m canary.selftest`."""
    parser = argparse.ArgumentParser(prog="python -m canary.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="selftest matrix config")
    parser.add_argument("--faults-file", type=Path, default=FAULTS_FILE, help="fault catalogue")
    parser.add_argument("--clean-runs", type=int, default=DEFAULT_CLEAN_RUNS, help="clean runs (0: none)")
    parser.add_argument("--fault", action="append", help="run only this fault (id or its number); repeatable")
    parser.add_argument("--out", type=Path, help="output directory (default results/selftest-<UTC time>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    args = parser.parse_args(argv)
    # Wide when piped (make, CI logs): the table is the point of the output.
    console = Console() if sys.stdout.isatty() else Console(width=180)
    out_dir = args.out or Path("results") / f"selftest-{utc_now().strftime('%Y%m%dT%H%M%SZ')}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        result = run_selftest(
            args.config,
            out_dir,
            clean_runs=max(args.clean_runs, 0),
            only=args.fault,
            faults_file=args.faults_file,
            overrides=args.overrides,
        )
    except CanaryError as exc:
        print(f"selftest: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("selftest: interrupted", file=sys.stderr)
        return 130
    (out_dir / "selftest.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    console.print(render_table(result))
    console.print(f"selftest.json and every run's results: {out_dir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
