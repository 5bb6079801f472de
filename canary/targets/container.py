"""The container target: every engine and router of a cell runs from its image (docker or podman).

The cell's commands and environment are the local target's (canary.targets.local plans them: flags,
ports picked at run time, the engine env built from scratch), translated into `run` invocations:
host network on loopback, the model directory mounted read-only, the engine-side layout probe
(canary/targets/engine_site) mounted and put on PYTHONPATH, each engine's layout directory mounted
writable. The CLI runs attached, so the container's log is captured from its first line, and each
container is removed at the cell's end, on Ctrl-C, on SIGTERM/SIGHUP (processes' cleanup hooks) and,
for a controller that was SIGKILLed, by the next run's sweep of containers whose owner is gone
(labels, as the local target uses process groups).

Which image a key runs: `target.container.images[key]`, else `images.<key>.ref` when it is an image
reference, else `target.container.engine_image` (default: the CPU engine image this project builds)
with `images.<key>.patches` applied inside a derived image that is built once and cached by the
hash of the base image and the series. Every image is found (or pulled, per `pull`) before the
first engine starts; a missing one is an error that names it.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from canary.config import CanaryConfig
from canary.errors import CanaryError, warn_stderr
from canary.images.patchseries import read_series, series_hash
from canary.images.table import cpu_engine_ref, is_image_reference, router_ref
from canary.model.ref import local_model_dir, resolve_model
from canary.paths import CACHE_DIR, REPO_ROOT
from canary.plan.cell import Cell
from canary.targets import cgroup_weight, processes
from canary.targets.base import Deployment
from canary.targets.cgroup_weight import WeightedParent
from canary.targets.container_cli import (
    CELL_LABEL,
    MANAGED_LABEL,
    OWNER_LABEL,
    ROLE_LABEL,
    SOURCE_HASH_LABEL,
    ContainerCli,
    ContainerError,
    Flavour,
    find_cli,
    owner_id,
)
from canary.targets.devices import container_device_args
from canary.targets.engine_env import ENGINE_SITE_DIR, LAYOUT_DIR_ENV
from canary.targets.local import ENGINE_ROLES, EngineBuild, LocalTarget, ServerPlan, _as_absolute

CONTAINER_PYTHON = Path("/canary-engine-python")
"""Stands for the engine's python in the local plan; replaced by target.container.engine_command."""
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

DERIVED_CONTAINERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
COPY series/ /tmp/vllm-canary-series/
COPY apply-series.sh patchseries.py /tmp/vllm-canary-tools/
ARG SERIES_SHA256
# The series applies inside the image's own site-packages (the vllm package's parent), no fuzz.
RUN site="$(python3 -c 'import importlib.util as u, os.path as p; \\
      print(p.dirname(p.dirname(u.find_spec("vllm").origin)))')" \\
 && PATCHSERIES_PY=/tmp/vllm-canary-tools/patchseries.py bash /tmp/vllm-canary-tools/apply-series.sh \\
      --apply --series /tmp/vllm-canary-series/series --tree "$site" --tool patch --expect-hash "$SERIES_SHA256" \\
 && rm -rf /tmp/vllm-canary-series /tmp/vllm-canary-tools
