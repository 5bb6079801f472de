"""The command line of the one-line starts (canary.run.quickstart): `canary check URL` and `canary run --image`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from canary.config.load import project_file
from canary.errors import UsageError
from canary.run import quickstart
from canary.run.quickstart import CheckRequest


def add_check_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`canary check URL [flags]`."""
    parser = sub.add_parser(
        "check",
        help="judge a running OpenAI-compatible server or P/D router, no config file (startup, GSM8K, throughput)",
    )
    parser.add_argument("url", help="base URL of the server or router, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="served model to check (default: the first one /v1/models lists)")
    parser.add_argument("--metrics-url", help="the server's /metrics (default: URL/metrics)")
    parser.add_argument("--prefill-metrics-url", help="a P/D router's prefill server /metrics (with --decode-...)")
    parser.add_argument("--decode-metrics-url", help="a P/D router's decode server /metrics (with --prefill-...)")
    parser.add_argument(
        "--topology",
        choices=("aggregated", "pd-nixl"),
        help="what sits behind URL (default: pd-nixl when the engines' metrics URLs are given, else aggregated)",
    )
    parser.add_argument(
        "--platform",
        choices=tuple(quickstart.PLATFORM_BACKEND),
        default="cpu",
        help="the server's platform, for the cell's name and catalog (default: cpu)",
    )
    parser.add_argument(
        "--gsm8k",
        default="auto",
        metavar="SOURCE",
        help="GSM8K data: auto (the project's model's own data, else the hub), hub, off, or a directory",
    )
    parser.add_argument(
        "--ready-timeout", type=int, default=60, metavar="S", help="seconds to wait for URL to serve (default: 60)"
    )
    parser.add_argument("--results-dir", help="results root (default: results)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a key of the config built for URL (YAML), e.g. --set checks.accuracy.min_accuracy=0.5",
    )


def request_from(args: argparse.Namespace) -> CheckRequest:
    """The CheckRequest of parsed `canary check` arguments."""
    if args.ready_timeout <= 0:
        raise UsageError(f"canary check --ready-timeout {args.ready_timeout}: must be a positive number of seconds")
    return CheckRequest(
        url=args.url,
        model=args.model,
        metrics_url=args.metrics_url,
        prefill_metrics_url=args.prefill_metrics_url,
        decode_metrics_url=args.decode_metrics_url,
        topology=args.topology,
        platform=args.platform,
        gsm8k=args.gsm8k,
        ready_timeout_s=args.ready_timeout,
        results_dir=args.results_dir,
        overrides=tuple(args.overrides),
    )


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """canary check: discover the endpoint, build its config, run it as `canary run` would (same exit codes)."""
    from canary.run.orchestrate import run_and_report
    from canary.run.preflight import RESULTS_DIR_FLAG, RESULTS_DIR_KEY

    request = request_from(args)
    quickstart.refuse_bad_urls(request)
    facts = quickstart.discover(request)
    if facts.unread:
        print(
            f"canary: warning: live config not verified (startup judges readiness only): {', '.join(facts.unread)}",
            file=sys.stderr,
        )
    config = quickstart.check_config(request, facts)
    the_plan = quickstart.check_plan(config)
    results_from = RESULTS_DIR_FLAG if request.results_dir else RESULTS_DIR_KEY
    run = run_and_report(
        config, the_plan, config_path=quickstart.CHECK_SOURCE, console=console, results_from=results_from
    )
    return run.exit_code


def apply_image(args: argparse.Namespace) -> None:
    """`canary run [CONFIG] --image REF`: the config defaults to cpu-default and gets image_overrides before the
    user's own --set (which win). Without --image a config is required."""
    if args.config is None and not args.image:
        raise UsageError("canary run needs a CONFIG (e.g. configs/cpu-default.yaml), or --image REF")
    if not args.image:
        return
    args.config = args.config or quickstart.DEFAULT_CONFIG
    path = project_file(Path(args.config))
    if not path.is_file():
        return  # load_config names the missing file and the configs to pick from
    args.overrides = [*quickstart.image_overrides(path, args.image), *args.overrides]
    if args.dry_run:
        warn_missing_image(args)


def warn_missing_image(args: argparse.Namespace) -> None:
    """A dry run renders the containers of an image that is not here yet, and says it would stop the run."""
    from canary.config.load import load_config

    try:
        quickstart.refuse_missing_image(load_config(args.config, list(args.overrides)), args.image)
    except UsageError as exc:
        print(f"canary: warning: a run would stop here: {exc}", file=sys.stderr)
