"""The local target: real vLLM servers on this machine, one process group each.

A cell becomes one aggregated server, or a prefill and a decode server joined by NixlConnector
(each with its own NIXL side-channel port) plus `vllm-router` in front. Every flag comes from
the cell (`--block-size`, `--attention-backend` (passed on every platform: that is how a silent
fallback shows up), `--kv-cache-dtype`, the model runner through VLLM_USE_V2_MODEL_RUNNER), the
environment is built from scratch (canary.targets.engine_env), ports are picked at run time, logs land
in the cell's log directory. Prefill and decode start together; the router starts once both are
ready. If anything fails to come up, deploy tears everything down and still yields a Deployment
(started=False, failure=...) so the startup check can classify the failure from the logs.

GPUs: each engine sees only its own GPUs (CUDA_VISIBLE_DEVICES), handed out from `target.devices`
by canary.targets.devices, prefill and decode disjoint. Weights of a hub model come from the
Hugging Face cache on this machine (`target.hf_home`, engines offline). `preflight` checks both for
every planned cell before the first one starts: a pool too small is a ConfigError (exit 2), a model
the cache lacks an error naming the download (a dry run reports both problems it can only guess at,
the GPUs of `all` on a machine without them and missing weights, as warnings and renders anyway).
--enforce-eager is passed on CPU only unless `target.local.enforce_eager` says otherwise.

Runner choice: runner v2 sets VLLM_USE_V2_MODEL_RUNNER=1, so vLLM must run Model Runner V2 or
refuse to start (on CPU it refuses: "Model Runner V2 requires Triton."); runner v1 sets it to 0.
`target.local.env: {VLLM_USE_V2_MODEL_RUNNER: ""}` leaves the choice to vLLM's default instead,
which on CPU silently falls back to V1; the startup check's live-config verification catches that.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from canary.config import CanaryConfig
from canary.config.catalog import load_catalog
from canary.core.ports import free_ports
from canary.errors import CanaryError, ConfigError
from canary.model.ref import hf_home, hub_model_missing, is_builtin, is_hub_id, local_model_dir, resolve_model
from canary.paths import CACHE_DIR, REPO_ROOT
from canary.plan.cell import Cell
from canary.targets import affinity, processes
from canary.targets.base import Deployment, ServerInfo
from canary.targets.devices import GPUS_KEY, Devices, Pool, cell_devices, check_pool, most_needed, resolve_pool
from canary.targets.engine_env import (
    LAYOUT_DIR_ENV,
    EngineRole,
    cpu_binds,
    engine_env,
    pd_helper_cores,
    router_env,
)
from canary.targets.host_gpus import listed_gpus
from canary.targets.readiness import probe, wait_ready
from canary.targets.signatures import LogWatch

ENGINE_ROLES = ("aggregated", "prefill", "decode")
QUIET_ENDPOINTS = "/health,/metrics"
"""--disable-access-log-for-endpoints (vLLM 0.32/0.33 frontend flag, pinned by tests/source)."""

ROUTER_READY_MIN_S = 60.0
"""The router gets at least this long to come up, even when the engines used most of the deadline."""


@dataclass(frozen=True)
class EngineBuild:
    """How one image's engine runs locally: its venv's python and the patched vllm copy first on PYTHONPATH."""

    python: Path
    python_path: tuple[str, ...] = ()


@dataclass
class ServerPlan:
    """One process of a cell: what runs, with which env, on which ports."""

    role: str
    argv: list[str]
    env: dict[str, str]
    port: str
    metrics_port: str | None = None
    side_ports: list[str] = field(default_factory=list)

    @property
    def is_engine(self) -> bool:
        """A vLLM engine (not the router)."""
        return self.role != "router"


def resolve_executable(text: str, what: str, hint: str) -> Path:
    """A configured program path: absolute, relative to the working directory, or to the repo root."""
    path = Path(text).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.exists() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    tried = ", ".join(str(c) for c in candidates)
    raise CanaryError(f"{what} not found or not executable ({tried}): {hint}")


def _as_absolute(text: str) -> Path:
    """A configured path as the local target uses it: relative to the working directory if it
    exists there, else to the repo root."""
    path = Path(text).expanduser()
    if path.is_absolute():
        return path
    return (Path.cwd() / path).absolute() if (Path.cwd() / path).exists() else REPO_ROOT / path


class LocalTarget:
    """Starts and stops the cell's servers as local process groups."""

    kind = "local"

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
        self.config = config
        self.settings = config.target.local
        self.cache_dir = cache_dir
        self.cores = cores or os.cpu_count() or 1
        self.catalog = load_catalog()
        self.source = source
        self._listed = gpus_here
        self._overlays: dict[str, Path] = {}

    # ------------------------------------------------------------------ GPUs and weights

    @property
    def enforce_eager(self) -> bool:
        """Whether engines get --enforce-eager (`auto`: on CPU only)."""
        setting = self.settings.enforce_eager
        return self.config.platform == "cpu" if setting == "auto" else setting

    def gpu_pool(self) -> Pool | None:
        """The device pool (None: `all` on a machine where nvidia-smi lists no GPU)."""
        if self._listed == "probe":
            self._listed = listed_gpus() if self.config.target.devices.gpus == "all" else None
        return resolve_pool(self.config.target.devices.gpus, self._listed)

    def _no_gpus(self) -> str:
        return (
            f"platform {self.config.platform} but nvidia-smi lists no GPU on this machine ({GPUS_KEY}: all); "
            f"run on a GPU machine or name the GPUs in {GPUS_KEY}"
        )

    def devices(self, cell: Cell) -> dict[str, Devices]:
        """Each engine role's GPUs ({} on CPU); ConfigError when the pool cannot hold the cell."""
        if self.config.platform == "cpu":
            return {}
        pool = self.gpu_pool()
        if pool is None:
            raise ConfigError(self.source, GPUS_KEY, self._no_gpus())
        return cell_devices(cell, self.config, pool, source=self.source)

    def hf_home(self, cell: Cell) -> Path | None:
        """The Hugging Face cache the cell's engines read a hub model from (None: a builtin or a directory)."""
        return hf_home(self.config.target.hf_home) if is_hub_id(cell.model_source) else None

    def weights_missing(self, cell: Cell) -> str | None:
        """Why the cell's model cannot be loaded here (None: it can, as far as the canary can tell)."""
        return hub_model_missing(cell.model_source, hf_home(self.config.target.hf_home))

    def preflight(self, cells: Iterable[Cell], *, dry_run: bool = False) -> list[str]:
        """Check every planned cell's GPUs and weights before the first starts. ConfigError (exit 2) for a
        device pool too small; a run stops on missing weights or an unknown pool, a dry run returns them
        as warnings."""
        planned = list(cells)
        warnings: list[str] = []
        explicit = self.settings.helper_cpus
        if isinstance(explicit, list):
            problem = affinity.check_cpus(explicit)
            if problem is not None:
                raise ConfigError(self.source, "target.local.helper_cpus", problem)
        if most_needed(planned, self.config):
            pool = self.gpu_pool()
            if pool is not None:
                check_pool(planned, self.config, pool, source=self.source)
            elif dry_run:
                warnings.append(self._no_gpus() + ": the dry run renders GPUs from index 0")
            else:
                raise ConfigError(self.source, GPUS_KEY, self._no_gpus())
        for model_source in dict.fromkeys(cell.model_source for cell in planned):
            if is_builtin(model_source) and not dry_run:  # built (CanaryError naming `make model` otherwise)
                resolve_model(model_source, self.cache_dir)
            missing = hub_model_missing(model_source, hf_home(self.config.target.hf_home))
            if missing is not None and not dry_run:
                raise CanaryError(missing)
            if missing is not None:
                warnings.append(missing)
        return warnings

    # ------------------------------------------------------------------ commands

    def engine_python(self, image_key: str) -> Path:
        """The engine venv's python of an image."""
        text = self._engine_python_text(image_key)
        return resolve_executable(text, f"engine python of image {image_key!r}", "run `make engine-venv`")

    def _engine_python_text(self, image_key: str) -> str:
        return self.config.images[image_key].engine_python or self.settings.engine_python

    def overlay(self, image_key: str) -> Path | None:
        """The patched vLLM copy of an image (`images.<key>.patches`), built once and cached."""
        series = self.config.images[image_key].patches
        if series is None:
            return None
        if image_key not in self._overlays:
            from canary.images.overlay import build_overlay

            path = _as_absolute(series)
            if not path.is_file():
                raise CanaryError(f"patch series {series!r} of image {image_key!r} not found ({path})")
            self._overlays[image_key] = build_overlay(
                path, engine_python=self.engine_python(image_key), cache_root=self.cache_dir / "overlays"
            )
        return self._overlays[image_key]

    def engine_builds(self, cell: Cell) -> dict[str, EngineBuild]:
        """The engine build (python, patched overlay) of every image the cell runs; builds overlays."""
        return {
            key: EngineBuild(self.engine_python(key), tuple(str(p) for p in [self.overlay(key)] if p is not None))
            for key in cell.image_keys()
        }

    def _model_spec(self, cell: Cell) -> tuple[int, int, list[str]]:
        model = next(m for m in self.config.models if m.name == cell.model)
        return model.max_model_len, model.tensor_parallel_size, list(model.extra_args)

    def engine_argv(self, cell: Cell, python: str, model_path: str, role: str, port: str, block_size: int) -> list[str]:
        """The engine command line of one role."""
        max_len, tp, model_args = self._model_spec(cell)
        argv = [
            python,
            *self.settings.entrypoint,
            "--model",
            model_path,
            "--served-model-name",
            cell.model,
            "--host",
            self.settings.host,
            "--port",
            port,
            "--max-model-len",
            str(max_len),
            "--block-size",
            str(block_size),
            "--attention-backend",
            cell.backend,
            "--kv-cache-dtype",
            cell.kv_cache_dtype,
            # The canary polls /health and /metrics: their access lines would bury the startup record.
            "--disable-access-log-for-endpoints",
            QUIET_ENDPOINTS,
        ]
        if tp > 1:
            argv += ["--tensor-parallel-size", str(tp)]
        if self.enforce_eager:
            argv.append("--enforce-eager")
        if role in ("prefill", "decode"):
            platform = self.catalog.platforms[self.config.platform]
            transfer = {
                "kv_connector": "NixlConnector",
                "kv_role": "kv_both",
                "kv_buffer_device": platform.kv_buffer_device,
            }
            argv += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
        return argv + model_args + list(self.settings.extra_args)

    def router_argv(self, prefill_url: str, decode_url: str, port: str, metrics_port: str) -> list[str]:
        """vllm-router in P/D mode in front of one prefill and one decode server."""
        host = self.settings.host
        return [
            *self._router_command(),
            "--vllm-pd-disaggregation",
            "--prefill",
            prefill_url,
            "--decode",
            decode_url,
            "--policy",
            "round_robin",
            "--host",
            host,
            "--port",
            port,
            "--prometheus-host",
            host,
            "--prometheus-port",
            metrics_port,
        ]

    def _router_command(self) -> list[str]:
        """The configured router command with its program as an absolute path where it is a path."""
        program, *rest = self.settings.router
        if "/" in program:
            program = str(_as_absolute(program))
        return [program, *rest]

    def plan_servers(
        self,
        cell: Cell,
        ports: Mapping[str, str],
        *,
        builds: Mapping[str, EngineBuild],
        model_path: str,
        layout_root: Path | str | None = None,
        devices: Mapping[str, Devices] | None = None,
        hf_home: Path | None = None,
    ) -> list[ServerPlan]:
        """Every process of the cell, in start order. `ports` maps names (see port_names) to values;
        `builds` maps each image key of the cell to its engine build (a mixed pair has two).

        layout_root: the cell's log directory; each engine's layout probe writes to <role>.layout/ in it.
        devices: each engine role's GPUs (canary.targets.devices; none: no CUDA_VISIBLE_DEVICES);
        hf_home: the Hugging Face cache of a hub model."""
        gpus = dict(devices or {})
        host = self.settings.host
        probe = self.config.checks.startup.layout_probe
        layout_dirs = {r: (f"{layout_root}/{r}.layout" if probe and layout_root else None) for r in ENGINE_ROLES}
        if cell.topology == "aggregated":
            build = builds[cell.image]
            role = EngineRole(runner=cell.runner, layout_dir=layout_dirs["aggregated"], gpus=gpus.get("aggregated"))
            env = engine_env(
                self.config,
                role,
                engine_python=build.python,
                cache_dir=self.cache_dir,
                python_path=build.python_path,
                hf_home=hf_home,
            )
            argv = self.engine_argv(
                cell, str(build.python), model_path, "aggregated", ports["aggregated"], cell.prefill_block_size
            )
            return [ServerPlan("aggregated", argv, env, ports["aggregated"])]
        binds = cpu_binds(self.cores, 2) if self.config.platform == "cpu" else [None, None]
        plans: list[ServerPlan] = []
        for index, (role_name, block) in enumerate(
            (("prefill", cell.prefill_block_size), ("decode", cell.decode_block_size))
        ):
            side = ports[f"{role_name}_nixl"]
            build = builds[cell.image_for(role_name)]
            role = EngineRole(
                runner=cell.runner_for(role_name),
                nixl_side_channel_port=side,
                cpu_bind=binds[index],
                layout_dir=layout_dirs[role_name],
                gpus=gpus.get(role_name),
            )
            env = engine_env(
                self.config,
                role,
                engine_python=build.python,
                cache_dir=self.cache_dir,
                python_path=build.python_path,
                hf_home=hf_home,
            )
            argv = self.engine_argv(cell, str(build.python), model_path, role_name, ports[role_name], block)
            plans.append(ServerPlan(role_name, argv, env, ports[role_name], side_ports=[side]))
        program = self._router_command()[0]
        router_bin = Path(program).parent if "/" in program else None
        argv = self.router_argv(
            f"http://{host}:{ports['prefill']}",
            f"http://{host}:{ports['decode']}",
            ports["router"],
            ports["router_metrics"],
        )
        env = router_env(self.config, bin_dir=router_bin, cache_dir=self.cache_dir)
        plans.append(ServerPlan("router", argv, env, ports["router"], metrics_port=ports["router_metrics"]))
        return plans

    @staticmethod
    def port_names(cell: Cell) -> list[str]:
        """The ports a cell needs."""
        if cell.topology == "aggregated":
            return ["aggregated"]
        return ["prefill", "decode", "prefill_nixl", "decode_nixl", "router", "router_metrics"]

    def describe(self, cell: Cell) -> dict[str, object]:
        """What deploy would run for this cell (ports are placeholders: they are picked at run time)."""
        ports = {name: f"${name.upper()}_PORT" for name in self.port_names(cell)}
        notes: list[str] = []
        builds: dict[str, EngineBuild] = {}
        for key in cell.image_keys():
            try:
                python = self.engine_python(key)
            except CanaryError as exc:
                python = _as_absolute(self._engine_python_text(key))
                notes.append(str(exc))
            series = self.config.images[key].patches
            builds[key] = EngineBuild(python, (f"$OVERLAY_OF({series})",) if series else ())
            if series:
                notes.append(
                    f"{series} is applied to a copy of the engine's vllm (canary.images.overlay), first on PYTHONPATH"
                )
        try:
            model_path = resolve_model(cell.model_source, self.cache_dir)
        except CanaryError as exc:
            model_path = str(local_model_dir(cell.model_source, self.cache_dir) or cell.model_source)
            notes.append(str(exc))
        missing = self.weights_missing(cell)
        if missing is not None:
            notes.append(missing)
        devices = self._described_devices(cell, notes)
        plans = self.plan_servers(
            cell,
            ports,
            builds=builds,
            model_path=model_path,
            layout_root="$CELL_LOG_DIR",
            devices=devices,
            hf_home=self.hf_home(cell),
        )
        servers = [{"role": p.role, "command": shlex.join(p.argv), "argv": p.argv, "env": p.env} for p in plans]
        return {
            "servers": servers,
            "notes": notes,
            "ports": "picked at run time on " + self.settings.host,
            "ready": "/health 200 and /v1/models lists the model",
            "timeout_s": self.config.checks.startup.timeout_s,
        }

    def _described_devices(self, cell: Cell, notes: list[str]) -> dict[str, Devices]:
        """The GPUs a dry run shows: the real assignment, or on a machine without GPUs (`all`) one from index 0."""
        if self.config.platform != "cpu" and self.gpu_pool() is None:
            needed = most_needed([cell], self.config)
            notes.append(self._no_gpus() + ": rendered as " + ("GPU 0" if needed == 1 else f"GPUs 0-{needed - 1}"))
            return cell_devices(cell, self.config, Pool(tuple(range(needed)), "assumed"), source=self.source)
        return self.devices(cell)

    # ------------------------------------------------------------------ deploy

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Start the cell's servers; yield the Deployment; stop every process group on exit."""
        devices = self.devices(cell)
        missing = self.weights_missing(cell)
        if missing is not None:
            raise CanaryError(missing)
        builds = self.engine_builds(cell)
        model_path = resolve_model(cell.model_source, self.cache_dir)
        if cell.topology == "pd-nixl":
            resolve_executable(self.settings.router[0], "P/D router", "run `make engine-venv` (vllm-router)")
        names = self.port_names(cell)
        ports = dict(zip(names, (str(p) for p in free_ports(len(names), self.settings.host)), strict=True))
        log_dir.mkdir(parents=True, exist_ok=True)
        plans = self.plan_servers(
            cell,
            ports,
            builds=builds,
            model_path=model_path,
            layout_root=log_dir.absolute(),
            devices=devices,
            hf_home=self.hf_home(cell),
        )
        deployment = Deployment(cell=cell, base_url="", served_model=cell.model)
        started: dict[str, processes.ManagedProcess] = {}
        try:
            self._bring_up(deployment, plans, started, log_dir)
            if not deployment.started:
                self._stop(deployment, started)
            else:
                self._place_helpers(deployment)
            yield deployment
        finally:
            self._stop(deployment, started)

    def freeze(self, deployment: Deployment) -> bool:
        """canary.targets.base.Freezes: SIGSTOP every server of a started deployment (its process group
        and the descendants that left it); False when none of its servers is ours and alive."""
        procs = self._processes_of(deployment)
        if not deployment.started or not procs:
            return False
        processes.pause(procs)
        return True

    def thaw(self, deployment: Deployment) -> None:
        """canary.targets.base.Freezes: SIGCONT what `freeze` stopped."""
        processes.resume(self._processes_of(deployment))

    @staticmethod
    def _processes_of(deployment: Deployment) -> list[processes.ManagedProcess]:
        pids = {s.pid for s in deployment.servers.values() if s.pid is not None}
        return [p for p in processes.live_processes() if p.pid in pids and p.alive()]

    def helper_cpus(self, cell: Cell) -> tuple[int, ...] | None:
        """The cores of the cell's helper processes (target.local.helper_cpus; None: left as started)."""
        setting = self.settings.helper_cpus
        if setting is None:
            return None
        if setting != "auto":
            return tuple(sorted(set(setting)))
        if self.config.platform != "cpu" or cell.topology != "pd-nixl":
            return None
        return pd_helper_cores(self.cores)

    def _place_helpers(self, deployment: Deployment) -> None:
        """Move the ready cell's helper threads to their cores; the evidence says what moved or why not."""
        cpus = self.helper_cpus(deployment.cell)
        if cpus is None:
            return
        problem = affinity.check_cpus(cpus)
        if problem is not None:
            deployment.evidence["helper_cpus"] = {"cpus": list(cpus), "skipped": problem}
            return
        report = affinity.pin_helpers([s.pid for s in deployment.servers.values() if s.pid is not None], cpus)
        deployment.helper_cpus = cpus
        deployment.evidence["helper_cpus"] = report.to_json()

    def _url(self, port: str) -> str:
        return f"http://{self.settings.host}:{port}"

    def _start(
        self, plan: ServerPlan, deployment: Deployment, started: dict[str, processes.ManagedProcess], log_dir: Path
    ) -> processes.ManagedProcess:
        log_path = log_dir / f"{plan.role}.log"
        log_path.write_text(f"# canary: {shlex.join(plan.argv)}\n", encoding="utf-8")
        launched_at = time.time()
        ports = [int(p) for p in [plan.port, plan.metrics_port, *plan.side_ports] if p is not None]
        proc = processes.start(
            plan.role, plan.argv, plan.env, log_path, cwd=REPO_ROOT, ports=ports, nice=self.settings.nice
        )
        started[plan.role] = proc
        metrics_port = plan.metrics_port or plan.port
        deployment.servers[plan.role] = ServerInfo(
            role=plan.role,
            base_url=self._url(plan.port),
            metrics_url=f"{self._url(metrics_port)}/metrics",
            log_path=log_path,
            pid=proc.pid,
            launched_at=launched_at,
            layout_dir=Path(plan.env[LAYOUT_DIR_ENV]) if LAYOUT_DIR_ENV in plan.env else None,
        )
        return proc

    def _bring_up(
        self,
        deployment: Deployment,
        plans: list[ServerPlan],
        started: dict[str, processes.ManagedProcess],
        log_dir: Path,
    ) -> None:
        settings = self.config.checks.startup
        t0 = time.monotonic()
        deadline = t0 + settings.timeout_s
        engines = [p for p in plans if p.is_engine]
        for plan in engines:  # prefill and decode start together
            self._start(plan, deployment, started, log_dir)
        failure = self._wait_engines(deployment, started, deadline, settings.poll_interval_s)
        router = next((p for p in plans if not p.is_engine), None)
        if failure is None and router is not None:
            proc = self._start(router, deployment, started, log_dir)
            router_deadline = max(deadline, time.monotonic() + ROUTER_READY_MIN_S)
            result = wait_ready(
                self._url(router.port),
                deployment.served_model,
                router_deadline,
                interval_s=settings.poll_interval_s,
                gone=lambda: not proc.alive(),
            )
            if result.ready:
                deployment.servers["router"].ready_seconds = round(proc.elapsed(), 3)
            else:
                failure = self._not_ready("router", proc, result.detail, router_deadline - proc.started_at)
        front = "router" if router is not None else "aggregated"
        deployment.base_url = deployment.servers[front].base_url if front in deployment.servers else ""
        if failure is None:
            deployment.started = True
            deployment.ready_seconds = round(time.monotonic() - t0, 3)
        else:
            deployment.failure = failure

    def _wait_engines(
        self,
        deployment: Deployment,
        started: dict[str, processes.ManagedProcess],
        deadline: float,
        interval_s: float,
    ) -> str | None:
        """Poll every engine until all are ready; the first death or the deadline ends the wait."""
        pending = dict(started)
        watches = {role: LogWatch(proc.log_path) for role, proc in started.items()}
        while pending:
            for role, proc in list(pending.items()):
                if not proc.alive():
                    return self._not_ready(role, proc, "process exited", 0.0)
                fatal = watches[role].poll()
                if fatal is not None:
                    signature, line = fatal
                    return (
                        f"{role} cannot become ready after {proc.elapsed():.1f} s: {signature.title} "
                        f"(its process lives on; log: {line.strip()})"
                    )
                result = probe(deployment.servers[role].base_url, deployment.served_model)
                if result.ready:
                    deployment.servers[role].ready_seconds = round(proc.elapsed(), 3)
                    proc.remember_descendants()
                    del pending[role]
                elif time.monotonic() >= deadline:
                    return self._not_ready(role, proc, result.detail, deadline - proc.started_at)
            if pending:
                time.sleep(interval_s)
        return None

    @staticmethod
    def _not_ready(role: str, proc: processes.ManagedProcess, detail: str, timeout_s: float) -> str:
        code = proc.exit_code()
        if code is not None:
            return f"{role} exited with code {code} after {proc.elapsed():.1f} s before it was ready"
        return f"{role} not ready after {timeout_s:.0f} s (startup timeout; last probe: {detail})"

    @staticmethod
    def _stop(deployment: Deployment, started: dict[str, processes.ManagedProcess]) -> None:
        """Stop the router first, then the engines; record exit codes."""
        router = [p for role, p in started.items() if role == "router"]
        engines = [p for role, p in started.items() if role != "router"]
        try:
            processes.stop(router, grace_s=5.0)
        finally:
            processes.stop(engines)
            for role, proc in started.items():
                if role in deployment.servers:
                    deployment.servers[role].exit_code = proc.exit_code()
            started.clear()  # stopping twice (failure path, then exit) is a no-op
