"""The one plan of a cell's engines and router, whatever starts them (local processes or containers).

A cell becomes one aggregated server, or a prefill and a decode server joined by NixlConnector (each
with its own NIXL side-channel port) plus `vllm-router` in front. Every flag comes from the cell
(`--block-size`, `--attention-backend` (passed on every platform: that is how a silent fallback shows
up), `--kv-cache-dtype`, the model runner through VLLM_USE_V2_MODEL_RUNNER); the environment is built
from scratch (canary.targets.engine_env); ports are named here and picked at run time.

What an engine is given of the machine is decided here too, for every target alike (`EngineResources`):
its GPUs from `target.devices` (canary.targets.devices: tensor-parallel aware, prefill and decode
disjoint), the Hugging Face cache of a hub model (`target.hf_home`), and the shared memory vLLM needs
(`target.container.shm`: the host's, or a sized private one). `EnginePlanner.plan` computes all three
from the cell itself, so no caller can leave one out: a local process gets them as its environment
(CUDA_VISIBLE_DEVICES, HF_HOME; shared memory is the host's), a container as runtime flags and mounts
(canary.targets.container).

GPUs and weights are checked for every planned cell before the first one starts (`preflight`): a pool
too small is a ConfigError (exit 2), a model the cache lacks an error naming the download (a dry run
reports both problems it can only guess at, the GPUs of `all` on a machine without them and missing
weights, as warnings and renders anyway). --enforce-eager is passed on CPU only unless
`target.local.enforce_eager` says otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from canary.config import CanaryConfig
from canary.config.catalog import load_catalog
from canary.errors import CanaryError, ConfigError
from canary.model.ref import hf_home, hub_model_missing, is_builtin, is_hub_id, local_model_dir, resolve_model
from canary.paths import CACHE_DIR, REPO_ROOT
from canary.plan.cell import Cell
from canary.targets import affinity
from canary.targets.devices import GPUS_KEY, Devices, Pool, cell_devices, check_pool, most_needed, resolve_pool
from canary.targets.engine_env import EngineRole, cpu_binds, engine_env, pd_helper_cores, router_env
from canary.targets.host_gpus import listed_gpus

ENGINE_ROLES = ("aggregated", "prefill", "decode")
QUIET_ENDPOINTS = "/health,/metrics"
"""--disable-access-log-for-endpoints (vLLM 0.32/0.33 frontend flag, pinned by tests/source)."""


@dataclass(frozen=True)
class EngineBuild:
    """Which vLLM an image key runs: a python (a venv's, or the stand-in of an image's) and the patched
    vllm copy first on PYTHONPATH."""

    python: Path
    python_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineResources:
    """What one engine is given of the machine besides its command and environment."""

    devices: Devices
    """Its GPUs, as nvidia-smi numbers them (empty: none, e.g. on CPU)."""
    hf_home: Path | None
    """The Hugging Face cache its hub model is read from (None: a builtin model or a directory)."""
    shm: str
    """Shared memory (target.container.shm): `host` (the host's /dev/shm and IPC) or a size such as 16g."""


@dataclass
class ServerPlan:
    """One process of a cell: what runs, with which env, on which ports, given what."""

    role: str
    argv: list[str]
    program_len: int
    """How many leading argv items name the program (python and entrypoint, or the router command): a
    container replaces them with the command inside its image."""
    env: dict[str, str]
    port: str
    resources: EngineResources | None
    """An engine's GPUs, cache and shared memory; None for the router."""
    metrics_port: str | None = None
    side_ports: list[str] = field(default_factory=list)

    @property
    def is_engine(self) -> bool:
        """A vLLM engine (not the router)."""
        return self.role != "router"


@dataclass
class CellPlan:
    """Every process of a cell in start order, the model path they load, and what a dry run noticed."""

    servers: list[ServerPlan]
    model_path: str
    notes: list[str]


def resolve_executable(text: str, what: str, hint: str) -> Path:
    """A configured program path: absolute, relative to the working directory, or to the repo root."""
    path = Path(text).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.exists() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    tried = ", ".join(str(c) for c in candidates)
    raise CanaryError(f"{what} not found or not executable ({tried}): {hint}")


def as_absolute(text: str) -> Path:
    """A configured path as a target uses it: relative to the working directory if it exists there, else
    to the repo root."""
    path = Path(text).expanduser()
    if path.is_absolute():
        return path
    return (Path.cwd() / path).absolute() if (Path.cwd() / path).exists() else REPO_ROOT / path


def port_names(cell: Cell) -> list[str]:
    """The ports a cell needs."""
    if cell.topology == "aggregated":
        return ["aggregated"]
    return ["prefill", "decode", "prefill_nixl", "decode_nixl", "router", "router_metrics"]


def placeholder_ports(cell: Cell) -> dict[str, str]:
    """The ports of a dry run ($PREFILL_PORT, ...): real ones are picked at run time."""
    return {name: f"${name.upper()}_PORT" for name in port_names(cell)}


class EnginePlanner:
    """Plans a cell's servers and checks the machine can hold them (GPUs, weights, helper cores)."""

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

    # ------------------------------------------------------------------ GPUs, weights, cores

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

    def no_gpus(self) -> str:
        """Why `all` names no GPU here."""
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
            raise ConfigError(self.source, GPUS_KEY, self.no_gpus())
        return cell_devices(cell, self.config, pool, source=self.source)

    def described_devices(self, cell: Cell, notes: list[str]) -> dict[str, Devices]:
        """The GPUs a dry run shows: the real assignment, or on a machine without GPUs (`all`) one from index 0."""
        if self.config.platform != "cpu" and self.gpu_pool() is None:
            needed = most_needed([cell], self.config)
            notes.append(self.no_gpus() + ": rendered as " + ("GPU 0" if needed == 1 else f"GPUs 0-{needed - 1}"))
            return cell_devices(cell, self.config, Pool(tuple(range(needed)), "assumed"), source=self.source)
        return self.devices(cell)

    def hf_home(self, cell: Cell) -> Path | None:
        """The Hugging Face cache the cell's engines read a hub model from (None: a builtin or a directory)."""
        return hf_home(self.config.target.hf_home) if is_hub_id(cell.model_source) else None

    def weights_missing(self, cell: Cell) -> str | None:
        """Why the cell's model cannot be loaded here (None: it can, as far as the canary can tell)."""
        return hub_model_missing(cell.model_source, hf_home(self.config.target.hf_home))

    def preflight(self, cells: Iterable[Cell], *, dry_run: bool = False) -> list[str]:
        """Check every planned cell's GPUs, weights and helper cores before the first starts. ConfigError
        (exit 2) for a device pool too small or cores the machine lacks; a run stops on missing weights or
        an unknown pool, a dry run returns them as warnings."""
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
                warnings.append(self.no_gpus() + ": the dry run renders GPUs from index 0")
            else:
                raise ConfigError(self.source, GPUS_KEY, self.no_gpus())
        for model_source in dict.fromkeys(cell.model_source for cell in planned):
            if is_builtin(model_source) and not dry_run:  # built (CanaryError naming `make model` otherwise)
                resolve_model(model_source, self.cache_dir)
            missing = hub_model_missing(model_source, hf_home(self.config.target.hf_home))
            if missing is not None and not dry_run:
                raise CanaryError(missing)
            if missing is not None:
                warnings.append(missing)
        return warnings

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

    # ------------------------------------------------------------------ commands

    def _model_spec(self, cell: Cell) -> tuple[int, list[str]]:
        model = next(m for m in self.config.models if m.name == cell.model)
        return model.max_model_len, list(model.extra_args)

    def engine_argv(self, cell: Cell, python: str, model_path: str, role: str, port: str, block_size: int) -> list[str]:
        """The engine command line of one role (its tensor-parallel size: the cell's for that role)."""
        max_len, model_args = self._model_spec(cell)
        tp = cell.tp_for(role)
        argv = [
            python,
            *self.settings.entrypoint,
            *("--model", model_path, "--served-model-name", cell.model),
            *("--host", self.settings.host, "--port", port, "--max-model-len", str(max_len)),
            *("--block-size", str(block_size), "--attention-backend", cell.backend),
            *("--kv-cache-dtype", cell.kv_cache_dtype),
            # The canary polls /health and /metrics: their access lines would bury the startup record.
            *("--disable-access-log-for-endpoints", QUIET_ENDPOINTS),
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
        return argv + cell.prefix_caching_args() + model_args + list(self.settings.extra_args)

    def router_command(self) -> list[str]:
        """The configured router command with its program as an absolute path where it is a path."""
        program, *rest = self.settings.router
        if "/" in program:
            program = str(as_absolute(program))
        return [program, *rest]

    def router_argv(self, prefill_url: str, decode_url: str, port: str, metrics_port: str) -> list[str]:
        """vllm-router in P/D mode in front of one prefill and one decode server."""
        host = self.settings.host
        return [
            *self.router_command(),
            *("--vllm-pd-disaggregation", "--prefill", prefill_url, "--decode", decode_url),
            *("--policy", "round_robin", "--host", host, "--port", port),
            *("--prometheus-host", host, "--prometheus-port", metrics_port),
        ]

    # ------------------------------------------------------------------ the plan

    def model_path(self, cell: Cell, notes: list[str] | None) -> str:
        """The model directory (or hub id) the engines load; notes: a dry run's, which renders a model not
        built yet as where it would be (None: a run, which needs it)."""
        if notes is None:
            return resolve_model(cell.model_source, self.cache_dir)
        try:
            return resolve_model(cell.model_source, self.cache_dir)
        except CanaryError as exc:
            notes.append(str(exc))
            return str(local_model_dir(cell.model_source, self.cache_dir) or cell.model_source)

    def resources(self, cell: Cell, *, dry_run: bool, notes: list[str]) -> dict[str, EngineResources]:
        """Each engine role's GPUs, cache and shared memory. A run raises what a dry run only notes (a pool
        too small is a ConfigError for both)."""
        missing = self.weights_missing(cell)
        if missing is not None and not dry_run:
            raise CanaryError(missing)
        if missing is not None:
            notes.append(missing)
        devices = self.described_devices(cell, notes) if dry_run else self.devices(cell)
        home, shm = self.hf_home(cell), self.config.target.container.shm
        return {role: EngineResources(tuple(devices.get(role, ())), home, shm) for role in ENGINE_ROLES}

    def plan(
        self,
        cell: Cell,
        ports: Mapping[str, str],
        builds: Mapping[str, EngineBuild],
        *,
        layout_root: Path | str,
        dry_run: bool,
    ) -> CellPlan:
        """Every process of the cell, in start order. `ports` maps port_names to values; `builds` maps each
        image key of the cell to its engine build (a mixed pair has two); layout_root is the cell's log
        directory (each engine's layout probe writes to <role>.layout/ in it). A dry run notes what a run
        would refuse (a model not built, weights not cached, no GPUs to assign) and renders anyway."""
        notes: list[str] = []
        model_path = self.model_path(cell, notes if dry_run else None)
        resources = self.resources(cell, dry_run=dry_run, notes=notes)
        probe = self.config.checks.startup.layout_probe
        layout_dirs = {r: (f"{layout_root}/{r}.layout" if probe else None) for r in ENGINE_ROLES}
        engines: list[tuple[str, int, str | None, str | None]]  # role, block size, NIXL side port, CPU bind
        if cell.topology == "aggregated":
            engines = [("aggregated", cell.prefill_block_size, None, None)]
        else:
            ranks = [cell.tp_for("prefill"), cell.tp_for("decode")]
            binds = cpu_binds(self.cores, 2, ranks) if self.config.platform == "cpu" else [None, None]
            engines = [
                ("prefill", cell.prefill_block_size, ports["prefill_nixl"], binds[0]),
                ("decode", cell.decode_block_size, ports["decode_nixl"], binds[1]),
            ]
        servers = []
        for role_name, block, side, bind in engines:
            build = builds[cell.image_for(role_name)]
            gpus = resources[role_name].devices
            role = EngineRole(
                runner=cell.runner_for(role_name),
                nixl_side_channel_port=side,
                cpu_bind=bind,
                layout_dir=layout_dirs[role_name],
                gpus=gpus or None,
                in_process_core=not (
                    role_name == "prefill" and cell.tp_for("prefill") == 1 and cell.tp_for("decode") > 1
                ),
            )
            env = engine_env(
                self.config,
                role,
                engine_python=build.python,
                cache_dir=self.cache_dir,
                python_path=build.python_path,
                hf_home=resources[role_name].hf_home,
            )
            env.update(next(m for m in self.config.models if m.name == cell.model).env)  # models[].env
            argv = self.engine_argv(cell, str(build.python), model_path, role_name, ports[role_name], block)
            program_len = 1 + len(self.settings.entrypoint)
            sides: list[str] = [side] if side is not None else []
            servers.append(
                ServerPlan(role_name, argv, program_len, env, ports[role_name], resources[role_name], side_ports=sides)
            )
        if cell.topology != "aggregated":
            servers.append(self._router_plan(ports))
        return CellPlan(servers, model_path, notes)

    def _router_plan(self, ports: Mapping[str, str]) -> ServerPlan:
        host = self.settings.host
        command = self.router_command()
        argv = self.router_argv(
            f"http://{host}:{ports['prefill']}",
            f"http://{host}:{ports['decode']}",
            ports["router"],
            ports["router_metrics"],
        )
        router_bin = Path(command[0]).parent if "/" in command[0] else None
        env = router_env(self.config, bin_dir=router_bin, cache_dir=self.cache_dir)
        return ServerPlan(
            "router", argv, len(command), env, ports["router"], None, metrics_port=ports["router_metrics"]
        )
