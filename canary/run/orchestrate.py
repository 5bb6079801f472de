"""`canary run` end to end: run directory, execution, result files, `latest`, export, terminal grid."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from canary.config import CanaryConfig
from canary.core.atomic import write_atomic
from canary.core.redact import redact_tree
from canary.errors import warn_stderr
from canary.export.report import point_latest, write_all
from canary.export.report.trends import Trends, load_trends
from canary.judge.results import RunResult
from canary.plan.matrix import Plan
from canary.run.cells import execute, new_run_id, preflight
from canary.run.preflight import RESULTS_DIR_KEY, check_results_dir
from canary.run.wave_preview import wave_preview
from canary.run.wave_run import execute_waves
from canary.targets import create_target


def dry_run(
    config: CanaryConfig,
    the_plan: Plan,
    *,
    config_path: str = "config",
    warn: Callable[[str], None] = warn_stderr,
    results_from: str = RESULTS_DIR_KEY,
) -> str:
    """Everything each planned cell would start (commands, env, ports to be picked), as JSON. What would stop
    a run here but not the rendering (weights not on this machine, no GPU) is passed to `warn`; a results
    directory the run could not write is refused, as the run would (canary.run.preflight)."""
    check_results_dir(config, config_path=config_path, results_from=results_from, dry=True)
    target = create_target(config, source=config_path)
    for message in preflight(target, the_plan.planned(), dry_run=True):
        warn(message)
    rendered = [{"cell": cell.id, "status": cell.status, **target.describe(cell)} for cell in the_plan.planned()]
    payload: dict[str, object] = {"config": config.name, "target": config.target.kind, "cells": rendered}
    waves = wave_preview(config, the_plan)
    if waves is not None:  # Kubernetes in waves: tonight's waves and the first wave's manifests
        payload["waves"] = waves
    # secrets never printed: env values of secret-looking names or copied by env_from, URL user information
    return json.dumps(redact_tree(payload, also=config.target.local.env_from), indent=2)


RUN_TEXTFILE_NAME = "canary.prom"
"""The run's Prometheus textfile, written beside its reports."""
RUN_CONFIG_NAME = "config.json"
"""The run's config as it ran (the file with every --set applied): what `canary bisect` reruns a cell with."""


def write_results(
    run: RunResult, run_dir: Path, *, junit: bool = True, html: bool = True, trends: Trends | None = None
) -> list[Path]:
    """Every result file of a run: the reports (results.json first; the summaries compared with the
    run history when trends are given) and the run's Prometheus textfile."""
    from canary.export.prometheus.textfile import write_textfile

    written = write_all(run, run_dir, junit=junit, html=html, trends=trends)
    written.append(write_textfile(run, run_dir / RUN_TEXTFILE_NAME))
    return written


def run_and_report(
    config: CanaryConfig,
    the_plan: Plan,
    *,
    config_path: str,
    console: Console,
    results_from: str = RESULTS_DIR_KEY,
) -> RunResult:
    """Check that the results directory takes a run directory (canary.run.preflight), run the plan and
    write/export every result; the run dir is removed if nothing was written. results_from: where
    export.results_dir came from (the config key or the --results-dir flag)."""
    from canary.export.prometheus.publish import export_run
    from canary.export.report.terminal import outcome_line, render_grid

    check_results_dir(config, config_path=config_path, results_from=results_from)
    results_root = Path(config.export.results_dir)
    results_root.mkdir(parents=True, exist_ok=True)
    run_dir = results_root / new_run_id(config.name)
    run_dir.mkdir()
    write_atomic(run_dir / RUN_CONFIG_NAME, config.model_dump_json(indent=2))
    try:
        if config.target.kind == "kubernetes" and config.target.kubernetes.gpu_budget is not None:
            run = execute_waves(config, the_plan, run_dir, config_path=config_path)
        else:
            run = execute(config, the_plan, run_dir, config_path=config_path)
    except BaseException:
        if not any(p.name != RUN_CONFIG_NAME for p in run_dir.iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    trends = load_trends(run, config.export.history, results_root)  # the runner recorded this run already
    written = write_results(run, run_dir, junit=config.export.junit, html=config.export.html, trends=trends)
    point_latest(results_root, run_dir)
    console.print(render_grid(run))
    for line in export_run(run, config, run_dir):
        console.print(line)
    console.print(
        f"results: {run_dir} ({', '.join(p.name for p in written)}); {results_root / 'latest'} -> {run_dir.name}"
    )
    console.print(outcome_line(run))
    return run
