"""Bisecting a cell of a finished run: what to rerun, how one step runs, and the whole bisection.

The run's directory gives everything a step needs: results.json (the cell, its failing checks, and
the other cells' results, such as the aggregated control whose parity reference a P/D cell is
compared with) and config.json (the config as it ran, every --set applied; canary.run.orchestrate
writes it). Each step is that config with one change: the cell's image runs a prefix of its patch
series (`images.<key>.patches`, the local target builds the prefix's overlay once and caches it) or
another image of a range (`target.container.images.<key>`), and only the checks that failed run
(startup always does). Same seeds and gates: nothing else of the config changes. The step runs the
cell with the runner (canary.run.cells.run_cell), which stops whatever it started, also on Ctrl-C.

Files: <run>/bisect/<cell>/series/prefix-NN/ (each prefix as a series of its own), and
<run>/bisect/<cell>/step-NN-pKK/cells/<cell>/ (each step's logs and evidence); the report goes to
<run>/bisect.json, bisect.md and bisect.prom (canary.bisect.model) after every step; when the
bisection ends (also on Ctrl-C) the run's summary.md and summary.html are rendered again (they show
bisect.json) and the bisected cells go into the run history (`publish`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary.bisect.model import (
    BisectReport,
    Culprit,
    RangeKind,
    apply_result,
    load_file,
    patch_subject,
    step_record,
    write_report,
)
from canary.bisect.search import Judgement, Policy, SearchResult, Step, bisect
from canary.checks.base import check_order
from canary.config import CanaryConfig
from canary.config.load import load_config, validate_config
from canary.errors import UsageError
from canary.export.history.record import record_bisections
from canary.export.report.html import write_html
from canary.export.report.markdown import write_markdown
from canary.export.report.trends import load_trends
from canary.images.patchseries import Series, SeriesError, read_series
from canary.images.table import find_series
from canary.judge.results import CellResult, RunResult, utc_now
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.run.cells import Progress, default_progress, preflight, run_cell
from canary.run.orchestrate import RUN_CONFIG_NAME
from canary.targets import create_target

RESULTS_JSON = "results.json"
SUPPORTED_TARGETS = {"series": ("local", "container"), "images": ("container",)}


@dataclass(frozen=True)
class BisectInput:
    """A failing cell of a finished run, and how that run was configured."""

    run_dir: Path
    run: RunResult
    config: CanaryConfig
    config_source: str
    cell: CellResult
    failed_checks: list[str]


def find_run_dir(path: Path) -> Path:
    """The run directory: PATH itself, or PATH/latest for a results root."""
    if (path / RESULTS_JSON).is_file():
        return path
    if (path / "latest" / RESULTS_JSON).is_file():
        return (path / "latest").resolve()
    if not path.exists():
        raise UsageError(f"no such results directory: {path}")
    raise UsageError(f"{path} holds no {RESULTS_JSON} (give a run's directory, e.g. results/latest)")


def load_input(results_dir: Path, cell_id: str, warn: Callable[[str], None]) -> BisectInput:
    """Read the run and its config; the cell must be in the run and have failed."""
    run_dir = find_run_dir(results_dir)
    try:
        run = RunResult.model_validate_json((run_dir / RESULTS_JSON).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{run_dir / RESULTS_JSON} is not a canary results file: {str(exc).splitlines()[0]}") from None
    ids = [c.cell.id for c in run.cells]
    matches = [c for c in run.cells if c.cell.id == cell_id] or [c for c in run.cells if c.cell.id.startswith(cell_id)]
    if not matches:
        raise UsageError(f"cell {cell_id!r} is not in run {run.run_id}; its cells: {', '.join(ids) or 'none'}")
    if len(matches) > 1:
        raise UsageError(f"cell {cell_id!r} matches {len(matches)} cells of run {run.run_id}: {', '.join(ids)}")
    cell = matches[0]
    if cell.verdict != "fail":
        raise UsageError(
            f"cell {cell.cell.id} did not fail in run {run.run_id} (verdict {cell.verdict}): nothing to bisect"
        )
    config_path = run_dir / RUN_CONFIG_NAME
    if config_path.is_file():
        source = str(config_path)
        config = validate_config(json.loads(config_path.read_text(encoding="utf-8")), source)
    elif run.config_path and Path(run.config_path).is_file():
        source = run.config_path
        warn(f"{config_path} missing (a run of an older canary): re-reading {source} without the run's --set overrides")
        config = load_config(source)
    else:
        raise UsageError(f"{run_dir} has no {RUN_CONFIG_NAME} and its config {run.config_path!r} is not there")
    failed = [c.name for c in cell.checks if c.verdict == "fail"]
    return BisectInput(run_dir, run, config, source, cell, failed)


# --------------------------------------------------------------------------- steps


def step_config(
    base: CanaryConfig,
    image_key: str,
    rerun_checks: list[str],
    source: str,
    *,
    patches: Path | None = None,
    image_ref: str | None = None,
) -> CanaryConfig:
    """The run's config with the image's series replaced by `patches` (None: no patch) or, for an image
    range, the image's container image replaced by `image_ref`; only `rerun_checks` enabled (and startup)."""
    data: dict[str, Any] = base.model_dump(mode="json")
    image = data["images"][image_key]
    image["patches"] = None if patches is None else str(patches)
    if image.get("base") is not None:
        image.pop("ref", None)  # derived from base + patches again
    if image_ref is not None:
        data["target"]["container"]["images"][image_key] = image_ref
    data["target"]["same_engine_ok"] = True  # point 0 (no patch, or the good end's image) is another key's engine
    for name in check_order():
        if name != "startup" and name in data["checks"]:
            data["checks"][name]["enabled"] = name in rerun_checks
    return validate_config(data, f"{source} (bisect step)")


