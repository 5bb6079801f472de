"""The check interface and registry.

A check is one folder, `canary/checks/<name>/`, whose `check.py` registers it with
`@register(name, order=..., settings=..., metrics=..., estimate=...)`: its name, its place in a cell's
run, its config model (the `checks.<name>` section, defined in the folder's `settings.py`), the
metrics it exports (the folder's `exported.py`) and its time on a cell (for the GPU wave packing).
The config, the Prometheus schema, the wave estimate and the docs' reference read the registry; a
check takes a CheckContext (the cell, its deployment, the config, results of earlier cells of this
run) and returns a CheckResult. The runner calls them in check_order().
tests/unit/checks/test_registry.py holds the declarations against the folders, the config and the
schema, and adds a throwaway check to show that a folder is all a new check needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from canary.config import CanaryConfig
from canary.config.checks import CHECKS_PACKAGE, check_folders
from canary.core.metric_spec import Exported
from canary.judge.results import CellResult, CheckResult
from canary.plan.cell import Cell
from canary.plan.matrix import expand
from canary.plan.waves import EstimateModel
from canary.targets.base import Deployment

DeployFn = Callable[[Cell, Path], AbstractContextManager[Deployment]]
"""A target's deploy (canary.targets.base.Target.deploy): start a cell, yield its Deployment, stop it on exit."""


@dataclass
class CheckContext:
    """Everything a check may read."""

    cell: Cell
    deployment: Deployment
    config: CanaryConfig
    cell_dir: Path
    earlier: dict[str, CellResult] = field(default_factory=dict)
    scratch: dict[str, object] = field(default_factory=dict)
    checked: dict[str, CheckResult] = field(default_factory=dict)
    """This cell's checks that already ran, by name (the runner adds each result as it comes)."""
    deploy: DeployFn | None = None
    """The target's deploy, for a check that needs another cell deployed beside this one (the paired
    throughput verdict deploys the baseline counterpart); None where the runner gives none."""

    def engine_url(self) -> str:
        """A server of the cell that answers /tokenize (an engine: the router may not), else the cell's endpoint."""
        for role in ("aggregated", "prefill", "decode"):
            server = self.deployment.server(role)
            if server is not None:
                return server.base_url
        return self.deployment.base_url

    def control_for(self) -> CellResult | None:
        """The aggregated control of a P/D cell: same model, image, backend, dtype, runner, and the
        prefill block size, then the same prefix caching (else any started aggregated cell of the same image
        and model)."""
        cell = self.cell
        candidates = [
            r
            for r in self.earlier.values()
            if r.cell.topology == "aggregated"
            and r.cell.model == cell.model
            and r.cell.image == cell.image
            and (startup := r.check("startup")) is not None
            and startup.verdict in ("pass", "ungated")  # ungated: serving, live config not verified
        ]

        def score(r: CellResult) -> tuple[int, int, int, int]:
            c = r.cell
            same_config = (
                c.backend == cell.backend and c.kv_cache_dtype == cell.kv_cache_dtype and c.runner == cell.runner
            )
            return (
                int(same_config),
                int(c.prefill_block_size == cell.prefill_block_size),
                int(c.prefill_block_size == cell.decode_block_size),
                int(c.prefix_caching == cell.prefix_caching),
            )

        return max(candidates, key=score) if candidates else None

    def baseline_for(self) -> CellResult | None:
        """The same cell on the baseline image (for regression gates), if it ran earlier."""
        if self.cell.image == self.config.baseline:
            return None
        want = {**self.cell.axis_values(), "image": self.config.baseline}
        return next((r for r in self.earlier.values() if r.cell.axis_values() == want), None)

    def baseline_cell(self) -> Cell | None:
        """The same cell on the baseline image, whether or not it ran in this run (an `--only` run may
        leave it out): from the earlier results, else from the config's full matrix. None for a cell of
        the baseline image, or when the matrix has no planned counterpart."""
        if self.cell.image == self.config.baseline:
            return None
        ran = self.baseline_for()
        if ran is not None:
            return ran.cell
        want = {**self.cell.axis_values(), "image": self.config.baseline}
        return next((c for c in expand(self.config) if c.status == "planned" and c.axis_values() == want), None)


