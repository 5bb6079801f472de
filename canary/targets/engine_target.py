"""A target that starts a cell's engines on this machine, composed of three parts.

- the planner (canary.targets.engine_plan): each server's command, environment, ports, GPUs, model cache
  and shared memory, one plan whatever runs it;
- the supervisor (canary.targets.supervisor): starts the servers as process groups, waits until they are
  ready, watches them, freezes and stops them;
- a runner of processes, the only part in which targets differ: the local target's runs each plan's own
  command from an engine venv (canary.targets.local.target), the container target's runs it from an image
  through docker or podman (canary.targets.container.target).

If anything fails to come up, deploy tears everything down and still yields a Deployment (started=False,
failure=...) so the startup check can classify the failure from the logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from canary.config import CanaryConfig
from canary.core.ports import free_ports
from canary.errors import ConfigError
from canary.plan.cell import Cell
from canary.targets.base import Deployment
from canary.targets.engine_plan import CellPlan, EngineBuild, EnginePlanner, placeholder_ports, port_names
from canary.targets.restart import bind_engine_core, restarter
from canary.targets.supervisor import Launch, Started, Supervisor

StopProcesses = Callable[[], None]
"""Stops the supervised processes of one deployment."""


def run_keys(config: CanaryConfig, cells: Iterable[Cell]) -> list[str]:
    """The image keys a run uses: the matrix's and every planned cell's (a hand-added cell's, a mixed pair's)."""
    return list(dict.fromkeys([*config.image_keys(), *(key for cell in cells for key in cell.image_keys())]))


def same_engines(keys: list[str], identity: Callable[[str], object]) -> tuple[str, str] | None:
    """The first two image keys whose engines are the same by `identity` (None: all differ)."""
    seen: dict[object, str] = {}
    for key in keys:
        found = seen.setdefault(identity(key), key)
        if found != key:
            return found, key
    return None


def check_same_engines(
    config: CanaryConfig, keys: list[str], source: str, identity: Callable[[str], object], what: Callable[[str], str]
) -> None:
    """ConfigError when two of the image keys resolve to one engine (by the runner's `identity`, described by
    `what`) and the config does not say that is meant (target.same_engine_ok)."""
    if config.target.same_engine_ok:
        return
    pair = same_engines(keys, identity)
    if pair is not None:
        first, second = pair
        raise ConfigError(
            source,
            f"images.{second}",
            f"images {first!r} and {second!r} run the same engine ({what(second)}): the report would compare a "
            "build with itself under two names. Give one its own build, or set target.same_engine_ok: true if "
            "that is meant (e.g. to measure the noise between two copies of one build)",
        )


class ProcessRunner(Protocol):
    """What runs the planned servers: the part in which the local and the container targets differ."""

    kind: str
    where: str
    """How the servers' ports are reached, for a dry run ("on 127.0.0.1", "(host network)")."""

    def preflight(self, cells: list[Cell], *, dry_run: bool) -> list[str]:
        """Raise when a planned cell cannot run here (ConfigError: the config's fault); a dry run's warnings."""
        ...

    def builds(self, cell: Cell, *, dry_run: bool, notes: list[str]) -> dict[str, EngineBuild]:
        """The engine build of every image key of the cell (a dry run notes what it cannot find yet)."""
        ...

    def launches(self, cell: Cell, plan: CellPlan, *, log_dir: Path | None) -> list[Launch]:
        """The host commands that run the plan's servers (log_dir None: a dry run, which prepares nothing)."""
        ...

    def describe(self, launch: Launch) -> dict[str, object]:
        """One server of a dry run's output."""
        ...

    def running(
        self, deployment: Deployment, launches: list[Launch], stop: StopProcesses
    ) -> AbstractContextManager[None]:
        """While the launches may run: on exit (and on a signal) everything they started is stopped; `stop`
        stops the supervised processes."""
        ...

    def after_start(self, deployment: Deployment, launches: list[Launch]) -> str | None:
        """Record what the runner knows once the servers started; why helpers cannot be placed (None: they can)."""
        ...

    def stop(self, deployment: Deployment, stop: StopProcesses) -> None:
        """Stop the deployment's servers (idempotent)."""
        ...

    def freeze(self, deployment: Deployment) -> bool:
        """canary.targets.base.Freezes."""
        ...

    def thaw(self, deployment: Deployment) -> None:
        """canary.targets.base.Freezes."""
        ...