def prefix_series(series: Series, k: int, where: Path) -> Path | None:
    """A series file of the first k patches (copied beside it: a series lists every patch of its
    directory); None for k = 0 (the image without its series)."""
    if k == 0:
        return None
    folder = where / f"prefix-{k:02d}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for patch in series.patches[:k]:
        shutil.copy2(patch, folder / patch.name)
    names = "\n".join(p.name for p in series.patches[:k])
    (folder / "series").write_text(f"# The first {k} patches of {series.path} (canary bisect)\n{names}\n")
    return (folder / "series").absolute()


def judgement_of(result: CellResult, step_dir: Path, run_dir: Path) -> Judgement:
    """good (pass), bad (fail), unknown (anything else: invalid, error, ...) with its evidence."""
    observation = {"pass": "good", "fail": "bad"}.get(result.verdict, "unknown")
    gates = {c.name: [g.name for g in c.gates if not g.passed] for c in result.checks if c.verdict == "fail"}
    try:
        files = str(step_dir.relative_to(run_dir))
    except ValueError:
        files = str(step_dir)
    evidence: dict[str, Any] = {
        "verdict": result.verdict,
        "checks": {c.name: c.verdict for c in result.checks},
        "summaries": {c.name: c.summary for c in result.checks},
        "failed_gates": gates,
        "files": files,
        "cell_duration_s": result.duration_s,
    }
    return Judgement(observation, f"{result.verdict}: {result.reason}"[:500], evidence)  # type: ignore[arg-type]


def run_step(
    config: CanaryConfig, cell_id: str, step_dir: Path, earlier: dict[str, CellResult], progress: Progress, source: str
) -> CellResult:
    """Run one cell of `config` (the step's) into step_dir, compared with the run's other cells."""
    cell = next((c for c in plan(config).cells if c.id == cell_id), None)
    if cell is None:
        raise UsageError(f"cell {cell_id} is not in the plan of the step's config (did the matrix change?)")
    target = create_target(config, source=source)
    preflight(target, [cell], dry_run=False)
    step_dir.mkdir(parents=True, exist_ok=True)
    return run_cell(cell, config, target, step_dir, dict(earlier), progress)


# --------------------------------------------------------------------------- the bisection


@dataclass(frozen=True)
class RangeSpec:
    """What is bisected: the prefixes of a series, or a list of images (good .. bad)."""

    kind: RangeKind
    names: list[str]
    series: Series | None = None
    image_refs: tuple[str, ...] = ()


def series_range(data: BisectInput, series_file: str | None) -> RangeSpec:
    """The series to bisect: --series, else the cell image's `patches`."""
    key = data.cell.cell.image
    text = series_file or data.config.images[key].patches
    if text is None:
        raise UsageError(
            f"image {key!r} of cell {data.cell.cell.id} has no patch series (images.{key}.patches): "
            "give --series FILE, or --images GOOD ... BAD"
        )
    path = find_series(text)
    if path is None:
        raise UsageError(f"patch series {text!r} not found")
    try:
        series = read_series(path)
    except SeriesError as exc:
        raise UsageError(str(exc)) from None
    return RangeSpec("series", series.names, series=series)


def images_range(refs: list[str]) -> RangeSpec:
    """An image range: at least a good and a bad image."""
    if len(refs) < 2:
        raise UsageError("--images needs at least two image references: the known good one first, the bad one last")
    if len(set(refs)) != len(refs):
        raise UsageError(f"--images lists an image twice: {refs}")
    return RangeSpec("images", list(refs), image_refs=tuple(refs))