class Check(Protocol):
    """A check module's entry point."""

    def __call__(self, ctx: CheckContext) -> CheckResult: ...


CheckFn = Callable[[CheckContext], CheckResult]
BeforeChecksHook = Callable[[CheckContext], None]


@dataclass
class EstimateInput:
    """What a check's time estimate reads (canary.checks.estimate calls it for each enabled check)."""

    cell: Cell
    config: CanaryConfig
    model: EstimateModel
    planned: Sequence[Cell] | None = None
    """The cells planned with it (a P/D cell's control may be among them); None: whatever it compares
    against is planned."""
    memo: dict[str, object] = field(default_factory=dict)
    """Shared by the estimates of one planning pass (what every cell would compute again)."""


Estimate = Callable[[EstimateInput], float | None]
"""A check's wall time on one started cell in seconds (canary.plan.waves.EstimateModel's constants), or
None when it sends nothing there (e.g. kv_transfer on an aggregated cell, startup: its wait is the wave's)."""


@dataclass(frozen=True)
class CheckSpec:
    """What registering a check declares: the one place a check is defined."""

    name: str
    order: int
    """Place in a cell's run, lowest first (startup is 0: nothing else runs on a cell that did not start)."""
    settings: type[BaseModel]
    """Its config model, the `checks.<name>` section of canary.config.ChecksConfig (its folder's settings.py)."""
    metrics: tuple[Exported, ...]
    """What it exports: each metric (name, help, unit, labels) and the CheckResult.metrics key it reads."""
    estimate: Estimate
    """Its time on a cell, for the GPU wave packing (canary.checks.estimate)."""
    run: CheckFn

    @property
    def metric_keys(self) -> tuple[str, ...]:
        """CheckResult.metrics keys it writes that the exporters read."""
        return tuple(dict.fromkeys(m.key for m in self.metrics))


_REGISTRY: dict[str, CheckSpec] = {}
_BEFORE_CHECKS: dict[str, BeforeChecksHook] = {}


def register(
    name: str, *, order: int, settings: type[BaseModel], metrics: Sequence[Exported], estimate: Estimate
) -> Callable[[CheckFn], CheckFn]:
    """Register a check function with its declaration (see CheckSpec)."""

    def wrap(fn: CheckFn) -> CheckFn:
        _REGISTRY[name] = CheckSpec(name, order, settings, tuple(metrics), estimate, fn)
        return fn

    return wrap


def before_checks(name: str) -> Callable[[BeforeChecksHook], BeforeChecksHook]:
    """Register a hook the runner calls once per started cell, after startup and before the other
    checks (e.g. the KV-transfer check snapshots NIXL counters into ctx.scratch)."""

    def wrap(fn: BeforeChecksHook) -> BeforeChecksHook:
        _BEFORE_CHECKS[name] = fn
        return fn

    return wrap


def discover() -> None:
    """Import every check folder's `check.py` (each registers its check); the folders are canary.config's."""
    for name in check_folders():
        importlib.import_module(f"{CHECKS_PACKAGE}.{name}.check")


def run_before_checks(ctx: CheckContext) -> None:
    """Call every before-checks hook; a failing hook leaves `<name>.hook_error` in ctx.scratch."""
    discover()
    for name, hook in _BEFORE_CHECKS.items():
        try:
            hook(ctx)
        except Exception as exc:  # the check that needs the hook reports it
            ctx.scratch[f"{name}.hook_error"] = f"{type(exc).__name__}: {exc}"


def specs() -> dict[str, CheckSpec]:
    """Every registered check's declaration, in check order (discover() registers them)."""
    discover()
    return {spec.name: spec for spec in sorted(_REGISTRY.values(), key=lambda spec: spec.order)}


def registered() -> dict[str, CheckFn]:
    """Every registered check's function, in check order."""
    return {name: spec.run for name, spec in specs().items()}


def check_order() -> tuple[str, ...]:
    """The checks' names in the order the runner calls them."""
    return tuple(specs())
