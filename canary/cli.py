"""The `canary` command line: plan, run, check, needs, render-values, serve-metrics, history, compare, catalog, bisect.

Exit codes (the table EXIT_CODES below, printed by `canary --help` and docs/reference/exit-codes.md):

- 0: done; for `run`, every cell passed, failed as expected, or did not apply (outcome OK).
- 1: a cell failed (fail or unexpected-pass: outcome FAILED), `catalog` found a difference from
  vLLM's source, or the canary stopped on an error it names in one line (`canary: error: ...`),
  such as a target that cannot start.
- 2: bad arguments or a bad config: one line naming what and where (argparse, UsageError such as
  an `--only` that matches no cell, ConfigError, and the errors of input a command cannot use:
  an image nothing builds, a matrix the charts cannot deploy, a plan that does not fit the GPU
  budget or deadline, an unreadable rotation state, a history store or cell that is not there).
- 3: `run` was INCONCLUSIVE: no cell failed, but some could not be measured (invalid or error,
  e.g. a CPU-starved load client): nothing is known about them; rerun. Never a pass.
- 130: interrupted (Ctrl-C); the cells not run are recorded as errors.

No tracebacks for user errors.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from rich.console import Console

from canary.bisect import cli as bisect_cli
from canary.checks.estimate import checks_by_cell
from canary.config import CanaryConfig
from canary.config.load import blame_overrides, load_config
from canary.core.term import NON_TTY_WIDTH, columns
from canary.errors import CanaryError, ConfigError, UsageError
from canary.export.history import cli as history_cli
from canary.export.prometheus.publish import pushgateway_url
from canary.export.report.plan_table import plan_table, waves_view
from canary.judge.results import RunResult
from canary.judge.verdicts import INTERRUPTED_EXIT_CODE, OUTCOME_EXIT_CODE
from canary.model.family_params import FAMILY_NAMES
from canary.model.ref import BUILTIN_PREFIX, is_builtin
from canary.plan.matrix import Plan, plan
from canary.plan.selection import select_cells
from canary.plan.validate import validate_plan
from canary.plan.waves import Schedule, select_night
from canary.run import quick_cli, quickstart
from canary.vllm_source import catalog_check

EXIT_BY_OUTCOME: dict[str, int] = OUTCOME_EXIT_CODE
EXIT_OK, EXIT_FAILED_CELLS, EXIT_INCONCLUSIVE = (EXIT_BY_OUTCOME[o] for o in ("ok", "failed", "inconclusive"))
EXIT_USAGE, EXIT_INTERRUPTED = UsageError.exit_code, INTERRUPTED_EXIT_CODE


class ExitCode(NamedTuple):
    """One exit code: its number, its constant here, and the line `canary --help` prints for it."""

    code: int
    name: str
    meaning: str


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(EXIT_OK, "EXIT_OK", "OK: every cell passed, failed as expected, or did not apply"),
    ExitCode(
        EXIT_FAILED_CELLS,
        "EXIT_FAILED_CELLS",
        "FAILED: a cell failed (fail, unexpected-pass); catalog: a difference; or a canary error",
    ),
    ExitCode(EXIT_USAGE, "EXIT_USAGE", "bad arguments or config (named in one line)"),
    ExitCode(
        EXIT_INCONCLUSIVE,
        "EXIT_INCONCLUSIVE",
        "INCONCLUSIVE: no cell failed, but some could not be measured (invalid, error): rerun",
    ),
    ExitCode(EXIT_INTERRUPTED, "EXIT_INTERRUPTED", "interrupted (Ctrl-C)"),
)
"""The exit codes as a table: `canary --help` and docs/reference/exit-codes.md are rendered from it."""
MEANING: dict[int, str] = {e.code: e.meaning for e in EXIT_CODES}
COMMON_EXITS: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED_CELLS: "a canary error (named in one line)",
    EXIT_USAGE: MEANING[EXIT_USAGE],
    EXIT_INTERRUPTED: MEANING[EXIT_INTERRUPTED],
}
"""What every command exits with; COMMAND_EXITS adds or rewords a command's own."""
COMMAND_EXITS: dict[str, dict[int, str]] = {
    "run": {
        EXIT_OK: MEANING[EXIT_OK],
        EXIT_FAILED_CELLS: "FAILED: a cell failed (fail, unexpected-pass), or a canary error",
        EXIT_INCONCLUSIVE: MEANING[EXIT_INCONCLUSIVE],
    },
    "catalog": {
        EXIT_OK: "the catalog agrees with vLLM's source",
        EXIT_FAILED_CELLS: "a difference from vLLM's source, or a canary error",
    },
    "bisect": {
        bisect_cli.EXIT_FOUND: "found: the first bad patch (or image) is named",
        bisect_cli.EXIT_NO_CULPRIT: "no culprit named: not reproduced, or inconclusive (bisect.json says why)",
    },
}
"""The exit codes only some commands use, and the commands whose 0 and 1 mean more than done / an error."""
COMMAND_EXITS["check"] = COMMAND_EXITS["run"]  # `canary check URL` is a run of one cell


