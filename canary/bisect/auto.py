"""The bisection `canary run` starts itself (config `bisect.enabled`): after the run's reports are
written, each candidate-image cell that failed while the same cell on the baseline image passed is
bisected over its image's patch series, as `canary bisect RUN --cell CELL` would (same steps, same
files, same budget per cell: `bisect.max_runs`, `bisect.max_minutes`), at most `bisect.max_cells`
cells in plan order.

Which cells (`choose`): the candidate failed (verdict fail) and its baseline counterpart (the same
axes, the baseline image) passed, so the candidate's image is what differs; the image has a patch
series that is there; the target runs series steps (local, container); not a mixed pair. A failure
the baseline shares is not the series' fault and is not bisected; nor is an image without a series
(an image range needs `canary bisect --images GOOD ... BAD`). Every failed candidate cell that is
not bisected is named with why.

The run's exit code stays its verdict's: the bisection adds files (bisect.json, bisect.md,
bisect.prom, summary.html again) and history rows, never a verdict. Ctrl-C ends the bisection in
progress as interrupted (its steps so far are in bisect.json) and bisects no further cell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from canary.bisect.model import BisectReport
from canary.bisect.run import (
    SUPPORTED_TARGETS,
    check_supported,
    load_input,
    policy_of,
    run_bisection,
    series_range,
)
from canary.bisect.search import Judgement
from canary.config import CanaryConfig
from canary.errors import CanaryError
from canary.images.table import find_series
from canary.judge.results import CellResult, RunResult
from canary.run.cells import Progress, default_progress


@dataclass(frozen=True)
class Choice:
    """A failed candidate-image cell, and whether the run bisects it (why, in words)."""

    cell_id: str
    bisect: bool
    why: str


def baseline_counterpart(run: RunResult, result: CellResult, baseline: str) -> CellResult | None:
    """The same cell on the baseline image (every axis equal but the image), if the run has it."""
    want = {**result.cell.axis_values(), "image": baseline}
    return next((r for r in run.cells if r is not result and r.cell.axis_values() == want), None)


def _why_not(result: CellResult, other: CellResult | None, config: CanaryConfig, baseline: str) -> str | None:
    """Why a failed candidate cell (whose baseline counterpart is `other`) is not bisected; None when it is."""
    cell = result.cell
    if cell.mixed:
        return "it runs two images (a mixed pair): bisecting one is not supported yet"
    if other is None:
        return f"the run has no counterpart on the baseline image {baseline!r} to show the candidate is at fault"
    if other.verdict != "pass":
        return (
            f"its baseline counterpart {other.cell.id} did not pass either ({other.verdict}): "
            "the failure is not the candidate's"
        )
    series = config.images[cell.image].patches if cell.image in config.images else None
    if series is None:
        return (
            f"image {cell.image!r} has no patch series (images.{cell.image}.patches); "
            "an image range is bisected by hand: canary bisect RUN --cell CELL --images GOOD ... BAD"
        )
    if find_series(series) is None:
        return f"its patch series {series!r} is not there"
    if config.target.kind not in SUPPORTED_TARGETS["series"]:
        return f"bisecting a series on the {config.target.kind} target is not supported yet"
    return None


def choose(run: RunResult, config: CanaryConfig) -> list[Choice]:
    """Every failed cell of a non-baseline image, in plan order, and whether it is bisected: the first
    `bisect.max_cells` bisectable ones are."""
    baseline = run.baseline_image or config.baseline
    out: list[Choice] = []
    for result in run.cells:
        if result.cell.image == baseline or result.verdict != "fail":
            continue
        other = baseline_counterpart(run, result, baseline)
        why_not = _why_not(result, other, config, baseline)
        if why_not is None and sum(c.bisect for c in out) >= config.bisect.max_cells:
            why_not = (
                f"bisect.max_cells ({config.bisect.max_cells}) cells are bisected already: "
                f"canary bisect RUN --cell {result.cell.id}"
            )
        if why_not is None and other is not None:  # (no counterpart always has a why_not)
            out.append(Choice(result.cell.id, True, f"failed on {result.cell.image}, passed as {other.cell.id}"))
        else:
            out.append(Choice(result.cell.id, False, why_not or ""))
    return out


def bisect_after_run(
    run: RunResult,
    config: CanaryConfig,
    run_dir: Path,
    *,
    progress: Progress = default_progress,
    judges: Mapping[str, Callable[[int], Judgement]] | None = None,
) -> list[BisectReport]:
    """Bisect the run's chosen cells one after the other (nothing when `bisect.enabled` is false or
    the run was interrupted); returns the bisections done. Errors of one cell (its input, its
    target) are a line and the next cell goes on; Ctrl-C stops. `judges` (tests): by cell id, what
    replaces the cell's runs."""
    if not config.bisect.enabled:
        return []
    if run.interrupted:
        progress("bisect: the run was interrupted: no cell is bisected")
        return []
    choices = choose(run, config)
    for choice in choices:
        if not choice.bisect:
            progress(f"bisect: {choice.cell_id} is not bisected: {choice.why}")
    chosen = [c for c in choices if c.bisect]
    if not choices:
        progress("bisect: no cell of a candidate image failed: nothing to bisect")
    elif not chosen:
        progress(f"bisect: none of the {len(choices)} failed candidate cells is bisected (why: above)")
    if not chosen:
        return []
    reports: list[BisectReport] = []
    for index, choice in enumerate(chosen, start=1):
        progress(f"bisect {index}/{len(chosen)}: {choice.cell_id} ({choice.why})")
        try:
            data = load_input(run_dir, choice.cell_id, lambda m: progress(f"bisect: warning: {m}"))
            spec = series_range(data, None)
            check_supported(data, spec)
            judge = judges.get(choice.cell_id) if judges is not None else None
            report = run_bisection(data, spec, policy_of(data.config, {}), progress=progress, judge=judge)
        except CanaryError as exc:
            progress(f"bisect: {choice.cell_id} is not bisected: {exc}")
            continue
        except KeyboardInterrupt:
            progress("bisect: interrupted (Ctrl-C): no further cell is bisected")
            break
        reports.append(report)
        if report.outcome == "interrupted":
            progress("bisect: interrupted (Ctrl-C): the steps so far are in bisect.json; no further cell is bisected")
            break
    return reports
