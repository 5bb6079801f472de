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
from collections.abc import Callable, Sequence
from pathlib import Path

from canary import __version__
from canary.checks.base import CheckContext, check_order, registered, run_before_checks
from canary.config import CanaryConfig
from canary.core.term import fit, terminal_width
from canary.export.history.record import record_run
from canary.judge.expectations import ENGINES_CHECK, apply_expectation
from canary.judge.request_tests import apply_family_control, provisional
from canary.judge.results import CellResult, CheckResult, Gate, RunResult, utc_now
from canary.plan.cell import Cell
from canary.plan.matrix import Plan
from canary.run.eta import Eta
from canary.run.held import HeldDeployments
from canary.targets import create_target
from canary.targets.base import Deployment, Preflight, Target

Progress = Callable[[str], None]


def default_progress(message: str) -> None:
    """Print a progress line to stderr with a timestamp, cut to the terminal's width with an ellipsis
    (a reason is whole in results.json and summary.md; into a file or pipe the line stays whole)."""
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(fit(line, terminal_width(sys.stderr, os.environ)), file=sys.stderr, flush=True)


def new_run_id(config_name: str) -> str:
    """<UTC time>-<config name>, unique per second (pid added against collisions)."""
    return f"{utc_now().strftime('%Y%m%dT%H%M%SZ')}-{config_name}-{os.getpid()}"


def _error_result(name: str, exc: BaseException) -> CheckResult:
    return CheckResult(
        name=name,
        verdict="error",
        summary=f"{type(exc).__name__}: {exc}",
        evidence={"traceback": traceback.format_exc(limit=8)},
    )


def run_checks(ctx: CheckContext, progress: Progress, deploy_s: float = 0.0) -> list[CheckResult]:
    """Run the enabled checks of a started cell in check_order(); stop after a startup that left nothing serving.
    The startup check judges the deployment: its duration includes the `deploy_s` the deployment took.

    A cell that serves but runs another config or KV layout than asked fails the startup check and is
    still checked: its parity, accuracy and transfer evidence say what the mismatch does to answers."""
    checks = registered()
    results: list[CheckResult] = []
    hooks_ran = False
    for name in check_order():
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
        judged_s = time.monotonic() - started
        result.duration_s = round(judged_s + (deploy_s if name == "startup" else 0.0), 3)
        results.append(result)
        ctx.checked[name] = result
        progress(f"  {ctx.cell.id}: {check_line(result, deploy_s if name == 'startup' else None)}")
        if name == "startup" and result.verdict != "pass" and result.evidence.get("serving") is not True:
            break  # nothing to check; a serving cell that runs another config/layout is still checked
        # A check that crashed may have met a server on its way down (HTTP 500 while the engine core dies,
        # the process exiting a moment later): give it DEATH_GRACE_S to show before judging it alive.
        grace = DEATH_GRACE_S if result.verdict == "error" else 0.0  # a fail was answered: no wait
        died = engines_died(ctx.deployment, during=name, grace_s=grace)
        if died is not None:  # what the later checks would measure is a dead server: stop, name the death
            results.append(died)
            ctx.checked[died.name] = died
            progress(f"  {ctx.cell.id}: {check_line(died)}")
            break
    return results


DEATH_GRACE_S = 10.0
"""How long the runner watches for a server to exit after a check that crashed (a dying vLLM answers 500 for
a moment before its process ends); a check that failed on answers it got costs no wait."""
DEATH_POLL_S = 0.5