class EngineTarget:
    """Plans, runs (through its runner) and supervises a cell's servers on this machine."""

    def __init__(self, config: CanaryConfig, planner: EnginePlanner, runner: ProcessRunner) -> None:
        self.config = config
        self.planner = planner
        self.runner = runner
        self.supervisor = Supervisor(config)
        self.kind = runner.kind

    def preflight(self, cells: Iterable[Cell], *, dry_run: bool = False) -> list[str]:
        """canary.targets.base.Preflight: what the planner checks (GPUs, weights, a built model, cores), then
        the runner (what runs is what the config names; the CLI and images of a container run)."""
        planned = list(cells)
        warnings = self.planner.preflight(planned, dry_run=dry_run)
        return warnings + self.runner.preflight(planned, dry_run=dry_run)

    def helper_cpus(self, cell: Cell) -> tuple[int, ...] | None:
        """The cores the cell's helper processes are moved to once ready (None: left as started)."""
        return self.planner.helper_cpus(cell)

    def describe(self, cell: Cell) -> dict[str, object]:
        """What deploy would run for this cell (ports are placeholders: they are picked at run time)."""
        notes: list[str] = []
        builds = self.runner.builds(cell, dry_run=True, notes=notes)
        plan = self.planner.plan(cell, placeholder_ports(cell), builds, layout_root="$CELL_LOG_DIR", dry_run=True)
        launches = self.runner.launches(cell, plan, log_dir=None)
        return {
            "servers": [self.runner.describe(launch) for launch in launches],
            "notes": notes + plan.notes,
            "ports": f"picked at run time {self.runner.where}",
            "ready": "/health 200 and /v1/models lists the model",
            "timeout_s": self.config.checks.startup.timeout_s,
        }

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Start the cell's servers; yield the Deployment; stop every one of them on exit."""
        builds = self.runner.builds(cell, dry_run=False, notes=[])
        names = port_names(cell)
        host = self.config.target.local.host
        ports = dict(zip(names, (str(p) for p in free_ports(len(names), host)), strict=True))
        log_dir.mkdir(parents=True, exist_ok=True)
        plan = self.planner.plan(cell, ports, builds, layout_root=log_dir.absolute(), dry_run=False)
        launches = self.runner.launches(cell, plan, log_dir=log_dir)
        deployment = Deployment(cell=cell, base_url="", served_model=cell.model)
        started: Started = {}

        def stop() -> None:
            self.supervisor.stop(deployment, started)

        with self.runner.running(deployment, launches, stop):
            try:
                self.supervisor.bring_up(deployment, launches, started, log_dir)
                self._after_start(deployment, launches, started, stop)
                if deployment.started and self.kind == "local":  # a container would need its name freed first
                    deployment.restart_role = restarter(deployment, launches, started, nice=self.supervisor.nice)
                yield deployment
            finally:
                self.runner.stop(deployment, stop)

    def _after_start(
        self, deployment: Deployment, launches: list[Launch], started: Started, stop: StopProcesses
    ) -> None:
        blocked = self.runner.after_start(deployment, launches)
        if not deployment.started:
            self.runner.stop(deployment, stop)
            return
        cpus = self.planner.helper_cpus(deployment.cell)
        if cpus is not None and blocked is not None:
            deployment.evidence["helper_cpus"] = {"skipped": blocked}
        elif cpus is not None:
            self.supervisor.place_helpers(deployment, cpus)
        if self.config.platform == "cpu":
            for launch in launches:
                bind_engine_core(deployment, launch)
        self.supervisor.watch(deployment, started)

    def freeze(self, deployment: Deployment) -> bool:
        """canary.targets.base.Freezes: the runner freezes the started deployment's servers."""
        return self.runner.freeze(deployment)

    def thaw(self, deployment: Deployment) -> None:
        """canary.targets.base.Freezes: the runner continues what `freeze` froze."""
        self.runner.thaw(deployment)
