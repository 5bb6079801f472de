"""The selftest's model: the fault catalogue (tests/faults/faults.yaml), its loading and validation,
the config of one fault's run, and what a selftest run produced (selftest.json)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt

from canary.checks.base import check_order
from canary.config import CanaryConfig, CheckName, ImageSpec, Topology
from canary.config.load import apply_override, parse_override, validate_config
from canary.core.yaml_model import FrozenModel, load_yaml_model
from canary.errors import ConfigError
from canary.paths import CONFIGS_DIR, REPO_ROOT

DEFAULT_CONFIG = CONFIGS_DIR / "selftest.yaml"
FAULTS_FILE = REPO_ROOT / "tests" / "faults" / "faults.yaml"
DEFAULT_CLEAN_RUNS = 3


class ShiftExpectation(FrozenModel):
    """A number the fault must move, seen against the clean image in the same run (no gate judges it yet)."""

    metric: str = Field(min_length=1, description="A CheckResult.metrics key of `expect_check`.")
    min: float = Field(gt=0, description="The faulty cell's value must exceed the baseline cell's by at least this.")
    compare: list[str] = Field(
        default_factory=list,
        description="Other keys of the same check whose change is reported beside it (the terms the fault must "
        "leave alone: the detail shows each shift, so a fault that moves them too is plain to see).",
    )


class FaultSpec(FrozenModel):
    """One seeded fault and the check that must catch it."""

    id: str = Field(pattern=r"^[0-9]{2}-[a-z0-9-]+$", description="Directory under tests/faults/.")
    title: str = Field(min_length=1, description="What is wrong, for the table.")
    bug_class: str = Field("", description="The class of real bug it stands for.")
    series: str | None = Field(None, description="Series file relative to faults.yaml (default <id>/series).")
    expect_check: CheckName | Literal["engines"] = Field(
        description="The check that must fail (`engines`: the runner's watch of the cell's servers, which fails "
        "when one dies while the cell is checked)."
    )
    also_expected: list[CheckName] = Field(
        default_factory=list, description="Checks that should fail too (reported, not required)."
    )
    expect_failure_class: str | None = Field(None, description="startup: the signature id it must be classified as.")
    expect_gate: str | None = Field(None, description="A failing gate whose name starts with this must be present.")
    config: str | None = Field(
        None,
        description="The selftest config the fault's run is derived from, relative to configs/ (unset: the "
        "selftest's --config, configs/selftest.yaml). The selftest runs each such config clean as well.",
    )
    models: list[str] | None = Field(
        None, min_length=1, description="Models (names in the config) the fault's run deploys; unset: every model."
    )
    topologies: list[Topology] = Field(min_length=1, description="Cells the fault's run deploys.")
    checks: list[CheckName] | None = Field(None, description="Checks that run (startup always); unset: all.")
    baseline_image: bool = Field(False, description="Also deploy the clean image as the baseline to compare with.")
    expect_shift: ShiftExpectation | None = Field(
        None,
        description="Instead of a failing check: the fault counts as shown when `expect_check`'s metric on the faulty "
        "cell exceeds the same cell's on the clean baseline image by `min` (baseline_image must be true), whether or "
        "not the check also failed. For a fault the canary measures where no gate is its verdict yet.",
    )
    block_size: PositiveInt | None = Field(
        None, description="Run the fault's cells at this logical block size instead of the config's."
    )
    kernel_block_sizes: dict[str, list[PositiveInt]] = Field(
        default_factory=dict,
        description="Kernel block sizes the faulty build advertises (images.<key>.kernel_block_sizes), for faults "
        "that carry a kernel-split build.",
    )
    known_bug: list[CheckName] | None = Field(
        None,
        description="The fault's P/D cells (every cell, without pd-nixl) carry an expectation that these checks "
        "fail (a known bug of the cell, like cpu-default's corrupt p32-d64 pair): the fault must be caught all the "
        "same, and the cell must not end expected-fail (a run that says OK over it has missed the fault).",
    )
    overrides: list[str] = Field(
        default_factory=list,
        description="Config overrides of this fault's run only, as `--set KEY=VALUE` (e.g. a check switch that is off "
        "in the selftest config).",
    )

    def config_path(self, default: Path) -> Path:
        """The selftest config of this fault's run: its own `config`, else `default` (the --config)."""
        return (CONFIGS_DIR / self.config).absolute() if self.config else default

    def series_path(self, faults_file: Path) -> Path:
        """The absolute series file."""
        return (faults_file.parent / (self.series or f"{self.id}/series")).absolute()


class FaultCatalog(FrozenModel):
    """tests/faults/faults.yaml."""

    schema_version: Literal[1] = Field(1, description="Schema version.")
    faults: list[FaultSpec] = Field(min_length=1, description="The seeded faults.")


class FaultOutcome(FrozenModel):
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


class CleanOutcome(FrozenModel):
    """One clean run: any failing verdict is a false alarm."""

    index: int
    config: str = Field("", description="The config's name (a selftest runs each of its configs clean).")
    ok: bool
    alarms: list[str]
    cells: dict[str, str]
    run_duration_s: float
    run_dir: str


class SelftestResult(FrozenModel):
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
    catalog = load_yaml_model(path, FaultCatalog)
    ids = [f.id for f in catalog.faults]
    if len(set(ids)) != len(ids):
        raise ConfigError(str(path), "faults", f"duplicate fault ids in {ids}")
    for index, fault in enumerate(catalog.faults):
        if fault.expect_shift is not None and not fault.baseline_image:
            raise ConfigError(str(path), f"faults.{index}.expect_shift", "needs baseline_image: true (the clean cell)")
    for index, fault in enumerate(catalog.faults):
        if not fault.series_path(path).is_file():
            raise ConfigError(str(path), f"faults.{index}.series", f"{fault.series_path(path)} does not exist")
        if fault.config is not None and not fault.config_path(DEFAULT_CONFIG).is_file():
            raise ConfigError(
                str(path), f"faults.{index}.config", f"{fault.config_path(DEFAULT_CONFIG)} does not exist"
            )
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
    if fault.models is not None:
        unknown = sorted(set(fault.models) - {m["name"] for m in data["models"]})
        if unknown:
            raise ConfigError(str(faults_file), f"{fault.id}.models", f"no such model in {base.name}: {unknown}")
        data["models"] = [m for m in data["models"] if m["name"] in fault.models]
        for key in ("include", "exclude"):
            data["matrix"][key] = [c for c in data["matrix"][key] if c.get("model") in (None, *fault.models)]
    if fault.checks is not None:
        for name in check_order():
            if name != "startup":
                data["checks"][name]["enabled"] = name in fault.checks
    if fault.known_bug is not None:
        data["matrix"]["expectations"] = [
            {
                "match": {"image": fault_key, "topology": "pd-nixl" if "pd-nixl" in fault.topologies else None},
                "expect": "check-fail",
                "reason": f"selftest: the cell stands for a known bug failing {', '.join(fault.known_bug)}",
                "failing_checks": list(fault.known_bug),
            }
        ]
    for text in fault.overrides:
        parts, value = parse_override(text)
        apply_override(data, parts, value)
    return validate_config(data, f"{faults_file} ({fault.id})")