def engines_died(
    deployment: Deployment, during: str, grace_s: float = 0.0, sleep: Callable[[float], None] = time.sleep
) -> CheckResult | None:
    """A failed `engines` result naming every server of the cell that died (role, exit status or
    signal, when, the log lines before it), or None while all run (or the target cannot tell); with
    grace_s, watched that long before saying they all run."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            found = deployment.deaths()
        except Exception as exc:  # a watch that breaks must not hide the checks' results
            return CheckResult(name=ENGINES_CHECK, verdict="error", summary=f"cannot watch the servers: {exc}")
        if found or deployment.exit_status is None or time.monotonic() >= deadline:
            break
        sleep(DEATH_POLL_S)
    if not found:
        return None
    return CheckResult(
        name=ENGINES_CHECK,
        verdict="fail",
        summary=f"during {during}: " + "; ".join(d.line() for d in found),
        gates=[Gate(name="servers-alive", passed=False, detail="; ".join(d.line() for d in found))],
        evidence={"deaths": [d.to_json() for d in found], "during": during},
    )


def check_line(result: CheckResult, deploy_s: float | None = None) -> str:
    """A check's progress line: its verdict (as recorded unless marked provisional), the time it took
    (with the deployment the startup check judged) and its summary."""
    took = f"{result.duration_s:.1f}s" + (f", of which deploy {deploy_s:.1f}s" if deploy_s is not None else "")
    pending = " (provisional: re-judged over the whole run)" if provisional(result) else ""
    return f"{result.name} -> {result.verdict}{pending} ({took}) {result.summary}"


def run_cell(
    cell: Cell,
    config: CanaryConfig,
    target: Target,
    run_dir: Path,
    earlier: dict[str, CellResult],
    progress: Progress,
    held: HeldDeployments | None = None,
) -> CellResult:
    """Deploy one cell, check it, tear it down (or, with `held`, keep it frozen for a later paired check)."""
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
        deploying = time.monotonic()
        deploying_cell = held.deploy_cell(cell, log_dir) if held is not None else target.deploy(cell, log_dir)
        with deploying_cell as deployment:
            deploy_s = time.monotonic() - deploying
            logs = _log_paths(deployment, run_dir)
            ctx = CheckContext(
                cell=cell,
                deployment=deployment,
                config=config,
                cell_dir=cell_dir,
                earlier=earlier,
                deploy=held.deploy if held is not None else target.deploy,
            )
            checks = run_checks(ctx, progress, deploy_s)
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


def preflight(target: Target, cells: Sequence[Cell], *, dry_run: bool) -> list[str]:
    """The target's check of every planned cell before any starts (canary.targets.base.Preflight; other
    targets: nothing): raises what would stop the run, returns a dry run's warnings."""
    return target.preflight(cells, dry_run=dry_run) if isinstance(target, Preflight) else []


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
    held: HeldDeployments | None = None,
) -> CellResult:
    """Run one cell of a run in order (`run_cell`), add its result to the run and to the results the
    following cells compare with (earlier), hand it to `record` (kept before anything else can fail),
    and report its verdict prefixed with where it ran."""
    result = run_cell(cell, config, target, run_dir, earlier, progress, held)
    if held is not None:
        held.finished(cell.id)
    earlier[cell.id] = result
    run.cells.append(result)
    if record is not None:
        record(result)
    progress(f"{where}: {cell.id} => {verdict_line(result)}")
    return result


def verdict_line(result: CellResult) -> str:
    """A cell's recorded verdict and reason as its progress lines print them; says when family control
    over the run may still change it (then `rejudge` prints the verdict recorded)."""
    throughput = result.check("throughput")
    pending = " (provisional: per-request tests are re-judged over the whole run)"
    return f"{result.verdict.upper()} {result.reason}" + (pending if throughput and provisional(throughput) else "")


def rejudge(run: RunResult, config: CanaryConfig, progress: Progress) -> list[CellResult]:
    """Family control over the run's per-request tests (canary.judge.request_tests), then each changed
    cell's verdict re-derived and printed: a cell's last progress line is the verdict recorded.
    Returns the cells whose verdicts were re-derived."""
    was = {c.cell.id: check.verdict for c in run.cells if (check := c.check("throughput")) is not None}
    changed_ids = apply_family_control(run.cells, config.checks.throughput.per_request)
    changed = [c for c in run.cells if c.cell.id in changed_ids]
    for result in changed:
        cell_id = result.cell.id
        result.verdict, result.reason = apply_expectation(result.cell, result.checks)
        now = result.check("throughput")
        progress(
            f"  {cell_id}: throughput {was.get(cell_id, '-')} -> {now.verdict if now else '-'} "
            "after Holm over the run's per-request tests"
        )
        progress(f"re-judged: {cell_id} => {result.verdict.upper()} {result.reason}")
    return changed


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
    target = target or create_target(config, source=config_path or "config")
    preflight(target, plan.planned(), dry_run=False)  # a cell that cannot start here stops the run before any does
    run = new_run(config, run_dir, config_path)
    started = time.monotonic()
    earlier: dict[str, CellResult] = {}
    total = len(plan.cells)
    eta = Eta.for_plan(plan.cells, config)
    try:
        with HeldDeployments(target, config, plan.cells, progress) as held:
            for index, cell in enumerate(plan.cells, start=1):
                ahead = eta.line() if cell.status == "planned" else ""
                progress(f"cell {index}/{total}: {cell.id} [{cell.status}]" + (f", {ahead}" if ahead else ""))
                where = f"cell {index}/{total}"
                eta.cell_done(run_next_cell(cell, config, target, run_dir, run, earlier, progress, where, held=held))
    except KeyboardInterrupt:
        for cell in plan.cells[len(run.cells) :]:
            run.cells.append(CellResult(cell=cell, verdict="error", reason="interrupted (Ctrl-C)"))
        run.interrupted = True
    finally:
        run.finished_at = utc_now()
        run.duration_s = round(time.monotonic() - started, 3)
    rejudge(run, config, progress)
    for line in record_run(run, config.export.history, run_dir.parent):
        progress(line)
    return run
