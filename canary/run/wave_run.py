"""Run a plan on Kubernetes in waves that fit the GPU budget, resuming the rotation.

`execute_waves` is `canary.run.cells.execute` for `target.kubernetes.gpu_budget`: it picks tonight's
cells (`canary.plan.waves.select_night` with the rotation state of `canary.plan.rotation`), and for each
wave deploys its cells (`canary.targets.kubernetes.waves.WaveDeployer`), runs each cell with the same
`run_next_cell` as `execute` (checks, results, progress), and tears the wave down before the
next. A wave whose typical estimate would end past the job deadline is not started (its cells
wait for the next night). SIGTERM (the CronJob's deadline, `kubectl delete job`) is handled like Ctrl-C: the
current wave is torn down and the run is recorded as interrupted.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from canary.checks.estimate import checks_by_cell
from canary.config import CanaryConfig
from canary.judge.results import CellCoverage, CellResult, RunResult, utc_now
from canary.plan.matrix import Plan
from canary.plan.rotation import RotationState, load_state
from canary.plan.waves import Schedule, select_night
from canary.run.cells import Progress, default_progress, new_run, rejudge, run_cell, run_next_cell
from canary.targets.kubernetes.target import KubernetesTarget
from canary.targets.kubernetes.waves import WaveDeployer, WaveError


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while inside (main thread only), so teardown runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def format_schedule(schedule: Schedule) -> list[str]:
    """Progress lines describing tonight's waves."""
    lines = [
        f"waves: {len(schedule.waves)} for {len(schedule.cells)} cell(s) within {schedule.budget} GPUs "
        f"(peak {schedule.peak_gpus}); estimated {schedule.typical_s / 60:.0f} min (worst "
        f"{schedule.worst_s / 60:.0f} min) of the {schedule.deadline_s / 60:.0f} min deadline; "
        f"{len(schedule.deferred)} cell(s) left for later nights"
    ]
    return lines


def coverage(plan: Plan, state: RotationState, tonight: set[str]) -> list[CellCoverage]:
    """Every planned cell with its last check."""
    out: list[CellCoverage] = []
    for cell in plan.planned():
        seen = state.cells.get(cell.id)
        out.append(
            CellCoverage(
                cell=cell,
                last_checked=seen.last_checked if seen else None,
                last_verdict=seen.verdict if seen else None,
                this_run=cell.id in tonight,
            )
        )
    return out


def execute_waves(
    config: CanaryConfig,
    plan: Plan,
    run_dir: Path,
    *,
    config_path: str = "",
    progress: Progress = default_progress,
    target: KubernetesTarget | None = None,
    deployer: WaveDeployer | None = None,
    state: RotationState | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunResult:
    """Run tonight's cells of a plan wave by wave (see the module docstring), holding the release's
    run lease throughout: a second run of the release waits for it or refuses (LeaseHeld), and the
    rotation state is read and written only under it."""
    run_label = run_dir.name
    target = target or KubernetesTarget(config, run=run_label)
    deployer = deployer or WaveDeployer(config, target.api.api_client, run=run_label)
    with deployer.lease.held() as lease:
        if lease.taken_over is not None:
            progress(f"run lease: taken over from {lease.taken_over.identity} (not renewed: a dead run)")
        state = state or load_state(config, run_dir.parent)
        return _night(config, plan, run_dir, config_path, progress, target, deployer, state, clock)


def _night(
    config: CanaryConfig,
    plan: Plan,
    run_dir: Path,
    config_path: str,
    progress: Progress,
    target: KubernetesTarget,
    deployer: WaveDeployer,
    state: RotationState,
    clock: Callable[[], float],
) -> RunResult:
    """execute_waves under the run lease."""
    planned = plan.planned()
    state.keep_only(c.id for c in planned)
    schedule = select_night(planned, config, state.last_checked(), checks_by_cell)
    run = new_run(config, run_dir, config_path)
    for line in format_schedule(schedule):
        progress(line)
    started = clock()
    earlier: dict[str, CellResult] = {}
    tonight = schedule.cells
    done: set[str] = set()

    def record(result: CellResult) -> None:
        done.add(result.cell.id)
        state.record(result.cell.id, utc_now(), result.verdict)

    for cell in plan.cells:  # skipped / unsupported cells: reported as always, nothing deployed
        if cell.status != "planned":
            run.cells.append(run_cell(cell, config, target, run_dir, earlier, progress))
    try:
        with sigterm_as_interrupt(), deployer.session():
            for wave in schedule.waves:
                elapsed = clock() - started
                if elapsed + wave.typical_s > config.target.kubernetes.job_deadline_s:
                    progress(
                        f"wave {wave.index}: not started, {elapsed / 60:.0f} min used and it needs about "
                        f"{wave.typical_s / 60:.0f} min of the {config.target.kubernetes.job_deadline_s / 60:.0f} "
                        "min deadline; its cells run first next night"
                    )
                    break
                names = ", ".join(c.id for c in wave.cells)
                progress(f"wave {wave.index}/{len(schedule.waves)}: deploying {wave.gpus} GPU(s): {names}")
                with deployer.wave(wave.cells):
                    for cell in wave.cells:
                        run_next_cell(
                            cell, config, target, run_dir, run, earlier, progress, f"wave {wave.index}", record
                        )
                progress(f"wave {wave.index}: torn down")
    except KeyboardInterrupt:
        for cell in tonight:
            if cell.id not in done:
                run.cells.append(CellResult(cell=cell, verdict="error", reason="interrupted (Ctrl-C or SIGTERM)"))
        run.interrupted = True
    except WaveError as exc:  # no further wave: the GPUs of this one may not be free
        progress(f"waves stopped: {exc}")
        for cell in tonight:
            if cell.id not in done:
                run.cells.append(CellResult(cell=cell, verdict="error", reason=f"wave: {exc}"))
    finally:
        run.finished_at = utc_now()
        run.duration_s = round(clock() - started, 3)
    for result in rejudge(run, config, progress):  # Holm over the night's per-request tests, as `execute`
        seen = state.cells.get(result.cell.id)
        if seen is not None:
            state.record(result.cell.id, seen.last_checked, result.verdict)
    run.coverage = coverage(plan, state, done)
    return run
