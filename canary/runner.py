"""Run a plan: deploy each cell on the target, run its checks, judge, write and export results.

plan -> deploy -> check -> judge -> export. Cells run one after another (aggregated controls
first, so P/D cells can be compared with them). Every deployment is a context manager: whatever
was started is stopped when the cell ends, also on Ctrl-C or a crash.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from canary import __version__
from canary.cell import Cell
from canary.checks.base import CHECK_ORDER, CheckContext, registered, run_before_checks
from canary.config import CanaryConfig
from canary.history.record import record_run
from canary.matrix import Plan
from canary.results import CellResult, CheckResult, RunResult, Verdict, utc_now, worst
from canary.stats_gate import apply_family_control
from canary.targets import create_target
from canary.targets.base import Deployment, Target

Progress = Callable[[str], None]


def default_progress(message: str) -> None:
    """Print a progress line to stderr with a timestamp."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def new_run_id(config_name: str) -> str:
    """<UTC time>-<config name>, unique per second (pid added against collisions)."""
    return f"{utc_now().strftime('%Y%m%dT%H%M%SZ')}-{config_name}-{os.getpid()}"


def apply_expectation(cell: Cell, checks: list[CheckResult]) -> tuple[Verdict, str]:
    """The cell verdict from its checks and its expectation (xfail semantics)."""
    verdicts = [c.verdict for c in checks]
    raw = worst(verdicts)
    failed = [c for c in checks if c.verdict in ("fail", "error")]
    reason = "; ".join(f"{c.name}: {c.summary}" for c in failed) or "; ".join(
        f"{c.name}: {c.summary}" for c in checks if c.verdict == raw
    )
    expect = cell.expect
    if expect is None or expect.expect == "pass":
        return raw, reason
    startup = next((c for c in checks if c.name == "startup"), None)
    if expect.expect == "startup-fail":
        if startup is None or startup.verdict == "pass":
            return "unexpected-pass", f"expected startup failure did not happen ({expect.reason})"
        observed = str(startup.evidence.get("failure_class", ""))
        if expect.failure_class and observed != expect.failure_class:
            return "fail", f"startup failed as {observed or 'unclassified'}, expected {expect.failure_class}"
        return "expected-fail", f"{expect.reason} (classified {observed or 'unclassified'})"
    if startup is not None and startup.evidence.get("serving") is False:
        # check-fail means: it starts, serves, and a check fails; a crash at startup is another outcome
        return "fail", f"expected the cell to start and fail a check, but it did not start: {startup.summary}"
    if expect.failing_checks is None:
        if failed:
            return "expected-fail", f"{expect.reason} ({reason})"
        return "unexpected-pass", f"expected a check failure did not happen ({expect.reason})"
    expected = set(expect.failing_checks)
    others = [c for c in failed if c.name not in expected]
    if others:  # a failure the expectation does not cover is never masked
        return worst([c.verdict for c in others]), "; ".join(f"{c.name}: {c.summary}" for c in others)
    # Only a named check that ran and passed is evidence against the expectation. One that did not run
    # (disabled in this run, e.g. `--set checks.parity.enabled=false`) or could not judge (invalid,
    # skipped) is no evidence either way: turning a check off must not turn a known bug into a finding.
    by_name = {c.name: c.verdict for c in checks}
    passed = [name for name in expect.failing_checks if by_name.get(name) == "pass"]
    if passed:
        return "unexpected-pass", f"{', '.join(passed)} did not fail as expected ({expect.reason})"
    failed_names = {c.name for c in failed}
    unjudged = [f"{n} ({by_name.get(n, 'not run')})" for n in expect.failing_checks if n not in failed_names]
    if not failed:
        named = {by_name.get(name) for name in expect.failing_checks}
        none_judged: Verdict = "invalid" if "invalid" in named else "skipped"
        return none_judged, f"expectation not judged: {', '.join(unjudged)} ({expect.reason})"
    not_judged = f"; not judged: {', '.join(unjudged)}" if unjudged else ""
    return "expected-fail", f"{expect.reason} ({reason}{not_judged})"


def _error_result(name: str, exc: BaseException) -> CheckResult:
    return CheckResult(
        name=name,
        verdict="error",
        summary=f"{type(exc).__name__}: {exc}",
        evidence={"traceback": traceback.format_exc(limit=8)},
    )