ARG RUN_AS=0
USER ${RUN_AS}
"""


class ContainerTarget(LocalTarget):
    """Starts and stops the cell's servers as containers."""

    kind = "container"

    def __init__(
        self,
        config: CanaryConfig,
        *,
        cache_dir: Path = CACHE_DIR,
        source: str = "config",
        cli: ContainerCli | None = None,
    ) -> None:
        super().__init__(config, cache_dir=cache_dir, source=source)
        self.container = config.target.container
        self._cli = cli
        self._images: dict[str, str] = {}
        self._digests: dict[str, str] = {}
        self._live: dict[str, str] = {}  # container name -> role, while it may run
        self._paused: set[str] = set()  # containers `freeze` paused and nothing has continued yet
        self._parent: WeightedParent | str | None = None  # cgroup_parent(), once asked

    # ------------------------------------------------------------------ images

    @property
    def cli(self) -> ContainerCli:
        """The CLI (found on first use, so a dry run renders without one)."""
        if self._cli is None:
            self._cli = find_cli(self.container.cli)
        return self._cli

    def image_ref(self, image_key: str) -> str:
        """The reference a key runs before any derived build (see the module doc)."""
        if image_key in self.container.images:
            return self.container.images[image_key]
        spec = self.config.images[image_key]
        if spec.ref is not None and is_image_reference(spec.ref):
            return spec.ref
        return self.container.engine_image or cpu_engine_ref()

    @staticmethod
    def _derived_tag(base: str, base_id: str, series: Path) -> tuple[str, str]:
        digest = hashlib.sha256(f"{base_id}\n{series_hash(read_series(series))}".encode()).hexdigest()
        repository = base.split("@")[0].rsplit(":", 1)[0] if ":" in base.rsplit("/", 1)[-1] else base.split("@")[0]
        return f"{repository}-patched:{digest[:12]}", digest

    def _ensure(self, ref: str, what: str) -> None:
        policy = self.container.pull
        present = self.cli.image_inspect(ref) is not None
        if policy == "always" or (policy == "missing" and not present):
            try:
                self.cli.pull(ref)
            except ContainerError as exc:
                if present:
                    return
                local = ref.startswith("localhost/")
                hint = "build it first (`make images-cpu`)" if local else "check the reference and the registry's login"
                raise ContainerError(f"{what}: image {ref} is not here and cannot be pulled ({exc}); {hint}") from None
        elif not present:
            raise ContainerError(f"{what}: image {ref} is not in local storage and target.container.pull is never")

    def resolve_image(self, image_key: str, log_dir: Path | None = None) -> str:
        """The image a key runs, pulled or built as needed; cached for the run."""
        if image_key in self._images:
            return self._images[image_key]
        base = self.image_ref(image_key)
        self._ensure(base, f"image {image_key!r}")
        ref = base
        series_text = self.config.images[image_key].patches
        if series_text is not None and image_key not in self.container.images:  # an explicit image is taken as is
            ref = self._derive(image_key, base, _as_absolute(series_text), log_dir or self.cache_dir / "logs")
        inspect = self.cli.image_inspect(ref) or {}
        digests = [d for d in inspect.get("RepoDigests") or [] if isinstance(d, str)]
        self._digests[image_key] = digests[0].split("@")[-1] if digests else str(inspect.get("Id", ""))
        self._images[image_key] = ref
        return ref

    def _derive(self, image_key: str, base: str, series: Path, log_dir: Path) -> str:
        """`base` with the series applied inside it, built once per (base image id, series hash)."""
        if not series.is_file():
            raise ContainerError(f"images.{image_key}.patches: series {series} not found")
        base_record = self.cli.image_inspect(base) or {}
        tag, digest = self._derived_tag(base, str(base_record.get("Id", base)), series)
        existing = self.cli.image_inspect(tag)
        if existing is not None and (existing.get("Config") or {}).get("Labels", {}).get(SOURCE_HASH_LABEL) == digest:
            return tag
        user = str((base_record.get("Config") or {}).get("User") or "0")
        with tempfile.TemporaryDirectory(prefix="canary-derive-") as scratch:
            context = Path(scratch)
            shutil.copytree(series.parent, context / "series")
            if series.name != "series":
                shutil.copy(series, context / "series" / "series")
            shutil.copy(REPO_ROOT / "docker" / "apply-series.sh", context / "apply-series.sh")
            shutil.copy(REPO_ROOT / "canary" / "images" / "patchseries.py", context / "patchseries.py")
            (context / "Containerfile").write_text(DERIVED_CONTAINERFILE, encoding="utf-8")
            self.cli.build(
                context,
                context / "Containerfile",
                tag,
                build_args={"BASE_IMAGE": base, "SERIES_SHA256": series_hash(read_series(series)), "RUN_AS": user},
                labels={SOURCE_HASH_LABEL: digest, "dev.vllm-canary.base-image": base},
                log_path=log_dir / f"build-{image_key}.log",
            )
        return tag

    def router_image(self) -> str:
        """The P/D router's image."""
        return self.container.router_image or router_ref()

    def preflight(self, cells: Iterable[Cell], *, dry_run: bool = False) -> list[str]:
        """Before anything starts: what the local target checks (devices, weights, a built model), then for
        a run: the CLI answers, every image of the planned cells is here (pulled or built), and leftovers
        of dead controllers are gone. A dry run needs no CLI and pulls nothing."""
        cells = list(cells)
        warnings = super().preflight(cells, dry_run=dry_run)
        if dry_run:
            return warnings
        self.cli.check("version", what="version")
        self.sweep()
        for cell in cells:
            for role in ENGINE_ROLES:
                if cell.topology == "aggregated" and role != "aggregated":
                    continue
                if cell.topology != "aggregated" and role == "aggregated":
                    continue
                self.resolve_image(cell.image_for(role))
            if cell.topology == "pd-nixl":
                self._ensure(self.router_image(), "the P/D router")
        return warnings

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

    # ------------------------------------------------------------------ plans

    def engine_builds(self, cell: Cell) -> dict[str, EngineBuild]:
        """No venv: the image is the build (its python is CONTAINER_PYTHON in the local plan)."""
        return {key: EngineBuild(CONTAINER_PYTHON) for key in cell.image_keys()}

    def _container_name(self, cell: Cell, role: str) -> str:
        stamp = hashlib.sha256(f"{owner_id()}{time.time_ns()}{cell.id}".encode()).hexdigest()[:8]
        return f"canary-{cell.k8s_name[:40]}-{role}-{stamp}"

    def container_plans(
        self, cell: Cell, local_plans: list[ServerPlan], model_path: str, images: Mapping[str, str]
    ) -> list[tuple[ServerPlan, str]]:
        """The local plans as `run` invocations (plan, container name); images: image key -> reference run."""
        model_host = Path(model_path)
        model_in = f"{MODEL_MOUNT}/{model_host.name}" if model_host.is_absolute() else model_path
        out = []
        for plan in local_plans:
            name = self._container_name(cell, plan.role)
            if plan.is_engine:
                image = images[cell.image_for(plan.role)]
                command = [*self.container.engine_command, *plan.argv[1 + len(self.settings.entrypoint) :]]
                command = [model_in if a == model_path else a for a in command]
                if self.settings.nice:
                    command = ["nice", "-n", str(self.settings.nice), *command]
            else:
                image = self.router_image()
                command = [*self.container.router_command, *plan.argv[len(self._router_command()) :]]
            env = self._container_env(plan.env)
            mounts: list[str] = []
            if "CUDA_VISIBLE_DEVICES" in plan.env:
                devices = tuple(int(d) for d in plan.env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip())
                mounts += container_device_args(self.cli_flavour(), devices)
            if "HF_HOME" in plan.env:
                mounts += ["-v", f"{plan.env['HF_HOME']}:{HF_MOUNT}"]
            if plan.is_engine:
                if self.container.compile_cache:
                    mounts += ["-v", f"{self.home_cache(cell.image_for(plan.role), image)}:{CACHE_MOUNT}"]
                if model_host.is_absolute():
                    mounts += ["-v", f"{model_host}:{model_in}:ro"]
                if LAYOUT_DIR_ENV in plan.env:
                    mounts += ["-v", f"{plan.env[LAYOUT_DIR_ENV]}:{LAYOUT_MOUNT}"]
                if "PYTHONPATH" in plan.env:
                    mounts += ["-v", f"{ENGINE_SITE_DIR}:{SITE_MOUNT}:ro"]
            argv = [
                *self.cli_argv_prefix(),
                "run",
                "--rm",
                "--name",
                name,
                "--network",
                "host",
                "--init",
                "--stop-timeout",
                str(self.container.stop_timeout_s),
                "--label",
                f"{MANAGED_LABEL}=true",
                "--label",
                f"{OWNER_LABEL}={owner_id()}",
                "--label",
                f"{CELL_LABEL}={cell.k8s_name}",
                "--label",
                f"{ROLE_LABEL}={plan.role}",
                *self._cgroup_args(),
                *mounts,
                *[arg for key, value in sorted(env.items()) for arg in ("-e", f"{key}={value}")],
                *self.container.run_args,
                "--entrypoint",
                command[0],
                image,
                *command[1:],
            ]
            run = ServerPlan(plan.role, argv, self.cli_env(), plan.port, plan.metrics_port, plan.side_ports)
            out.append((run, name))
        return out

    def cgroup_parent(self) -> WeightedParent | str:
        """The weighted parent cgroup the containers run under (canary.targets.cgroup_weight), prepared on
        first use; or why there is none (then they run where the CLI puts them)."""
        if self._parent is None:
            self._parent = cgroup_weight.prepare(self.settings.nice, self.cli.cgroup_manager())
        return self._parent

    def _cgroup_args(self) -> list[str]:
        parent = self._parent
        return ["--cgroup-parent", parent.cli_value] if isinstance(parent, WeightedParent) else []

    def home_cache(self, image_key: str, image: str) -> Path:
        """The host folder an image's engines keep HOME and their compile caches in: keyed by the image's id
        (digest) once resolved, else by its reference (a dry run), so two images never share compiled code."""
        identity = self._digests.get(image_key) or image
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

    @staticmethod
    def _container_env(env: Mapping[str, str]) -> dict[str, str]:
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

    def describe(self, cell: Cell) -> dict[str, object]:
        """What deploy would run: the container invocations, with images as configured (nothing pulled)."""
        ports = {name: f"${name.upper()}_PORT" for name in self.port_names(cell)}
        notes: list[str] = []
        try:
            model_path = resolve_model(cell.model_source, self.cache_dir)
        except CanaryError as exc:
            model_path = str(local_model_dir(cell.model_source, self.cache_dir) or cell.model_source)
            notes.append(str(exc))
        images = {key: self.image_ref(key) for key in cell.image_keys()}
        for key in images:
            if self.config.images[key].patches and key not in self.container.images:
                notes.append(
                    f"image {key!r}: {self.config.images[key].patches} is applied in a derived image of "
                    f"{self.image_ref(key)} (built once, cached)"
                )
        local = self.plan_servers(
            cell, ports, builds=self.engine_builds(cell), model_path=model_path, layout_root="$CELL_LOG_DIR"
        )
        plans = self.container_plans(cell, local, model_path, images)
        return {
            "servers": [
                {"role": p.role, "container": name, "command": " ".join(p.argv), "argv": p.argv} for p, name in plans
            ],
            "notes": notes,
            "ports": "picked at run time on " + self.settings.host + " (host network)",
            "ready": "/health 200 and /v1/models lists the model",
            "timeout_s": self.config.checks.startup.timeout_s,
        }

    # ------------------------------------------------------------------ deploy

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Start the cell's containers; yield the Deployment; remove every container on exit."""
        from canary.core.ports import free_ports

        images = {key: self.resolve_image(key, log_dir) for key in cell.image_keys()}
        model_path = resolve_model(cell.model_source, self.cache_dir)
        names = self.port_names(cell)
        ports = dict(zip(names, (str(p) for p in free_ports(len(names), self.settings.host)), strict=True))
        log_dir.mkdir(parents=True, exist_ok=True)
        local = self.plan_servers(
            cell, ports, builds=self.engine_builds(cell), model_path=model_path, layout_root=log_dir.absolute()
        )
        for plan in local:  # the engine (maybe another uid) writes its layout records here
            if LAYOUT_DIR_ENV in plan.env:
                layout = Path(plan.env[LAYOUT_DIR_ENV])
                layout.mkdir(parents=True, exist_ok=True)
                layout.chmod(0o777)
        if self.container.compile_cache:  # and its HOME with the compile caches (kept across cells and runs)
            for key, ref in images.items():
                home = self.home_cache(key, ref)
                home.mkdir(parents=True, exist_ok=True)
                home.chmod(0o777)
        parent = self.cgroup_parent()
        plans = self.container_plans(cell, local, model_path, images)
        layouts = {p.role: Path(p.env[LAYOUT_DIR_ENV]) for p in local if LAYOUT_DIR_ENV in p.env}
        deployment = Deployment(cell=cell, base_url="", served_model=cell.model)
        deployment.evidence["containers"] = {
            p.role: {"name": name, "image": self._image_of(cell, p.role)} for p, name in plans
        }
        deployment.evidence["cpu_weight"] = parent.to_json() if isinstance(parent, WeightedParent) else parent
        deployment.evidence["image_digests"] = {
            role: self._digests.get(cell.image_for(role), "") for role in self._engine_roles(cell)
        }
        started: dict[str, processes.ManagedProcess] = {}
        self._live.update({name: p.role for p, name in plans})
        cleanup = self._remove_live
        processes.add_cleanup(cleanup)
        try:
            self._bring_up(deployment, [p for p, _ in plans], started, log_dir)
            for role, layout in layouts.items():
                if role in deployment.servers:
                    deployment.servers[role].layout_dir = layout
            self._record_pids(deployment, plans)
            if not deployment.started:
                self._stop_containers(deployment, started)
            elif isinstance(parent, WeightedParent):
                self._place_helpers(deployment)
            elif self.helper_cpus(cell) is not None:
                deployment.evidence["helper_cpus"] = {"skipped": f"no weighted cgroup parent: {parent}"}
            yield deployment
        finally:
            try:
                self._stop_containers(deployment, started)
            finally:
                processes.remove_cleanup(cleanup)

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

    @staticmethod
    def _engine_roles(cell: Cell) -> list[str]:
        return ["aggregated"] if cell.topology == "aggregated" else ["prefill", "decode"]

    def _image_of(self, cell: Cell, role: str) -> str:
        return self.router_image() if role == "router" else self._images.get(cell.image_for(role), "")

    def _record_pids(self, deployment: Deployment, plans: list[tuple[ServerPlan, str]]) -> None:
        """Each server's pid becomes its container's first process, whose process tree holds the engine, so
        the throughput check's host-load accounting counts the engine as the cell's own."""
        for plan, name in plans:
            server = deployment.servers.get(plan.role)
            if server is not None and (pid := self.cli.main_pid(name)) is not None:
                server.pid = pid

    def _remove_live(self) -> None:
        """Cleanup hook (signals, atexit): remove every container this target may still run."""
        names = list(self._live)
        self._live.clear()
        with contextlib.suppress(CanaryError):
            self._unpause(names)
        with contextlib.suppress(CanaryError):
            self.cli.remove(names, stop_timeout_s=min(5, self.container.stop_timeout_s))

    def _stop_containers(self, deployment: Deployment, started: dict[str, processes.ManagedProcess]) -> None:
        """Router first, then the engines; then the attached clients; exit codes recorded."""
        names = self._names_of(deployment)
        try:
            self._unpause(names)
            if names:
                self.cli.remove(names, stop_timeout_s=self.container.stop_timeout_s)
        finally:
            for name in names:
                self._live.pop(name, None)
            try:
                self._stop(deployment, started)
            finally:
                self._remove_owned(deployment.cell)

    def _remove_owned(self, cell: Cell) -> None:
        """Once the attached clients are gone, nothing creates containers any more: remove whatever of this
        cell this controller still owns. A client stopped while podman was still creating its container
        (under vfs, copying the image takes a minute) leaves it `created`, unknown to `stop` by then."""
        owned = self.cli.labelled(f"{OWNER_LABEL}={owner_id()}")
        mine = [r["name"] for r in owned if r.get(f"label:{CELL_LABEL}") == cell.k8s_name]
        self.cli.remove(mine, stop_timeout_s=1)
