"""`python -m canary.selftest`: prove the canary catches what it exists for (seeded faults).

Like mutation testing: real bugs, one per bug class the canary was built for, are planted into
the real engine (patch series under tests/faults/, applied to a copy of the engine's vllm by the
local target: canary.overlay), and each is run through the real pipeline (plan -> deploy -> check
-> judge, `canary.runner.execute`) with configs/selftest.yaml. A clean run (three times by
default) must raise no alarm; every fault must make its expected check fail.

How a fault's run is derived from the selftest config (see tests/faults/faults.yaml):
- the image under test is the config's (single, clean) image with `patches` set to the fault's
  series, keyed `fault-<id>`;
- `topologies` limits the cells; `checks` limits the checks (startup always runs);
- `baseline_image: true` also deploys the clean image, as the config's baseline, so the
  throughput check's regression gates compare the faulty cell with the clean one measured
  minutes earlier on the same machine (see FAULTS_FILE for why).

Time to verdict: from the start of the fault's run to the moment the first expected check
reported its failing verdict (taken from the runner's progress lines; the end of the cell when
they cannot be matched). Results: every run's results.json (and the usual views) under
OUT/<run>/, the summary in OUT/selftest.json, the table on stdout. Exit 0 when every fault was
detected and no clean run raised an alarm, 1 otherwise, 2 on configuration errors.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError
from rich.console import Console
from rich.table import Table

from canary.checks.base import CHECK_ORDER
from canary.config import CanaryConfig, CheckName, ImageSpec, Topology, load_config
from canary.errors import CanaryError, ConfigError
from canary.matrix import plan
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.results import FAILING_VERDICTS, RunResult, utc_now

DEFAULT_CONFIG = CONFIGS_DIR / "selftest.yaml"
FAULTS_FILE = REPO_ROOT / "tests" / "faults" / "faults.yaml"
DEFAULT_CLEAN_RUNS = 3


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultSpec(_Strict):
    """One seeded fault and the check that must catch it."""

    id: str = Field(pattern=r"^[0-9]{2}-[a-z0-9-]+$", description="Directory under tests/faults/.")
    title: str = Field(min_length=1, description="What is wrong, for the table.")
    bug_class: str = Field("", description="The class of real bug it stands for.")
    series: str | None = Field(None, description="Series file relative to faults.yaml (default <id>/series).")
    expect_check: CheckName = Field(description="The check that must fail.")
    also_expected: list[CheckName] = Field(
        default_factory=list, description="Checks that should fail too (reported, not required)."
    )
    expect_failure_class: str | None = Field(None, description="startup: the signature id it must be classified as.")
    expect_gate: str | None = Field(None, description="A failing gate whose name starts with this must be present.")
    topologies: list[Topology] = Field(min_length=1, description="Cells the fault's run deploys.")
    checks: list[CheckName] | None = Field(None, description="Checks that run (startup always); unset: all.")
    baseline_image: bool = Field(False, description="Also deploy the clean image as the baseline to compare with.")
    block_size: PositiveInt | None = Field(
        None, description="Run the fault's cells at this logical block size instead of the config's."
    )
    kernel_block_sizes: dict[str, list[PositiveInt]] = Field(
        default_factory=dict,
        description="Kernel block sizes the faulty build advertises (images.<key>.kernel_block_sizes), for faults "
        "that carry a kernel-split build.",
    )

    def series_path(self, faults_file: Path) -> Path:
        """The absolute series file."""
        return (faults_file.parent / (self.series or f"{self.id}/series")).absolute()


class FaultCatalog(_Strict):
    """tests/faults/faults.yaml."""

    schema_version: Literal[1] = Field(1, description="Schema version.")
    faults: list[FaultSpec] = Field(min_length=1, description="The seeded faults.")


class FaultOutcome(_Strict):
    """What the canary made of one fault."""

    id: str
    title: str
    expected_check: str
    detected: bool
    fired: list[str] = Field(description="Checks that failed on a cell of the faulty image, in run order.")
    errors: list[str] = Field(default_factory=list, description="Checks that errored (not counted as detection).")
    detail: str = Field("", description="Why it counts as detected or missed.")
    time_to_verdict_s: float | None = Field(None, description="Run start -> the expected check's failing verdict.")
    run_duration_s: float
    run_dir: str


class CleanOutcome(_Strict):
    """One clean run: any failing verdict is a false alarm."""

    index: int
    ok: bool
    alarms: list[str]
    cells: dict[str, str]
    run_duration_s: float
    run_dir: str


class SelftestResult(_Strict):
    """selftest.json."""

    started_at: dt.datetime
    duration_s: float
    ok: bool
    config: str
    clean: list[CleanOutcome]
    faults: list[FaultOutcome]


# --------------------------------------------------------------------------- loading


def load_faults(path: Path = FAULTS_FILE) -> FaultCatalog:
    """Read and validate the fault catalogue; every series must exist."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        catalog = FaultCatalog.model_validate(data)
    except FileNotFoundError:
        raise ConfigError(str(path), "", "file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), "", f"YAML syntax error: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(str(path), ".".join(str(p) for p in first["loc"]), str(first["msg"])) from None
    ids = [f.id for f in catalog.faults]
    if len(set(ids)) != len(ids):
        raise ConfigError(str(path), "faults", f"duplicate fault ids in {ids}")
    for index, fault in enumerate(catalog.faults):
        if not fault.series_path(path).is_file():
            raise ConfigError(str(path), f"faults.{index}.series", f"{fault.series_path(path)} does not exist")
    return catalog


def clean_image(config: CanaryConfig) -> tuple[str, ImageSpec]:
    """The selftest config's one image, which must be unpatched."""
    if len(config.images) != 1:
        raise ConfigError(config.name, "images", "the selftest config must define exactly one (clean) image")
    key, image = next(iter(config.images.items()))
    if image.patches:
        raise ConfigError(config.name, f"images.{key}.patches", "the clean image must not carry patches")
    return key, image


def fault_config(base: CanaryConfig, fault: FaultSpec, faults_file: Path = FAULTS_FILE) -> CanaryConfig:
    """The config of one fault's run (see the module docstring)."""
    key, image = clean_image(base)
    fault_key = f"fault-{fault.id}"
    faulty = image.model_copy(
        update={
            "patches": str(fault.series_path(faults_file)),
            "ref": f"{image.ref}+{fault.id}",
            "description": f"{image.description} with seeded fault {fault.id}".strip(),
            "kernel_block_sizes": dict(fault.kernel_block_sizes) or image.kernel_block_sizes,
        }
    )
    data = base.model_dump(mode="json")
    data["name"] = f"{base.name}-{fault.id}"[:63].rstrip("-")
    if fault.baseline_image:
        data["images"] = {key: image.model_dump(mode="json"), fault_key: faulty.model_dump(mode="json")}
        data["baseline_image"] = key
    else:
        data["images"] = {fault_key: faulty.model_dump(mode="json")}
        data["baseline_image"] = None
    data["matrix"]["images"] = None
    data["matrix"]["topologies"] = list(fault.topologies)
    if fault.block_size is not None:
        data["matrix"]["prefill_block_sizes"] = [fault.block_size]
        data["matrix"]["decode_block_sizes"] = None
    data["matrix"]["include"] = [c for c in data["matrix"]["include"] if c["topology"] in fault.topologies]
    if fault.checks is not None:
        for name in CHECK_ORDER:
            if name != "startup":
                data["checks"][name]["enabled"] = name in fault.checks
    return CanaryConfig.model_validate(data)


# --------------------------------------------------------------------------- judging


class ProgressClock:
    """Progress callback that forwards to a printer and remembers when each line was said."""

    def __init__(self, printer: Callable[[str], None]) -> None:
        self.printer = printer
        self.lines: list[tuple[float, str]] = []

    def __call__(self, message: str) -> None:
        self.lines.append((time.monotonic(), message))
        self.printer(message)

    def first(self, prefix: str) -> float | None:
        """Monotonic time of the first line starting with prefix."""
        return next((t for t, line in self.lines if line.startswith(prefix)), None)


def judge_clean(run: RunResult) -> tuple[list[str], dict[str, str]]:
    """False alarms of a clean run: every cell with a failing verdict; a run without a started
    cell is an alarm too (it proves nothing)."""
    alarms = [f"{c.cell.id}: {c.verdict} ({c.reason})" for c in run.cells if c.verdict in FAILING_VERDICTS]
    started = [c for c in run.cells if (s := c.check("startup")) is not None and s.verdict == "pass"]
    if not started:
        alarms.append("no cell started: the clean run proves nothing")
    if run.interrupted:
        alarms.append("interrupted")
    return alarms, {c.cell.id: c.verdict for c in run.cells}


def judge_fault(
    run: RunResult, fault: FaultSpec, fault_image: str, run_started: float, clock: ProgressClock | None = None
) -> tuple[bool, list[str], list[str], str, float | None]:
    """(detected, fired checks, errored checks, detail, time to verdict) of one fault's run."""
    cells = [c for c in run.cells if c.cell.image == fault_image]
    fired: list[str] = []
    errors: list[str] = []
    reasons: list[str] = []
    detected = False
    when: float | None = None
    for cell in cells:
        offset = (cell.started_at - run.started_at).total_seconds()
        for check in cell.checks:
            if check.verdict == "fail" and check.name not in fired:
                fired.append(check.name)
            if check.verdict == "error" and check.name not in errors:
                errors.append(check.name)
            if check.name != fault.expect_check or check.verdict != "fail":
                continue
            ok, why = _matches_expectation(check.evidence, [g.name for g in check.gates if not g.passed], fault)
            reasons.append(f"{cell.cell.id}: {why}")
            if ok and not detected:
                detected = True
                said = clock.first(f"  {cell.cell.id}: {check.name} -> ") if clock else None
                when = said - run_started if said is not None else offset + cell.duration_s
    if not detected and not reasons:
        seen = ", ".join(f"{c.cell.id}: {c.verdict}" for c in cells) or "no cell of the faulty image ran"
        reasons.append(f"{fault.expect_check} did not fail ({seen})")
    return detected, fired, errors, "; ".join(reasons), round(when, 1) if when is not None else None


def _matches_expectation(evidence: dict[str, object], failed_gates: list[str], fault: FaultSpec) -> tuple[bool, str]:
    if fault.expect_failure_class is not None:
        observed = evidence.get("failure_class")
        if observed != fault.expect_failure_class:
            return False, f"failed, but classified {observed or 'unclassified'}, not {fault.expect_failure_class}"
    if fault.expect_gate is not None and not any(g.startswith(fault.expect_gate) for g in failed_gates):
        return False, f"failed, but no failing gate {fault.expect_gate}* (failing: {failed_gates or 'none'})"
    what = [f"class {evidence.get('failure_class')}"] if fault.expect_failure_class else []
    what += [f"gates {', '.join(failed_gates)}"] if failed_gates else []
    return True, "fired" + (f" ({'; '.join(what)})" if what else "")


# --------------------------------------------------------------------------- running


def _execute(config: CanaryConfig, run_dir: Path, clock: ProgressClock, config_path: str) -> RunResult:
    from canary.report import write_all
    from canary.runner import execute

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
    from canary.runner import default_progress

    say = printer or default_progress
    base = load_config(config_path, overrides)
    clean_image(base)
    catalog = load_faults(faults_file)
    faults = [f for f in catalog.faults if only is None or f.id in only or f.id[:2] in only]
    if only is not None and not faults:
        known = ", ".join(f.id for f in catalog.faults)
        raise ConfigError("--fault", ",".join(only), f"no such fault; known: {known}")
    configs = {f.id: fault_config(base, f, faults_file) for f in faults}  # config errors before any engine
    started_at, started = utc_now(), time.monotonic()
    clean: list[CleanOutcome] = []
    outcomes: list[FaultOutcome] = []
    for index in range(1, clean_runs + 1):
        say(f"== selftest: clean run {index}/{clean_runs}")
        clock = ProgressClock(say)
        run_dir = out_dir / f"clean-{index}"
        run = _execute(base, run_dir, clock, str(config_path))
        alarms, cells = judge_clean(run)
        clean.append(
            CleanOutcome(
                index=index,
                ok=not alarms,
                alarms=alarms,
                cells=cells,
                run_duration_s=run.duration_s,
                run_dir=str(run_dir),
            )
        )
        say(f"== selftest: clean run {index}: {'no alarm' if not alarms else 'FALSE ALARM: ' + '; '.join(alarms)}")
        if run.interrupted:
            raise KeyboardInterrupt
    for fault in faults:
        say(f"== selftest: fault {fault.id}: {fault.title} (expect {fault.expect_check})")
        clock = ProgressClock(say)
        run_dir = out_dir / f"fault-{fault.id}"
        run_started = time.monotonic()
        run = _execute(configs[fault.id], run_dir, clock, str(config_path))
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


# --------------------------------------------------------------------------- output


def render_table(result: SelftestResult) -> Table:
    """The detection table (one row per clean run and per fault)."""
    table = Table(title=f"selftest: {'OK' if result.ok else 'FAILED'} in {result.duration_s / 60:.1f} min")
    for column in ("run", "fault", "expected check", "detected", "checks that fired", "time to verdict", "run time"):
        table.add_column(column, overflow="fold")
    for clean in result.clean:
        table.add_row(
            f"clean-{clean.index}",
            "none",
            "(no alarm)",
            "no alarm" if clean.ok else "FALSE ALARM",
            "; ".join(clean.alarms) or "-",
            "-",
            f"{clean.run_duration_s:.0f} s",
        )
    for fault in result.faults:
        table.add_row(
            fault.id,
            fault.title,
            fault.expected_check,
            "yes" if fault.detected else "NO",
            ", ".join(fault.fired) + (f" (errors: {', '.join(fault.errors)})" if fault.errors else "") or "-",
            f"{fault.time_to_verdict_s:.0f} s" if fault.time_to_verdict_s is not None else "-",
            f"{fault.run_duration_s:.0f} s",
        )
    return table


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m canary.selftest`."""
    parser = argparse.ArgumentParser(prog="python -m canary.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="selftest matrix config")
    parser.add_argument("--faults-file", type=Path, default=FAULTS_FILE, help="fault catalogue")
    parser.add_argument("--clean-runs", type=int, default=DEFAULT_CLEAN_RUNS, help="clean runs (0: none)")
    parser.add_argument("--fault", action="append", help="run only this fault (id or its number); repeatable")
    parser.add_argument("--out", type=Path, help="output directory (default results/selftest-<UTC time>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    args = parser.parse_args(argv)
    # Wide when piped (make, CI logs): the table is the point of the output.
    console = Console() if sys.stdout.isatty() else Console(width=180)
    out_dir = args.out or Path("results") / f"selftest-{utc_now().strftime('%Y%m%dT%H%M%SZ')}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        result = run_selftest(
            args.config,
            out_dir,
            clean_runs=max(args.clean_runs, 0),
            only=args.fault,
            faults_file=args.faults_file,
            overrides=args.overrides,
        )
    except CanaryError as exc:
        print(f"selftest: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("selftest: interrupted", file=sys.stderr)
        return 130
    (out_dir / "selftest.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    console.print(render_table(result))
    console.print(f"selftest.json and every run's results: {out_dir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