def run_checks(ctx: CheckContext, progress: Progress) -> list[CheckResult]:
    """Run the enabled checks of a started cell in CHECK_ORDER; stop after a startup that left nothing serving.

    A cell that serves but runs another config or KV layout than asked fails the startup check and is
    still checked: its parity, accuracy and transfer evidence say what the mismatch does to answers."""
    checks = registered()
    results: list[CheckResult] = []
    hooks_ran = False
    for name in CHECK_ORDER:
        fn = checks.get(name)
        settings = getattr(ctx.config.checks, name, None)
        if fn is None or (settings is not None and not getattr(settings, "enabled", True)):
            continue
        if name != "startup" and not hooks_ran:
            run_before_checks(ctx)  # e.g. NIXL counters before any check sends traffic
            hooks_ran = True
        progress(f"  {ctx.cell.id}: {name} ...")
        started = time.monotonic()
        try:
            result = fn(ctx)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a check crashing is that check's error, not the run's
            result = _error_result(name, exc)
        result.duration_s = round(time.monotonic() - started, 3)
        results.append(result)
        progress(f"  {ctx.cell.id}: {name} -> {result.verdict} ({result.duration_s:.1f}s) {result.summary}")
        if name == "startup" and result.verdict != "pass" and result.evidence.get("serving") is not True:
            break  # nothing to check; a serving cell that runs another config/layout is still checked
    return results


def run_cell(
    cell: Cell, config: CanaryConfig, target: Target, run_dir: Path, earlier: dict[str, CellResult], progress: Progress
) -> CellResult:
    """Deploy one cell, check it, tear it down."""
    if cell.status != "planned":
        verdict = "skipped" if cell.status == "skipped" else "unsupported"
        return CellResult(cell=cell, verdict=verdict, reason=cell.reason or "")
    cell_dir = run_dir / "cells" / cell.id
    log_dir = cell_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    started_at, started = utc_now(), time.monotonic()
    checks: list[CheckResult] = []
    logs: dict[str, str] = {}
    try:
        progress(f"{cell.id}: deploying ({cell.topology}, {cell.backend}, {cell.block_label}, {cell.runner})")
        with target.deploy(cell, log_dir) as deployment:
            logs = _log_paths(deployment, run_dir)
            ctx = CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=cell_dir, earlier=earlier)
            checks = run_checks(ctx, progress)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the target failed outside of any check
        checks.append(_error_result("deploy", exc))
    verdict, reason = apply_expectation(cell, checks)
    return CellResult(
        cell=cell,
        verdict=verdict,
        reason=reason,
        checks=checks,
        logs=logs,
        started_at=started_at,
        duration_s=round(time.monotonic() - started, 3),
    )


def _log_paths(deployment: Deployment, run_dir: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for role, server in deployment.servers.items():
        if server.log_path is not None:
            try:
                out[role] = str(server.log_path.relative_to(run_dir))
            except ValueError:
                out[role] = str(server.log_path)
    return out


def new_run(config: CanaryConfig, run_dir: Path, config_path: str) -> RunResult:
    """An empty result for a run of a config whose directory is run_dir (the run id is its name)."""
    return RunResult(
        run_id=run_dir.name,
        config_name=config.name,
        config_path=config_path,
        platform=config.platform,
        target=config.target.kind,
        baseline_image=config.baseline,
        canary_version=__version__,
    )


def run_next_cell(
    cell: Cell,
    config: CanaryConfig,
    target: Target,
    run_dir: Path,
    run: RunResult,
    earlier: dict[str, CellResult],
    progress: Progress,
    where: str,
    record: Callable[[CellResult], None] | None = None,
) -> CellResult:
    """Run one cell of a run in order (`run_cell`), add its result to the run and to the results the
    following cells compare with (earlier), hand it to `record` (kept before anything else can fail),
    and report its verdict prefixed with where it ran."""
    result = run_cell(cell, config, target, run_dir, earlier, progress)
    earlier[cell.id] = result
    run.cells.append(result)
    if record is not None:
        record(result)
    progress(f"{where}: {cell.id} => {result.verdict.upper()} {result.reason}")
    return result


def execute(
    config: CanaryConfig,
    plan: Plan,
    run_dir: Path,
    *,
    config_path: str = "",
    progress: Progress = default_progress,
    target: Target | None = None,
) -> RunResult:
    """Run every cell of a plan. On Ctrl-C the cells not run are recorded as errors, the run is
    marked interrupted and returned (whatever was started has been stopped by then)."""
    target = target or create_target(config)
    run = new_run(config, run_dir, config_path)
    started = time.monotonic()
    earlier: dict[str, CellResult] = {}
    total = len(plan.cells)
    try:
        for index, cell in enumerate(plan.cells, start=1):
            progress(f"cell {index}/{total}: {cell.id} [{cell.status}]")
            run_next_cell(cell, config, target, run_dir, run, earlier, progress, f"cell {index}/{total}")
    except KeyboardInterrupt:
        for cell in plan.cells[len(run.cells) :]:
            run.cells.append(CellResult(cell=cell, verdict="error", reason="interrupted (Ctrl-C)"))
        run.interrupted = True
    finally:
        run.finished_at = utc_now()
        run.duration_s = round(time.monotonic() - started, 3)
    for cell_id in apply_family_control(run.cells, config.checks.throughput.per_request):
        result = next(c for c in run.cells if c.cell.id == cell_id)
        result.verdict, result.reason = apply_expectation(result.cell, result.checks)
    for line in record_run(run, config.export.history, run_dir.parent):
        progress(line)
    return run
