"""`canary run` end to end: run directory, execution, result files, `latest`, export, terminal grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.console import Console

from canary.config import CanaryConfig
from canary.matrix import Plan
from canary.report import point_latest, write_all
from canary.results import RunResult
from canary.runner import execute, new_run_id
from canary.targets import create_target


def dry_run(config: CanaryConfig, the_plan: Plan) -> str:
    """Everything each planned cell would start (commands, env, ports to be picked), as JSON."""
    target = create_target(config)
    rendered = [{"cell": cell.id, "status": cell.status, **target.describe(cell)} for cell in the_plan.planned()]
    return json.dumps({"config": config.name, "target": config.target.kind, "cells": rendered}, indent=2)


def run_and_report(config: CanaryConfig, the_plan: Plan, *, config_path: str, console: Console) -> RunResult:
    """Run the plan and write/export every result; the run dir is removed if nothing was written."""
    from canary.export import export_run
    from canary.report.terminal import render_grid

    results_root = Path(config.export.results_dir)
    results_root.mkdir(parents=True, exist_ok=True)
    run_dir = results_root / new_run_id(config.name)
    run_dir.mkdir()
    try:
        run = execute(config, the_plan, run_dir, config_path=config_path)
    except BaseException:
        if not any(run_dir.iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    written = write_all(run, run_dir, junit=config.export.junit, html=config.export.html)
    point_latest(results_root, run_dir)
    console.print(render_grid(run))
    for line in export_run(run, config, run_dir):
        console.print(line)
    console.print(
        f"results: {run_dir} ({', '.join(p.name for p in written)}); {results_root / 'latest'} -> {run_dir.name}"
    )
    return run
