"""The canary's configuration: one strict pydantic root model loaded from YAML, split by concern.

base (shared types), models (models, images), matrix, checks (assembled from each check folder's
`settings.py`), export, targets (assembled from each target folder's `settings.py`), root (CanaryConfig);
this package re-exports every model (the built-in checks' and targets' settings too) so callers import
from `canary.config` (on first use: see __getattr__).

Every model forbids unknown keys and describes every field. `canary.config.load.load_config` turns
any problem (unreadable file, YAML syntax, unknown key, wrong type, impossible value, unknown
backend) into a `ConfigError` that names the file, the key path and what was expected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from canary.checks.accuracy.settings import AccuracyCheckConfig, DatasetConfig
    from canary.checks.kv_transfer.settings import KvTransferCheckConfig
    from canary.checks.parity.settings import ParityCheckConfig
    from canary.checks.startup.settings import StartupCheckConfig
    from canary.checks.throughput.settings import (
        CapacityConfig,
        LoadParityConfig,
        PairedConfig,
        PerRequestTestConfig,
        SloConfig,
        ThroughputCheckConfig,
    )
    from canary.config.base import ExpectKind, Platform, PositiveInt, Probability, Runner, Strict, Topology
    from canary.config.bisect import BisectConfig
    from canary.config.checks import CheckName, ChecksConfig
    from canary.config.export import ExportConfig, HistoryConfig, PushgatewayConfig
    from canary.config.matrix import CellMatch, Expectation, ExtraCell, MatrixSpec
    from canary.config.models import CompressedCache, ImageSpec, ModelSpec
    from canary.config.root import CanaryConfig
    from canary.config.targets import DevicePoolConfig, TargetConfig
    from canary.targets.container.settings import ContainerTargetConfig, PullPolicy
    from canary.targets.endpoint.settings import EndpointTargetConfig
    from canary.targets.kubernetes.settings import (
        DEFAULT_UCX_TLS,
        UCX_CUDA_TRANSPORTS,
        UCX_NETWORK_TRANSPORTS,
        UCX_TRANSPORTS,
        KubernetesTargetConfig,
        NixlTransportConfig,
        Placement,
        RotationConfig,
    )
    from canary.targets.local.settings import LocalTargetConfig

__all__ = [
    "DEFAULT_UCX_TLS",
    "UCX_CUDA_TRANSPORTS",
    "UCX_NETWORK_TRANSPORTS",
    "UCX_TRANSPORTS",
    "AccuracyCheckConfig",
    "BisectConfig",
    "CanaryConfig",
    "CapacityConfig",
    "CellMatch",
    "CheckName",
    "ChecksConfig",
    "CompressedCache",
    "ContainerTargetConfig",
    "DatasetConfig",
    "DevicePoolConfig",
    "EndpointTargetConfig",
    "ExpectKind",
    "Expectation",
    "ExportConfig",
    "ExtraCell",
    "HistoryConfig",
    "ImageSpec",
    "KubernetesTargetConfig",
    "KvTransferCheckConfig",
    "LoadParityConfig",
    "LocalTargetConfig",
    "MatrixSpec",
    "ModelSpec",
    "NixlTransportConfig",
    "PairedConfig",
    "ParityCheckConfig",
    "PerRequestTestConfig",
    "Placement",
    "Platform",
    "PositiveInt",
    "Probability",
    "PullPolicy",
    "PushgatewayConfig",
    "RotationConfig",
    "Runner",
    "SloConfig",
    "StartupCheckConfig",
    "Strict",
    "TargetConfig",
    "ThroughputCheckConfig",
    "Topology",
]


_MODULES = ("base", "bisect", "checks", "export", "matrix", "models", "root", "targets")
"""The submodules whose names this package re-exports (with every check and target folder's settings module)."""


def __getattr__(name: str) -> object:
    """A re-exported name, imported on first use: importing a check's settings module imports
    canary.config.base, and an eager package would then assemble ChecksConfig before that module is done."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from canary.config.checks import SECTIONS
    from canary.config.targets import TARGET_SECTIONS

    homes = [f"{__name__}.{module}" for module in _MODULES]
    homes += [section.model.__module__ for section in SECTIONS.values()]
    homes += [section.model.__module__ for section in TARGET_SECTIONS.values()]
    for home in homes:
        module = importlib.import_module(home)
        if hasattr(module, name):
            value: object = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} lists {name!r} but no submodule defines it")
