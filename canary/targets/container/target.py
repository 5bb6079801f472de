"""The container target: every engine and router of a cell runs from its image (docker or podman).

It is an EngineTarget (canary.targets.engine_target): the planner's commands and environment, the
supervisor's start, readiness, watch and stop, and this module's runner, which turns each planned server
into an attached `run` of the CLI: host network on loopback, the model directory mounted read-only, the
engine-side layout probe (canary/targets/engine_site) mounted and put on PYTHONPATH, each engine's layout
directory mounted writable. What the planner gives an engine of the machine becomes runtime flags: its
GPUs as `--gpus '"device=0,1"'` (docker) or CDI `--device nvidia.com/gpu=N` (podman), one per GPU of its
tensor-parallel group (canary.targets.devices); the Hugging Face cache of a hub model mounted and named
by HF_HOME; shared memory as `--ipc=host` or a sized `--shm-size` (`target.container.shm`).

The CLI runs attached, so the container's log is captured from its first line, and each container is
removed at the cell's end, on Ctrl-C, on SIGTERM/SIGHUP (processes' cleanup hooks) and, for a controller
that was SIGKILLed, by the next run's sweep of containers whose owner is gone (labels, as the local target
uses process groups). Which image a key runs: canary.targets.container_images.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from canary.config import CanaryConfig
from canary.errors import CanaryError, warn_stderr
from canary.paths import CACHE_DIR
from canary.plan.cell import Cell
from canary.targets import cgroup_weight, processes, target_kind
from canary.targets.base import Deployment
from canary.targets.cgroup_weight import WeightedParent
from canary.targets.container_cli import (
    CELL_LABEL,
    MANAGED_LABEL,
    OWNER_LABEL,
    ROLE_LABEL,
    ContainerCli,
    ContainerError,
    Flavour,
    find_cli,
    owner_id,
)
from canary.targets.container_images import ContainerImages
from canary.targets.devices import container_device_args
from canary.targets.engine_env import ENGINE_SITE_DIR, LAYOUT_DIR_ENV
from canary.targets.engine_plan import CellPlan, EngineBuild, EnginePlanner, EngineResources, ServerPlan
from canary.targets.engine_target import EngineTarget, check_same_engines, run_keys
from canary.targets.supervisor import Launch

CONTAINER_PYTHON = Path("/canary-engine-python")
"""Stands for the engine's python in the plan; replaced by target.container.engine_command."""
MODEL_MOUNT = "/models"
SITE_MOUNT = "/opt/vllm-canary/engine_site"
LAYOUT_MOUNT = "/opt/vllm-canary/layout"
CACHE_MOUNT = "/tmp/vllm-canary-cache"
"""The engine's HOME and caches inside its container (a host folder per image when compile_cache is on)."""
HOME_CACHE_DIR = "container-home"
"""Under the canary's cache folder: one compile cache per image id (target.container.compile_cache)."""
HF_MOUNT = "/opt/vllm-canary/hf-home"
HOST_ONLY_ENV = ("PATH", "HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
"""Engine env entries that name host facts: the image's own values (or container paths) replace them. An
engine's GPUs are the only ones its container is given (--gpus / CDI devices), so it sees them as 0..n-1."""


def resource_args(flavour: Flavour, resources: EngineResources) -> list[str]:
    """The `run` flags that give an engine what the planner gave it: its GPUs, the model cache, shared memory."""
    args = container_device_args(flavour, resources.devices)
    if resources.hf_home is not None:
        args += ["-v", f"{resources.hf_home}:{HF_MOUNT}"]
    args.append("--ipc=host" if resources.shm == "host" else f"--shm-size={resources.shm}")
    return args


def env_args(env: Mapping[str, str], secret: set[str]) -> list[str]:
    """`-e KEY=VALUE` per variable; `-e KEY` alone for a secret, whose value the CLI takes from its environment."""
    return [arg for key, value in sorted(env.items()) for arg in ("-e", key if key in secret else f"{key}={value}")]


def container_env(env: Mapping[str, str]) -> dict[str, str]:
    """An engine's env inside its container: host paths replaced by container paths."""
    out = {k: v for k, v in env.items() if k not in HOST_ONLY_ENV}
    out["HOME"] = CACHE_MOUNT
    out["XDG_CACHE_HOME"] = f"{CACHE_MOUNT}/xdg"
    out["TORCHINDUCTOR_CACHE_DIR"] = f"{CACHE_MOUNT}/inductor"
    if "VLLM_CACHE_ROOT" in env:
        out["VLLM_CACHE_ROOT"] = f"{CACHE_MOUNT}/vllm"
    if LAYOUT_DIR_ENV in env:
        out[LAYOUT_DIR_ENV] = LAYOUT_MOUNT
    if "PYTHONPATH" in env:
        out["PYTHONPATH"] = SITE_MOUNT
    if "HF_HOME" in env:
        out["HF_HOME"] = HF_MOUNT
    return out


class ContainerRunner:
    """Runs each planned server as an attached container of its image."""

    kind = "container"

    def __init__(self, config: CanaryConfig, *, cache_dir: Path, source: str, cli: ContainerCli | None) -> None:
        self.config = config
        self.container = config.target.container
        self.cache_dir = cache_dir
        self.source = source
        self._cli = cli
        self.images = ContainerImages(config, lambda: self.cli, cache_dir)
        self.where = "on " + config.target.local.host + " (host network)"
        self._live: dict[str, str] = {}  # container name -> role, while it may run
        self._paused: set[str] = set()  # containers `freeze` paused and nothing has continued yet
        self._parent: WeightedParent | str | None = None  # cgroup_parent(), once asked

    @property
    def cli(self) -> ContainerCli:
        """The CLI (found on first use, so a dry run renders without one)."""
        if self._cli is None:
            self._cli = find_cli(self.container.cli)
        return self._cli

    # ------------------------------------------------------------------ before a run

    def preflight(self, cells: list[Cell], *, dry_run: bool) -> list[str]:
        """No two keys one image (unless meant); for a run: the CLI answers, every image of the planned cells
        is here (pulled or built), and leftovers of dead controllers are gone. A dry run needs no CLI."""
        check_same_engines(self.config, run_keys(self.config, cells), self.source, self.images.identity, self._what)
        if dry_run:
            return []
        self.cli.check("version", what="version")
        self.sweep()
        for cell in cells:
            for key in cell.image_keys():
                self.images.resolve(key)
            if cell.topology == "pd-nixl":
                self.images.ensure(self.images.router(), "the P/D router")
        return []

    def _what(self, key: str) -> str:
        image, series = self.images.identity(key)
        return f"image {image}" + (f" with patches {series}" if series else "")

    def sweep(self) -> list[str]:
        """Remove containers this host's canaries started whose controller is gone; their names."""
        host = owner_id().rsplit(":", 1)[0]
        stale = []
        for record in self.cli.labelled(MANAGED_LABEL):
            owner = record.get(f"label:{OWNER_LABEL}", "")
            owner_host, _, pid = owner.rpartition(":")
            if owner_host == host and pid.isdigit() and not processes.pid_alive(int(pid)):
                stale.append(record["name"])
        self.cli.remove(stale, stop_timeout_s=1)
        return stale

    # ------------------------------------------------------------------ run invocations

    def builds(self, cell: Cell, *, dry_run: bool, notes: list[str]) -> dict[str, EngineBuild]:
        """No venv: the image is the build (its python is CONTAINER_PYTHON in the plan)."""
        if dry_run:
            notes += [
                f"image {key!r}: {self.config.images[key].patches} is applied in a derived image of "
                f"{self.images.ref(key)} (built once, cached)"
                for key in cell.image_keys()
                if self.images.derived(key)
            ]
        return {key: EngineBuild(CONTAINER_PYTHON) for key in cell.image_keys()}

    def launches(self, cell: Cell, plan: CellPlan, *, log_dir: Path | None) -> list[Launch]:
        """The plan's servers as `run` invocations; a run resolves the images and prepares the host folders."""
        if log_dir is None:
            images = {key: self.images.ref(key) for key in cell.image_keys()}
        else:
            images = {key: self.images.resolve(key, log_dir) for key in cell.image_keys()}
            self._prepare(plan, images)
        return [self._launch(cell, server, plan.model_path, images) for server in plan.servers]

    def _prepare(self, plan: CellPlan, images: Mapping[str, str]) -> None:
        for server in plan.servers:  # the engine (maybe another uid) writes its layout records here
            if LAYOUT_DIR_ENV in server.env:
                layout = Path(server.env[LAYOUT_DIR_ENV])
                layout.mkdir(parents=True, exist_ok=True)
                layout.chmod(0o777)
        if self.container.compile_cache:  # and its HOME with the compile caches (kept across cells and runs)
            for key, ref in images.items():
                home = self.home_cache(key, ref)
                home.mkdir(parents=True, exist_ok=True)
                home.chmod(0o777)
        self.cgroup_parent()

    def _container_name(self, cell: Cell, role: str) -> str:
        stamp = hashlib.sha256(f"{owner_id()}{time.time_ns()}{cell.id}".encode()).hexdigest()[:8]
        return f"canary-{cell.k8s_name[:40]}-{role}-{stamp}"

    def _launch(self, cell: Cell, plan: ServerPlan, model_path: str, images: Mapping[str, str]) -> Launch:
        name = self._container_name(cell, plan.role)
        env, secret = container_env(plan.env), set(self.config.target.local.env_from)
        if plan.resources is not None:
            image = images[cell.image_for(plan.role)]
            command, options = self._engine(cell, plan, plan.resources, model_path, image)
        else:
            image = self.images.router()
            command, options = [*self.container.router_command, *plan.argv[plan.program_len :]], []
        argv = [
            *self.cli_argv_prefix(),
            *("run", "--rm", "--name", name, "--network", "host", "--init"),
            *("--stop-timeout", str(self.container.stop_timeout_s)),
            *("--label", f"{MANAGED_LABEL}=true", "--label", f"{OWNER_LABEL}={owner_id()}"),
            *("--label", f"{CELL_LABEL}={cell.k8s_name}", "--label", f"{ROLE_LABEL}={plan.role}"),
            *self._cgroup_args(),
            *options,
            *env_args(env, secret),
            *self.container.run_args,
            *("--entrypoint", command[0], image),
            *command[1:],
        ]
        # A secret (target.local.env_from) goes to the container by name only (`-e NAME`): the CLI reads its
        # value from its own environment, so no command line, `ps` or dry run shows it.
        return Launch(plan, argv, self.cli_env() | {k: env[k] for k in secret if k in env}, name)

    def _engine(
        self, cell: Cell, plan: ServerPlan, resources: EngineResources, model_path: str, image: str
    ) -> tuple[list[str], list[str]]:
        """An engine's command inside its image and its `run` options (resources, mounts)."""
        model_host = Path(model_path)
        model_in = f"{MODEL_MOUNT}/{model_host.name}" if model_host.is_absolute() else model_path
        command = [*self.container.engine_command, *plan.argv[plan.program_len :]]
        command = [model_in if a == model_path else a for a in command]
        if self.config.target.local.nice:
            command = ["nice", "-n", str(self.config.target.local.nice), *command]
        options = resource_args(self.cli_flavour(), resources)
        if self.container.compile_cache:
            options += ["-v", f"{self.home_cache(cell.image_for(plan.role), image)}:{CACHE_MOUNT}"]
        if model_host.is_absolute():
            options += ["-v", f"{model_host}:{model_in}:ro"]
        if LAYOUT_DIR_ENV in plan.env:
            options += ["-v", f"{plan.env[LAYOUT_DIR_ENV]}:{LAYOUT_MOUNT}"]
        if "PYTHONPATH" in plan.env:
            options += ["-v", f"{ENGINE_SITE_DIR}:{SITE_MOUNT}:ro"]
        return command, options

    @staticmethod
    def describe(launch: Launch) -> dict[str, object]:
        """A server of the dry run: its container and the CLI's command line."""
        return {
            "role": launch.plan.role,
            "container": launch.name,
            "command": " ".join(launch.argv),
            "argv": launch.argv,
        }

    def cgroup_parent(self) -> WeightedParent | str:
        """The weighted parent cgroup the containers run under (canary.targets.cgroup_weight), prepared on
        first use; or why there is none (then they run where the CLI puts them)."""
        if self._parent is None:
            self._parent = cgroup_weight.prepare(self.config.target.local.nice, self.cli.cgroup_manager())
        return self._parent

    def _cgroup_args(self) -> list[str]:
        parent = self._parent
        return ["--cgroup-parent", parent.cli_value] if isinstance(parent, WeightedParent) else []

    def home_cache(self, image_key: str, image: str) -> Path:
        """The host folder an image's engines keep HOME and their compile caches in: keyed by the image's id
        (digest) once resolved, else by its reference (a dry run), so two images never share compiled code."""
        identity = self.images.digests.get(image_key) or image
        return self.cache_dir / HOME_CACHE_DIR / hashlib.sha256(identity.encode()).hexdigest()[:16]

    def cli_argv_prefix(self) -> list[str]:
        """The CLI program (a placeholder where none is installed, for a dry run)."""
        try:
            return [self.cli.program]
        except ContainerError:
            return [self.container.cli or "podman"]

    def cli_flavour(self) -> Flavour:
        """docker or podman (the configured name where none is installed, for a dry run)."""
        try:
            return self.cli.flavour
        except ContainerError:
            return "docker" if "docker" in (self.container.cli or "") else "podman"

    def cli_env(self) -> dict[str, str]:
        """The CLI client's own environment."""
        try:
            return dict(self.cli.env)
        except ContainerError:
            return {}

    # ------------------------------------------------------------------ while it runs

    @contextmanager
    def running(self, deployment: Deployment, launches: list[Launch], stop: Callable[[], None]) -> Iterator[None]:
        """Record the containers, and remove them on a signal or at exit (processes' cleanup hooks)."""
        del stop
        cell = deployment.cell
        names = {launch.plan.role: str(launch.name) for launch in launches}
        deployment.evidence["containers"] = {
            role: {"name": name, "image": self._image_of(cell, role)} for role, name in names.items()
        }
        parent = self._parent
        deployment.evidence["cpu_weight"] = parent.to_json() if isinstance(parent, WeightedParent) else parent
        deployment.evidence["image_digests"] = {
            role: self.images.digests.get(cell.image_for(role), "") for role in names if role != "router"
        }
        self._live.update({name: role for role, name in names.items()})
        processes.add_cleanup(self._remove_live)
        try:
            yield
        finally:
            processes.remove_cleanup(self._remove_live)

    def _image_of(self, cell: Cell, role: str) -> str:
        return self.images.router() if role == "router" else self.images.resolved.get(cell.image_for(role), "")

    def after_start(self, deployment: Deployment, launches: list[Launch]) -> str | None:
        """Each server's pid becomes its container's first process, whose process tree holds the engine, so the
        throughput check's host-load accounting counts the engine as the cell's own. Helpers are placed only
        under the weighted parent (else the router's cores would outrank the load client's)."""
        for launch in launches:
            server = deployment.servers.get(launch.plan.role)
            if server is not None and launch.name and (pid := self.cli.main_pid(launch.name)) is not None:
                server.pid = pid
        parent = self._parent
        return None if isinstance(parent, WeightedParent) else f"no weighted cgroup parent: {parent}"

    def freeze(self, deployment: Deployment) -> bool:
        """canary.targets.base.Freezes: `pause` the started deployment's containers (the cgroup freezer:
        every process in them stops, keeps its memory and ports, takes no CPU). False, with a warning,
        when the CLI cannot pause them (a rootless podman on cgroup v1 has no freezer): whatever did
        pause is continued, and the runner stops the deployment and deploys it again when it is wanted."""
        names = self._names_of(deployment)
        if not deployment.started or not names:
            return False
        self._paused.update(names)  # a pause that fails half-way is continued below
        try:
            self.cli.check("pause", *names, what=f"pause {' '.join(names)}")
            return True
        except ContainerError as error:
            warn_stderr(f"{error}; it is not kept frozen")
        self._unpause(names)
        return False

    def thaw(self, deployment: Deployment) -> None:
        """canary.targets.base.Freezes: `unpause` what `freeze` paused. One that does not come back is
        only warned of here: the runner then finds it not answering and deploys the cell afresh."""
        self._unpause(self._names_of(deployment))

    def _names_of(self, deployment: Deployment) -> list[str]:
        """The deployment's containers that may still run (router first, as they stop)."""
        containers: dict[str, Any] = deployment.evidence.get("containers") or {}  # type: ignore[assignment]
        order = [r for r in containers if r == "router"] + [r for r in containers if r != "router"]
        return [containers[r]["name"] for r in order if containers[r]["name"] in self._live]

    def _unpause(self, names: Iterable[str]) -> None:
        """Continue the named containers that `freeze` paused (before a thaw, a stop or a removal: a
        paused container does not act on the SIGTERM of `stop`, it would only be SIGKILLed by `rm -f`)."""
        paused = [n for n in names if n in self._paused]
        if not paused:
            return
        self._paused.difference_update(paused)
        try:
            self.cli.check("unpause", *paused, what=f"unpause {' '.join(paused)}")
        except ContainerError as error:
            warn_stderr(str(error))

    def _remove_live(self) -> None:
        """Cleanup hook (signals, atexit): remove every container this target may still run."""
        names = list(self._live)
        self._live.clear()
        with contextlib.suppress(CanaryError):
            self._unpause(names)
        with contextlib.suppress(CanaryError):
            self.cli.remove(names, stop_timeout_s=min(5, self.container.stop_timeout_s))

    def stop(self, deployment: Deployment, stop: Callable[[], None]) -> None:
        """Router first, then the engines; then the attached clients (the supervisor's processes); then
        whatever of the cell this controller still owns."""
        names = self._names_of(deployment)
        try:
            self._unpause(names)
            if names:
                self.cli.remove(names, stop_timeout_s=self.container.stop_timeout_s)
        finally:
            for name in names:
                self._live.pop(name, None)
            try:
                stop()
            finally:
                self._remove_owned(deployment.cell)

    def _remove_owned(self, cell: Cell) -> None:
        """Once the attached clients are gone, nothing creates containers any more: remove whatever of this
        cell this controller still owns. A client stopped while podman was still creating its container
        (under vfs, copying the image takes a minute) leaves it `created`, unknown to `stop` by then."""
        owned = self.cli.labelled(f"{OWNER_LABEL}={owner_id()}")
        mine = [r["name"] for r in owned if r.get(f"label:{CELL_LABEL}") == cell.k8s_name]
        self.cli.remove(mine, stop_timeout_s=1)


@target_kind("container")
class ContainerTarget(EngineTarget):
    """Starts and stops the cell's servers as containers."""

    def __init__(
        self,
        config: CanaryConfig,
        *,
        cache_dir: Path = CACHE_DIR,
        source: str = "config",
        cli: ContainerCli | None = None,
        gpus_here: tuple[int, ...] | Literal["probe"] | None = "probe",
    ) -> None:
        """cli: the container CLI (None: found on first use); gpus_here: as the local target's."""
        planner = EnginePlanner(config, cache_dir=cache_dir, source=source, gpus_here=gpus_here)
        self.containers = ContainerRunner(config, cache_dir=cache_dir, source=source, cli=cli)
        super().__init__(config, planner, self.containers)

    def image_ref(self, image_key: str) -> str:
        """The reference a key runs before any derived build (canary.targets.container_images)."""
        return self.containers.images.ref(image_key)

    def resolve_image(self, image_key: str, log_dir: Path | None = None) -> str:
        """The image a key runs, pulled or built as needed."""
        return self.containers.images.resolve(image_key, log_dir)
