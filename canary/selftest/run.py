"""Running the selftest: the clean runs and one run per seeded fault, through the real pipeline
(`canary.run.cells.execute`), each judged as it ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.judge.results import RunResult, utc_now
from canary.plan.matrix import plan
from canary.plan.validate import validate_plan
from canary.selftest.judge import ProgressClock, judge_clean, judge_fault
from canary.selftest.model import (
    DEFAULT_CLEAN_RUNS,
    FAULTS_FILE,
    CleanOutcome,
    FaultOutcome,
    SelftestResult,
    clean_image,
    fault_config,
    load_faults,
)


def _execute(config: CanaryConfig, run_dir: Path, clock: ProgressClock, config_path: str) -> RunResult:
    from canary.export.report import write_all
    from canary.run.cells import execute

    run_dir.mkdir(parents=True, exist_ok=False)
    run = execute(config, plan(config), run_dir, config_path=config_path, progress=clock)
    write_all(run, run_dir, junit=False, html=False)
    return run


def run_selftest(
    config_path: Path,
    out_dir: Path,
    *,
    clean_runs: int = DEFAULT_CLEAN_RUNS,
    only: list[str] | None = None,
    faults_file: Path = FAULTS_FILE,
    overrides: list[str] | None = None,
    printer: Callable[[str], None] | None = None,
) -> SelftestResult:
    """Run the clean case `clean_runs` times and every (selected) fault once. `overrides` are
    `--set KEY=VALUE` overrides of the selftest config (applied to every run)."""
    from canary.run.cells import default_progress

    say = printer or default_progress
    catalog = load_faults(faults_file)
    faults = [f for f in catalog.faults if only is None or f.id in only or f.id[:2] in only]
    if only is not None and not faults:
        known = ", ".join(f.id for f in catalog.faults)
        raise ConfigError("--fault", ",".join(only), f"no such fault; known: {known}")
    # The configs run clean: --config, and every config a selected fault names (a family matrix: its
    # cells must show no false alarm either). With --fault, only the selected faults' configs.
    paths = list(dict.fromkeys(([config_path] if only is None else []) + [f.config_path(config_path) for f in faults]))
    bases = {path: load_config(path, overrides) for path in paths}
    for path, base in bases.items():
        clean_image(base)
        validate_plan(base, str(path))
    configs = {  # config errors before any engine
        f.id: fault_config(bases[f.config_path(config_path)], f, faults_file) for f in faults
    }
    for fault in faults:
        validate_plan(configs[fault.id], f"{faults_file} ({fault.id})")
    started_at, started = utc_now(), time.monotonic()
    clean: list[CleanOutcome] = []
    outcomes: list[FaultOutcome] = []
    for path, base in bases.items():
        for index in range(1, clean_runs + 1):
            name = "" if path == config_path else base.name
            say(f"== selftest: clean run {index}/{clean_runs}" + (f" of {name}" if name else ""))
            clock = ProgressClock(say)
            run_dir = out_dir / (f"clean-{name}-{index}" if name else f"clean-{index}")
            run = _execute(base, run_dir, clock, str(path))
            alarms, cells = judge_clean(run)
            clean.append(
                CleanOutcome(
                    index=index,
                    config=base.name,
                    ok=not alarms,
                    alarms=alarms,
                    cells=cells,
                    run_duration_s=run.duration_s,
                    run_dir=str(run_dir),
                )
            )
            verdict = "no alarm" if not alarms else "FALSE ALARM: " + "; ".join(alarms)
            say(f"== selftest: clean run {index}" + (f" of {name}" if name else "") + f": {verdict}")
            if run.interrupted:
                raise KeyboardInterrupt
    for fault in faults:
        say(f"== selftest: fault {fault.id}: {fault.title} (expect {fault.expect_check})")
        clock = ProgressClock(say)
        run_dir = out_dir / f"fault-{fault.id}"
        run_started = time.monotonic()
        run = _execute(configs[fault.id], run_dir, clock, str(fault.config_path(config_path)))
        detected, fired, errors, detail, when = judge_fault(run, fault, f"fault-{fault.id}", run_started, clock)
        outcomes.append(
            FaultOutcome(
                id=fault.id,
                title=fault.title,
                expected_check=fault.expect_check,
                detected=detected,
                fired=fired,
                errors=errors,
                detail=detail,
                time_to_verdict_s=when,
                run_duration_s=run.duration_s,
                run_dir=str(run_dir),
            )
        )
        say(f"== selftest: fault {fault.id}: {'DETECTED' if detected else 'MISSED'} ({detail})")
        if run.interrupted:
            raise KeyboardInterrupt
    return SelftestResult(
        started_at=started_at,
        duration_s=round(time.monotonic() - started, 1),
        ok=all(c.ok for c in clean) and all(o.detected for o in outcomes),
        config=str(config_path),
        clean=clean,
        faults=outcomes,
    )