def command_exit_codes(command: str) -> dict[int, str]:
    """code -> meaning, in code order, for one command's --help (only the codes it exits with)."""
    merged = COMMON_EXITS | COMMAND_EXITS.get(command, {})
    return {code: merged[code] for code in sorted(merged)}


def exit_codes_help(codes: Mapping[int, str]) -> str:
    """The `exit codes:` block of a --help."""
    return "exit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in codes.items())


EXIT_CODES_HELP = exit_codes_help(MEANING)


def _add_config_args(parser: argparse.ArgumentParser, config_default: str | None = None) -> None:
    if config_default is None:
        parser.add_argument("config", help="matrix config YAML (e.g. configs/cpu-default.yaml)")
    else:
        parser.add_argument("config", nargs="?", help=f"matrix config YAML (default with --image: {config_default})")
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
    parser.add_argument(
        "--all",
        action="store_true",
        help="every cell of the matrix, also those the config's matrix.select leaves out",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="canary",
        description="vLLM prefill/decode canary across a matrix.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_plan = sub.add_parser("plan", help="print the expanded matrix without starting anything")
    _add_config_args(p_plan)
    p_plan.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p_run = sub.add_parser("run", help="deploy and check every planned cell")
    _add_config_args(p_run, quickstart.DEFAULT_CONFIG)
    p_run.add_argument("--results-dir", help="override export.results_dir")
    p_run.add_argument("--dry-run", action="store_true", help="render commands/env/manifests, start nothing")
    p_run.add_argument(
        "--image",
        metavar="REF",
        help="run the matrix on this local image through the container target: REF is the candidate of every "
        "image key but the baseline (the baseline stays the CPU engine image)",
    )
    quick_cli.add_check_parser(sub)

    p_needs = sub.add_parser(
        "needs", help="print what a run of this config needs installed here (words: engine model pushgateway)"
    )
    p_needs.add_argument("config", help="matrix config YAML (e.g. configs/cpu-default.yaml)")

    p_values = sub.add_parser("render-values", help="render helm/vllm-pd values for a matrix config")
    _add_config_args(p_values)
    p_values.add_argument("-o", "--output", help="write to this file (default: stdout)")

    p_serve = sub.add_parser("serve-metrics", help="serve the latest results as Prometheus metrics")
    p_serve.add_argument("--results-dir", default="results", help="results root (default: results)")
    p_serve.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p_serve.add_argument("--port", type=int, default=9464, help="port (default: 9464)")
    history_cli.add_parsers(sub)
    catalog_check.add_parser(sub)
    bisect_cli.add_parser(sub)
    for command, command_parser in sub.choices.items():
        _add_exit_codes(command_parser, exit_codes_help(command_exit_codes(command)))
    return parser


def _add_exit_codes(parser: argparse.ArgumentParser, text: str) -> None:
    """A command's exit codes under its --help, and under its subcommands' (history show, ...)."""
    parser.epilog = text
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_exit_codes(child, text)


def load_plan(args: argparse.Namespace) -> tuple[CanaryConfig, Plan]:
    """Load the config with overrides, check its full matrix (canary.plan.validate) and plan it,
    honouring --pairwise, --only, matrix.select and --all (canary.plan.selection)."""
    overrides = list(args.overrides)
    if args.pairwise:
        overrides.append("matrix.reduction=pairwise")
    config = load_config(args.config, overrides)
    try:
        validate_plan(config, str(args.config))
    except ConfigError as exc:
        raise blame_overrides(exc, list(args.overrides)) from None
    the_plan, note = select_cells(
        plan(config),
        only=args.only,
        select=config.matrix.select,
        everything=getattr(args, "all", False),
        config=str(args.config),
    )
    args.selection_note = note  # said by the commands once they stand (canary plan's table, a run's start)
    return config, the_plan


def schedule_for(config: CanaryConfig, the_plan: Plan) -> Schedule | None:
    """Tonight's waves for a Kubernetes config with a GPU budget (None otherwise); ScheduleError
    (exit 2) when the plan cannot finish inside the job deadline."""
    if config.target.kind != "kubernetes" or config.target.kubernetes.gpu_budget is None:
        return None
    from canary.plan.rotation import load_state

    return select_night(the_plan.planned(), config, load_state(config).last_checked(), checks_by_cell)


def schedule_summary(schedule: Schedule) -> str:
    """One paragraph: the estimate against the deadline, and the rotation."""
    text = (
        f"estimated wall time {schedule.typical_s / 3600:.2f} h with typical starts "
        f"({schedule.worst_s / 3600:.2f} h if every wave waits its whole startup deadline); "
        f"job deadline {schedule.deadline_s / 3600:.2f} h (target.kubernetes.job_deadline_s), "
        f"window {schedule.window_s / 3600:.2f} h; peak {schedule.peak_gpus} of {schedule.budget} GPUs"
    )
    if schedule.deferred:
        total = len(schedule.cells) + len(schedule.deferred)
        text += (
            f"\nrotation: {len(schedule.cells)} of {total} planned cells tonight, {len(schedule.deferred)} "
            f"in later nights (least recently checked first); a full pass takes about "
            f"{-(-total // max(1, len(schedule.cells)))} nights"
        )
    return text


def plan_json(the_plan: Plan, schedule: Schedule | None = None) -> str:
    """The plan as JSON (with tonight's waves when the config has a GPU budget)."""
    payload = the_plan.model_dump(mode="json")
    payload["planned_count"] = len(the_plan.planned())
    if schedule is not None:
        payload["schedule"] = {
            "gpu_budget": schedule.budget,
            "job_deadline_s": schedule.deadline_s,
            "gpus_per_cell": dict(schedule.gpus),
            "estimated_s": round(schedule.typical_s, 1),
            "worst_case_s": round(schedule.worst_s, 1),
            "waves": [
                {
                    "wave": w.index,
                    "gpus": w.gpus,
                    "estimated_s": w.typical_s,
                    "worst_case_s": w.worst_s,
                    "cells": [c.id for c in w.cells],
                }
                for w in schedule.waves
            ],
            "deferred": [c.id for c in schedule.deferred],
        }
    return json.dumps(payload, indent=2)


def cmd_plan(args: argparse.Namespace, console: Console) -> int:
    """canary plan."""
    from canary.run.preflight import check_results_dir

    config, the_plan = load_plan(args)
    try:  # a plan that could never record its run is refused now, not after it ran
        check_results_dir(config, config_path=str(args.config), dry=True)
    except ConfigError as exc:
        raise blame_overrides(exc, list(args.overrides)) from None
    schedule = schedule_for(config, the_plan)
    if args.json:
        print(plan_json(the_plan, schedule))
        return EXIT_OK
    console.print(plan_table(the_plan, dict(schedule.gpus) if schedule is not None else None))
    high = sum(1 for c in the_plan.planned() if c.high_risk)
    console.print(f"high-risk planned cells: {high}")
    if args.selection_note is not None:
        console.print(args.selection_note)
    if the_plan.reduction == "pairwise":
        planned = len(the_plan.planned())
        console.print(
            f"pairwise: {planned} of {the_plan.full_planned_count} planned cells kept "
            f"(all {high} high-risk ones); saved {the_plan.full_planned_count - planned} cells"
        )
    if schedule is not None:
        console.print(waves_view(schedule))
        console.print(schedule_summary(schedule))
    return EXIT_OK


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """canary run."""
    from canary.run.orchestrate import dry_run, run_and_report
    from canary.run.preflight import RESULTS_DIR_FLAG, RESULTS_DIR_KEY

    quick_cli.apply_image(args)
    config, the_plan = load_plan(args)
    if args.results_dir:
        config.export.results_dir = args.results_dir
    results_from = RESULTS_DIR_FLAG if args.results_dir else RESULTS_DIR_KEY
    try:  # what the target refuses (export.results_dir, target.devices): maybe a --set wrote it
        if args.dry_run:
            print(dry_run(config, the_plan, config_path=str(args.config), results_from=results_from))
            return EXIT_OK
        if args.image:
            quickstart.refuse_missing_image(config, args.image)
        if args.selection_note is not None:
            console.print(args.selection_note)
        run = run_and_report(config, the_plan, config_path=str(args.config), console=console, results_from=results_from)
    except ConfigError as exc:
        raise blame_overrides(exc, list(args.overrides)) from None
    if config.bisect.enabled:  # the run's verdict is written: bisecting adds files, never changes the exit code
        from canary.bisect.auto import bisect_after_run
        from canary.bisect.model import BISECT_JSON, BISECT_MD, headline

        run_dir = Path(config.export.results_dir) / run.run_id
        for report in bisect_after_run(run, config, run_dir):
            console.print(f"bisect: {headline(report)}")
        if (run_dir / BISECT_JSON).is_file():
            console.print(f"bisect: {run_dir / BISECT_JSON}, {run_dir / BISECT_MD}")
    return exit_code(run)


def exit_code(run: RunResult) -> int:
    """The exit code of `canary run` for a finished run: interrupted, else by outcome (results.json's exit_code)."""
    return run.exit_code


def run_needs(config: CanaryConfig, env: Mapping[str, str]) -> list[str]:
    """What `make canary` installs for a run of this config: `engine` (the CPU engine venv: a local target on
    CPU whose images run it; never for a GPU platform, canary.targets.local.target.local_engine_needs),
    `model` (the tiny model: a builtin model on a target that reads it from this machine), `families` (the
    KV family models, canary.model.family_params: one of them is served),
    `pushgateway` (results are pushed: export.pushgateway.url or $PUSHGATEWAY_URL)."""
    from canary.config.targets import TARGET_SECTIONS
    from canary.targets.local.target import local_engine_needs

    needs = []
    if config.target.kind == "local" and local_engine_needs(config)[0]:
        needs.append("engine")
    engines_here = TARGET_SECTIONS[config.target.kind].engines_here  # its settings.py says (local, container)
    if engines_here and any(is_builtin(m.source) for m in config.models):
        needs.append("model")
        if any(m.source.removeprefix(BUILTIN_PREFIX) in FAMILY_NAMES for m in config.models):
            needs.append("families")
    if pushgateway_url(config, env) is not None:
        needs.append("pushgateway")
    return needs


def cmd_needs(args: argparse.Namespace, console: Console) -> int:
    """Print run_needs's words on one line (nothing when the run needs only the controller venv); on stderr,
    what the user must provide that nothing here installs (a local GPU config's engine pythons)."""
    from canary.targets.local.target import local_engine_needs

    config = load_config(args.config, [])
    print(" ".join(run_needs(config, os.environ)))
    if config.target.kind == "local":
        for line in local_engine_needs(config)[1]:
            print(f"canary: not installed here, you provide: {line}", file=sys.stderr)
    return EXIT_OK


def cmd_render_values(args: argparse.Namespace, console: Console) -> int:
    """canary render-values."""
    import yaml

    from canary.targets.kubernetes.values import render_values

    config, the_plan = load_plan(args)
    text = yaml.safe_dump(render_values(config, list(the_plan.planned())), sort_keys=False)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return EXIT_OK


def cmd_serve_metrics(args: argparse.Namespace, console: Console) -> int:
    """canary serve-metrics."""
    from canary.export.prometheus.server import serve

    serve(Path(args.results_dir), args.host, args.port)
    return EXIT_OK


COMMANDS = {"plan": cmd_plan, "run": cmd_run, "render-values": cmd_render_values, "serve-metrics": cmd_serve_metrics}
COMMANDS["needs"] = cmd_needs
COMMANDS.update(history=history_cli.cmd_history, compare=history_cli.cmd_compare)
COMMANDS["catalog"] = catalog_check.cmd_catalog
COMMANDS["bisect"] = bisect_cli.cmd_bisect
COMMANDS["check"] = quick_cli.cmd_check


LONG_RUNNING = frozenset({"run", "bisect", "check"})
"""Commands that start engines and run for minutes: a SIGINT must stop them (and their teardown run)."""


def honour_sigint() -> None:
    """Make SIGINT raise KeyboardInterrupt even where the parent started us with it ignored.

    A non-interactive shell starts a background job (`canary run ... &`) with SIGINT ignored, and
    Python then installs no handler: `kill -INT` (a script's or a supervisor's stop) did nothing.
    A long run that is asked to stop should stop, tearing down what it started (exit 130)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def console_width(tty: bool, env: Mapping[str, str]) -> int | None:
    """$COLUMNS when set; else the terminal's own width (None: rich asks it); else NON_TTY_WIDTH."""
    set_width = columns(env)
    if set_width is not None:
        return set_width
    return None if tty else NON_TTY_WIDTH


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command in LONG_RUNNING:
        honour_sigint()
    console = Console(stderr=False, width=console_width(sys.stdout.isatty(), os.environ))
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