def check_supported(data: BisectInput, spec: RangeSpec) -> None:
    """Targets and cells the bisection can run (else one line, exit 2)."""
    kind = data.config.target.kind
    if kind not in SUPPORTED_TARGETS[spec.kind]:
        what = "a patch series" if spec.kind == "series" else "an image range"
        raise UsageError(
            f"bisecting {what} on the {kind} target is not supported yet "
            f"(supported: {', '.join(SUPPORTED_TARGETS[spec.kind])} target)"
        )
    if data.cell.cell.mixed:
        raise UsageError(f"cell {data.cell.cell.id} runs two images (a mixed pair): bisecting it is not supported yet")


def policy_of(config: CanaryConfig, overrides: dict[str, Any]) -> Policy:
    """The search policy: config `bisect:` with the CLI's flags on top; the run's own failure counts once."""
    settings = config.bisect.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    return Policy(
        retries=settings.retries,
        confirm=settings.confirm,
        max_runs=settings.max_runs,
        max_seconds=None if settings.max_minutes is None else settings.max_minutes * 60,
        prior_bad=1,
    )


def run_bisection(
    data: BisectInput,
    spec: RangeSpec,
    policy: Policy,
    *,
    progress: Progress = default_progress,
    judge: Callable[[int], Judgement] | None = None,
) -> BisectReport:
    """Bisect the cell over the range; the report is written after every step (and at the end, also
    on Ctrl-C). `judge` replaces the cell runs (tests)."""
    cell: Cell = data.cell.cell
    key = cell.image
    rerun = data.failed_checks
    work = data.run_dir / "bisect" / cell.id
    earlier = {c.cell.id: c for c in data.run.cells if c.cell.id != cell.id}
    report = BisectReport(
        cell=cell.id,
        image=key,
        range_kind=spec.kind,
        range=spec.names,
        series=str(spec.series.path) if spec.series is not None else "",
        rerun_checks=rerun,
        policy={
            "retries": policy.retries,
            "confirm": policy.confirm,
            "max_runs": policy.max_runs,
            "max_minutes": None if policy.max_seconds is None else round(policy.max_seconds / 60, 1),
        },
        outcome="running",
        reason="",
        last_good=0,
        first_bad=len(spec.names) if spec.kind == "series" else len(spec.names) - 1,
        started_at=utc_now(),
    )
    n = report.first_bad
    counter = [0]

    def cell_run(point: int) -> Judgement:
        counter[0] += 1
        step_dir = work / f"step-{counter[0]:02d}-p{point:02d}"
        if step_dir.exists():
            shutil.rmtree(step_dir)
        progress(f"bisect step {counter[0]}: {cell.id} on {report.label(point)}")
        if spec.kind == "series":
            assert spec.series is not None
            patches = prefix_series(spec.series, point, work / "series")
            config = step_config(data.config, key, rerun, data.config_source, patches=patches)
        else:
            config = step_config(data.config, key, rerun, data.config_source, image_ref=spec.image_refs[point])
        result = run_step(config, cell.id, step_dir, earlier, progress, data.config_source)
        judgement = judgement_of(result, step_dir, data.run_dir)
        progress(
            f"bisect step {counter[0]}: {report.label(point)} => {judgement.observation} ({judgement.detail[:200]})"
        )
        return judgement

    def on_step(step: Step) -> None:
        report.steps.append(step_record(spec.kind, spec.names, step))
        report.cell_runs = len(report.steps)
        write_report(data.run_dir, data.run.run_id, report)

    write_report(data.run_dir, data.run.run_id, report)
    result: SearchResult = bisect(n, judge or cell_run, policy, on_step=on_step, name=report.label)
    culprit = None
    if result.outcome == "found" and result.first_bad is not None:
        culprit = culprit_of(spec, result.first_bad)
    apply_result(report, result, culprit, utc_now())
    write_report(data.run_dir, data.run.run_id, report)
    publish(data, progress)
    return report


def publish(data: BisectInput, progress: Progress) -> None:
    """The run's views of bisect.json after a bisection: summary.md and summary.html rendered again
    (compared with the history as `canary run` rendered them; summary.html only where the run writes
    one: export.html) and the bisected cells in the run history (export.history; a status line,
    never an error)."""
    config = data.config
    trends = load_trends(data.run, config.export.history, data.run_dir.parent)
    written = [write_markdown(data.run, data.run_dir, trends)]
    if config.export.html:
        written.append(write_html(data.run, data.run_dir, trends))
    progress(f"bisect: reports {', '.join(str(p) for p in written)}")
    for line in record_bisections(load_file(data.run_dir, data.run.run_id), config.export.history, data.run_dir.parent):
        progress(line)


def culprit_of(spec: RangeSpec, point: int) -> Culprit:
    """The patch (or image) at a first bad point."""
    if spec.kind == "images":
        return Culprit(position=point, name=spec.image_refs[point])
    assert spec.series is not None
    patch = spec.series.patches[point - 1]
    return Culprit(position=point, name=patch.name, subject=patch_subject(patch), path=str(patch))
