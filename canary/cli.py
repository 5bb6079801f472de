"""The `canary` command line: plan, run, render-values, serve-metrics.

User errors (bad config, bad arguments) print one line and exit 2; no tracebacks for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from canary.config import CanaryConfig, load_config
from canary.errors import CanaryError
from canary.matrix import Plan, plan

EXIT_OK, EXIT_FAILED_CELLS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="matrix config YAML (e.g. configs/cpu-default.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a config value (YAML), repeatable: --set checks.accuracy.limit=50",
    )
    parser.add_argument("--pairwise", action="store_true", help="reduce the matrix pairwise (keeps high-risk cells)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CELL_ID",
        help="run/plan only these cell ids (repeatable; a prefix matches)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(prog="canary", description="vLLM prefill/decode canary across a matrix.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_plan = sub.add_parser("plan", help="print the expanded matrix without starting anything")
    _add_config_args(p_plan)
    p_plan.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p_run = sub.add_parser("run", help="deploy and check every planned cell")
    _add_config_args(p_run)
    p_run.add_argument("--results-dir", help="override export.results_dir")
    p_run.add_argument("--dry-run", action="store_true", help="render commands/env/manifests, start nothing")

    p_values = sub.add_parser("render-values", help="render helm/vllm-pd values for a matrix config")
    _add_config_args(p_values)
    p_values.add_argument("-o", "--output", help="write to this file (default: stdout)")

    p_serve = sub.add_parser("serve-metrics", help="serve the latest results as Prometheus metrics")
    p_serve.add_argument("--results-dir", default="results", help="results root (default: results)")
    p_serve.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p_serve.add_argument("--port", type=int, default=9464, help="port (default: 9464)")
    return parser


def load_plan(args: argparse.Namespace) -> tuple[CanaryConfig, Plan]:
    """Load the config with overrides and plan it, honouring --pairwise and --only."""
    overrides = list(args.overrides)
    if args.pairwise:
        overrides.append("matrix.reduction=pairwise")
    config = load_config(args.config, overrides)
    the_plan = plan(config)
    if args.only:
        kept = tuple(c for c in the_plan.cells if any(c.id.startswith(p) for p in args.only))
        if not kept:
            raise CanaryError(f"--only {args.only} matches no cell of {args.config}")
        the_plan = the_plan.model_copy(update={"cells": kept})
    return config, the_plan


def plan_table(the_plan: Plan) -> Table:
    """The plan as a rich table."""
    table = Table(
        title=f"{the_plan.config_name} on {the_plan.platform}: {len(the_plan.planned())} planned "
        f"of {len(the_plan.cells)} cells"
    )
    for column in (
        "cell",
        "backend",
        "P/D block",
        "kernel",
        "kv dtype",
        "runner",
        "topology",
        "image",
        "risk",
        "status",
        "reason",
    ):
        table.add_column(column, overflow="fold", no_wrap=column not in ("reason", "risk"))
    for cell in the_plan.cells:
        status: str = cell.status
        if cell.expect is not None:
            status += f" (expect {cell.expect.expect})"
        risk = ", ".join(cell.risks) or "-"
        if cell.high_risk:
            risk = f"[bold red]{risk}[/]"
        table.add_row(
            cell.id,
            cell.backend,
            cell.block_label,
            cell.kernel_label,
            cell.kv_cache_dtype,
            cell.runner,
            cell.topology,
            cell.image,
            risk,
            status,
            cell.reason or "",
        )
    return table


def plan_json(the_plan: Plan) -> str:
    """The plan as JSON."""
    payload = the_plan.model_dump(mode="json")
    payload["planned_count"] = len(the_plan.planned())
    return json.dumps(payload, indent=2)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    """canary plan."""
    _, the_plan = load_plan(args)
    if args.json:
        print(plan_json(the_plan))
        return EXIT_OK
    console.print(plan_table(the_plan))
    high = sum(1 for c in the_plan.planned() if c.high_risk)
    console.print(f"high-risk planned cells: {high}")
    if the_plan.reduction == "pairwise":
        planned = len(the_plan.planned())
        console.print(
            f"pairwise: {planned} of {the_plan.full_planned_count} planned cells kept "
            f"(all {high} high-risk ones); saved {the_plan.full_planned_count - planned} cells"
        )
    return EXIT_OK


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """canary run."""
    from canary.orchestrate import dry_run, run_and_report

    config, the_plan = load_plan(args)
    if args.results_dir:
        config.export.results_dir = args.results_dir
    if args.dry_run:
        print(dry_run(config, the_plan))
        return EXIT_OK
    run = run_and_report(config, the_plan, config_path=str(args.config), console=console)
    if run.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if run.ok else EXIT_FAILED_CELLS


def cmd_render_values(args: argparse.Namespace, console: Console) -> int:
    """canary render-values."""
    import yaml

    from canary.kube_values import render_values

    config, the_plan = load_plan(args)
    text = yaml.safe_dump(render_values(config, list(the_plan.planned())), sort_keys=False)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return EXIT_OK


def cmd_serve_metrics(args: argparse.Namespace, console: Console) -> int:
    """canary serve-metrics."""
    from canary.export.exporter import serve

    serve(Path(args.results_dir), args.host, args.port)
    return EXIT_OK


COMMANDS = {"plan": cmd_plan, "run": cmd_run, "render-values": cmd_render_values, "serve-metrics": cmd_serve_metrics}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    console = Console(stderr=False, width=None if sys.stdout.isatty() else 220)
    try:
        return COMMANDS[args.command](args, console)
    except CanaryError as exc:
        print(f"canary: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("canary: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
